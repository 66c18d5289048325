"""The records a build hands across processes (JSON on every wire): one extension's build and a candidate's
compile record, each with to_dict/from_dict that check every field's type."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class ExtensionBuild:
    """One load_inline call of a candidate: found in the cache, built privately, or failed."""

    key: str                        # extension_key of the call: sources, flags, toolchain
    ok: bool
    module_name: str = ""
    so_name: str = ""               # file name inside build_dir ('' when there is nothing to load)
    so_path: str = ""               # what a GPU worker loads: a verified cache artefact, or a private build
    artefact_sha256: str = ""       # set by the trusted side when it publishes the artefact
    cache_hit: bool = False
    cacheable: bool = True          # a deterministic outcome (failures too); a killed or broken build is not
    build_dir: str = ""             # the private folder it was built in; the trusted side publishes from there
    is_python_module: bool = True
    objects_only: bool = False      # CPU-only torch: compiled (so checked) but not linked
    build_seconds: float = 0.0
    seconds: float = 0.0
    error_message: str = ""
    log_tail: str = ""
    light_header: Optional[bool] = None
    light_fallback: bool = False
    pch: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ExtensionBuild":
        return cls(**_checked_fields(cls, data))


@dataclass
class CompileRecord:
    """What a compile worker answers for one candidate: every extension it asked for, and whether all built."""

    ok: bool
    error_message: str = ""
    cache_hit: bool = False
    seconds: float = 0.0
    builds: list[ExtensionBuild] = field(default_factory=list)
    cache_dir: str = ""
    note: str = ""                  # the candidate failed after its builds: the GPU worker meets it again
    source_sha256: str = ""         # cache entries are scoped to the candidate source (see entry_key)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["artifacts"] = {"builds": data.pop("builds")}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CompileRecord":
        if not isinstance(data, dict):
            raise ValueError("a compile record is a JSON object")
        builds = (data.get("artifacts") or {}).get("builds") or []
        if not isinstance(builds, list):
            raise ValueError("artifacts.builds is not a list")
        fields = _checked_fields(cls, {k: v for k, v in data.items() if k != "builds"})
        return cls(builds=[ExtensionBuild.from_dict(b) for b in builds], **fields)


_FIELD_TYPES = {"str": (str,), "bool": (bool,), "float": (int, float), "Optional[bool]": (bool, type(None))}


def _checked_fields(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """The known, scalar fields of data with the declared types (records come from processes that ran candidates)."""
    if not isinstance(data, dict):
        raise ValueError(f"a {cls.__name__} is a JSON object")
    out = {}
    for spec in dataclasses.fields(cls):
        if spec.name not in data or spec.type not in _FIELD_TYPES:
            continue
        value = data[spec.name]
        if not isinstance(value, _FIELD_TYPES[spec.type]):
            raise ValueError(f"{cls.__name__}.{spec.name} has the wrong type ({type(value).__name__})")
        out[spec.name] = float(value) if spec.type == "float" else value
    return out
