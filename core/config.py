"""The run configuration: one pydantic model with nested sections, YAML presets in package data, dotted overrides.
Every user-facing mistake (unknown key, wrong type, missing preset) becomes one readable KrlError."""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Iterable, Literal, Mapping, Optional, Sequence, Union

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from core.errors import KrlError, did_you_mean

PRESET_SUFFIX = ".yaml"
# Fields that describe where a config came from rather than what it does; diffs against the preset ignore them.
PROVENANCE_KEYS = ("preset", "overrides", "name", "tags")
WEIGHT_NAMES = ("format", "compile", "correctness", "speed", "thinking", "length", "own_kernel_share")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# ---------------------------------------------------------------- sections

class DatasetConfig(_Section):
    batch_size: int = Field(8, ge=1, le=4096, description="problems per step")
    group_size: int = Field(4, ge=1, le=1024, description="samples per problem (one GRPO group)")
    shuffle: bool = Field(True, description="seeded shuffle of the problem order each epoch")


class KernelConfig(_Section):
    backend: Literal["cuda", "triton", "torch"] = "cuda"
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"


class EvalConfig(_Section):
    devices: Union[Literal["auto", "cpu"], list[int]] = "auto"
    correctness_trials: int = Field(5, ge=1, le=1000)
    timing_trials: int = Field(100, ge=1, le=100_000)
    warmup_trials: int = Field(10, ge=0, le=10_000)
    size: Literal["default", "gpu"] = Field("default", description="gpu: apply each problem's gpu_sizes overrides")
    # "auto": a slot per two cores, at most 8 a GPU and 8 a host (evaluator.local.evaluator.slots_per_gpu)
    workers_per_device: Union[Literal["auto"], Annotated[int, Field(ge=1, le=64)]] = "auto"
    cpu_workers: int = Field(2, ge=1, le=256)
    compile_timeout_s: float = Field(180.0, gt=0)
    run_timeout_s: float = Field(60.0, gt=0)
    measure_timing: bool = True
    cluster: Optional[str] = Field(None, description="ray://local | ray://auto | ray://HOST:PORT: evaluate on Ray")
    endpoint: Optional[str] = Field(None, description="http(s):// URL of a `krl serve` service to evaluate on")
    token_env: str = Field("KRL_EVAL_TOKEN", description="environment variable holding the endpoint's token")

    @model_validator(mode="after")
    def _one_place(self) -> "EvalConfig":
        if self.cluster and self.endpoint:
            raise ValueError("set eval.cluster or eval.endpoint, not both")
        if self.cluster and not self.cluster.startswith("ray://"):
            raise ValueError("eval.cluster must look like ray://local, ray://auto or ray://HOST:PORT")
        if self.endpoint and not self.endpoint.startswith(("http://", "https://")):
            raise ValueError("eval.endpoint must be an http:// or https:// URL")
        return self

    @field_validator("devices", mode="before")
    @classmethod
    def _devices(cls, value: Any) -> Any:
        # "0,1" from the command line and a bare int both mean a list of GPU indices.
        if isinstance(value, int) and not isinstance(value, bool):
            return [value]
        if isinstance(value, str) and value not in ("auto", "cpu"):
            parts = [p.strip() for p in value.split(",") if p.strip()]
            if parts and all(p.isdigit() for p in parts):
                return [int(p) for p in parts]
        return value


class RewardWeights(_Section):
    format: float = 0.1
    compile: float = 0.1
    correctness: float = 1.0
    speed: float = 1.0
    thinking: float = 0.05
    length: float = 0.0
    # Share of GPU time in the candidate's own kernels (reported by the evaluator, never judged): 0 by default, since
    # an honest fusion that keeps the GEMM in cuBLAS has a small share and must not be paid less.
    own_kernel_share: float = 0.0


class RewardConfig(_Section):
    weights: RewardWeights = Field(default_factory=RewardWeights)
    speed_mode: Literal["log", "clipped", "minus_one"] = Field(
        "log", description="log: ln(speedup); clipped: min(speedup, speed_clip); minus_one: speedup - 1")
    speed_clip: float = Field(10.0, gt=0, description="speedups above this count as this (all modes)")
    speed_floor: float = Field(
        -0.5, le=0, description="lowest speed value: a slow correct kernel must not score below a wrong one")
    gamma: float = Field(0.4, ge=0, le=1, description="discount between turns: R_t = s_t + gamma * R_{t+1}")
    hack_penalty: float = Field(1.0, ge=0, description="a hack_detected turn scores exactly -hack_penalty")
    partial_credit: bool = Field(False, description="correctness = trials passed k/n instead of 0/1")
    fallback_format_credit: float = Field(
        0.5, ge=0, le=1, description="format credit when the kernel came from a bare fenced block (no <KERNEL>)")
    thinking_min_chars: int = Field(40, ge=0, description="shorter thoughts count as absent")
    length_budget_tokens: int = Field(8192, ge=1, description="responses longer than this are penalised")
    normalise_std: bool = False
    leave_one_out: bool = False
    speedup_timing: Literal["judge", "kernelbench"] = Field(
        "judge", description="which speedup the reward uses: judge (device time, the protocol the hack rules watch) "
        "or kernelbench (eager calls with host launch gaps, as published fast_p figures are measured)")
    # Lazy optimisation (core/reward.py lazy_factor): a correct kernel at about the library's speed whose own kernels do
    # a token share of the GPU time earns part of the correctness credit.
    lazy_speedup_max: float = Field(1.05, ge=0, description="speedups at or below this can count as lazy (0: off)")
    lazy_share_full: float = Field(0.5, gt=0, le=1, description="own-kernel time share that earns full correctness "
                                   "credit at lazy speeds; below it the credit falls linearly to lazy_min_credit")
    lazy_min_credit: float = Field(0.5, ge=0, le=1, description="correctness credit of a lazy kernel whose own "
                                   "kernels do none of the work")


class StageConfig(_Section):
    start_step: int = Field(0, ge=0, le=10_000_000)
    name: str = ""
    # Only the components named here change; the rest keep reward.weights.
    weights: dict[str, float] = Field(default_factory=dict)

    @field_validator("weights")
    @classmethod
    def _known_weights(cls, value: dict[str, float]) -> dict[str, float]:
        for key in value:
            if key not in WEIGHT_NAMES:
                hint = difflib.get_close_matches(key, WEIGHT_NAMES, n=1)
                raise ValueError(f"unknown reward component '{key}'"
                                 + (f" (did you mean '{hint[0]}'?)" if hint else "")
                                 + f"; components: {', '.join(WEIGHT_NAMES)}")
        return value


class EarlyStopConfig(_Section):
    mode: Literal["never", "correct", "speedup"] = Field(
        "correct", description="end an episode early: never, on a correct kernel, or on speedup >= threshold")
    speedup_threshold: float = Field(1.0, gt=0)


class PromptConfig(_Section):
    previous_kernel: Literal["full", "head_tail"] = Field(
        "full", description="how later turns show earlier kernels; head_tail says how many lines it left out")
    max_kernel_chars: int = Field(6000, ge=200, description="head_tail only: kernels longer than this are shortened")
    history: Literal["last", "all"] = Field("last", description="later turns show the last attempt or all of them")


class LossConfig(_Section):
    kind: Literal["importance_sampling", "ppo", "cispo"] = "importance_sampling"
    substeps: int = Field(1, ge=1, le=1000)
    clip_epsilon: float = Field(0.2, gt=0, description="ppo only")
    cispo_clip_low: float = Field(0.0, ge=0, description="cispo only: lower bound of the ratio weight (0: one-sided)")
    cispo_clip_high: float = Field(4.0, gt=0, description="cispo only: upper bound of the ratio weight")
    kl_penalty_coef: float = Field(0.0, ge=0, description="KL penalty against the base model, added to each sampled "
                                   "token's advantage as coef * (mean KL - token KL) (tinker-cookbook's); 0: off")
    remove_constant_reward_groups: bool = Field(True, description="groups with equal rewards are not trained on; "
                                                "false keeps them (they then move only through kl_penalty_coef)")


class OptimConfig(_Section):
    lr: float = Field(1e-5, gt=0)
    warmup_steps: int = Field(0, ge=0, le=10_000_000)
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    grad_clip: Optional[float] = Field(1.0, description="max grad norm; null disables (where the backend supports it)")
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.0


class SamplingConfig(_Section):
    max_tokens: int = Field(8192, ge=1, le=1_048_576)
    context_window: Optional[int] = Field(None, ge=2, description="cap on prompt + response tokens; null: the "
                                          "model's own (max_tokens is clamped to what is left after the prompt)")
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)


class RagConfig(_Section):
    index: Optional[str] = Field(None, description="index folder; null: no retrieval")
    k: int = Field(2, ge=0)
    token_budget: Optional[int] = Field(3000, description="cap on the examples' size in tokens")
    every_turn: bool = Field(False, description="false: examples only in the first prompt")


class ReplayConfig(_Section):
    path: Optional[str] = Field(None, description="recordings JSONL; relative paths resolve against core/data/demo/")


class OpenAIConfig(_Section):
    base_url: str = "http://localhost:8000/v1"
    api_key_env: str = "OPENAI_API_KEY"


class TinkerConfig(_Section):
    base_model: Optional[str] = Field(None, description="null: use `model`")
    lora_rank: int = Field(32, ge=1)
    base_url: Optional[str] = None
    checkpoint_ttl_s: Optional[int] = Field(604800, ge=3600, description="periodic checkpoints expire after this on "
                                            "Tinker (the final one is kept); null: keep all")


class RecoveryConfig(_Section):
    """What a passing service failure (server error, lost connection, expired sampler) costs: the step is retried,
    and a run that gives up keeps a final checkpoint of its last completed step."""

    max_attempts: int = Field(3, ge=1, le=100, description="tries of one step before the run gives up")
    backoff_s: float = Field(10.0, ge=0, description="wait before the first retry; doubles each retry")
    backoff_max_s: float = Field(300.0, ge=0)
    rolling_every: int = Field(1, ge=0, description="save a state-only rolling checkpoint every N steps between "
                               "the periodic ones (backends with a service: tinker); 0: never")
    rolling_ttl_s: int = Field(86400, ge=3600, description="rolling checkpoints expire after this on the service")


class LocalConfig(_Section):
    device: str = Field("auto", description="auto | cpu | cuda | cuda:N")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    lora_rank: int = Field(16, ge=1)


class EvaluationConfig(_Section):
    """Model evaluation (`krl eval`, kind 'eval' runs) and the periodic held-out evaluation of training (eval_every)."""

    samples: int = Field(4, ge=1, description="samples per problem; pass@k is reported for k up to this")
    baselines: list[Literal["eager", "compile"]] = Field(
        default_factory=lambda: ["eager", "compile"],
        description="eager: the reference's own time (every result); compile: torch.compile of the reference, timed "
                    "once per problem in the same evaluation")
    source_run: Optional[str] = Field(None, description="krl eval --run: the training run evaluated")
    source_step: Optional[int] = Field(None, description="its checkpoint step")
    state_path: Optional[str] = Field(None, description="weights loaded into the backend (a run's checkpoint)")
    sampler_path: Optional[str] = Field(None, description="tinker: the checkpoint's saved sampler weights, sampled "
                                        "from directly (no training client)")
    heldout: Optional[str] = Field(
        None, description="eval_every: a problem set held out of training (its problems are removed from training); "
                          "null: a seeded share (heldout_fraction) of `problems` is held out")
    heldout_fraction: float = Field(0.2, gt=0, lt=1)
    heldout_samples: int = Field(1, ge=1, description="eval_every: samples per held-out problem")


class RunConfig(_Section):
    """Everything a run needs; stored fully resolved in the registry."""

    name: Optional[str] = None
    tags: list[str] = Field(default_factory=list)
    preset: Optional[str] = Field(None, description="the preset (or YAML path) this config was built from")
    overrides: list[str] = Field(default_factory=list, description="the dotted overrides applied on top of it")

    model: str = "Qwen/Qwen3-8B"
    backend: Literal["tinker", "local", "openai", "replay"] = "tinker"
    problems: str = "builtin"
    # Upper bounds keep absurd values (a typo, 1e20) a clean config error instead of an overflow deep in a run.
    max_steps: int = Field(100, ge=1, le=10_000_000)
    seed: int = Field(0, ge=-(2**63), le=2**63 - 1)
    max_turns: int = Field(4, ge=1, le=64)
    gpus: int = Field(0, ge=0, le=1024, description="GPUs the job needs (procman assigns them)")
    checkpoint_every: int = Field(10, ge=1, le=10_000_000)
    eval_every: int = Field(0, ge=0, description="evaluate on the held-out problems every N steps (0: never)")
    max_steps_off_policy: int = Field(0, ge=0, le=16, description="sample and evaluate up to K steps ahead while "
                                      "the current step trains (data at most K updates stale); 0: strictly "
                                      "on-policy")
    compute_post_kl: bool = Field(False, description="log the cookbook's kl_pre_post_v1/v2 after each update "
                                  "(tinker: one scoring request per datum)")

    dataset: DatasetConfig = Field(default_factory=DatasetConfig)
    kernel: KernelConfig = Field(default_factory=KernelConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    stages: list[StageConfig] = Field(default_factory=list)
    early_stop: EarlyStopConfig = Field(default_factory=EarlyStopConfig)
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    loss: LossConfig = Field(default_factory=LossConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    rag: RagConfig = Field(default_factory=RagConfig)
    replay: ReplayConfig = Field(default_factory=ReplayConfig)
    openai: OpenAIConfig = Field(default_factory=OpenAIConfig)
    tinker: TinkerConfig = Field(default_factory=TinkerConfig)
    recovery: RecoveryConfig = Field(default_factory=RecoveryConfig)
    local: LocalConfig = Field(default_factory=LocalConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)

    @model_validator(mode="after")
    def _stages_sorted(self) -> "RunConfig":
        starts = [s.start_step for s in self.stages]
        if starts != sorted(starts) or len(set(starts)) != len(starts):
            raise ValueError(f"stages must have increasing, distinct start_step values (got {starts})")
        return self

    def replay_path(self) -> Optional[Path]:
        """replay.path resolved: absolute as given; relative against the packaged demo folder (core/data/demo/),
        unless only the working directory has it; 'demo' names the packaged recordings."""
        if not self.replay.path:
            return None
        if self.replay.path == "demo":
            return demo_dir() / "recordings.jsonl"
        path = Path(self.replay.path).expanduser()
        if path.is_absolute():
            return path
        packaged = demo_dir() / path
        return path.resolve() if path.is_file() and not packaged.is_file() else packaged

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


# ---------------------------------------------------------------- presets

def presets_dir() -> Path:
    return Path(str(resources.files("core") / "data" / "presets"))


def demo_dir() -> Path:
    return Path(str(resources.files("core") / "data" / "demo"))


def list_presets() -> list[str]:
    return sorted(p.name[: -len(PRESET_SUFFIX)] for p in presets_dir().glob(f"*{PRESET_SUFFIX}"))


def _looks_like_path(ref: str) -> bool:
    return ref.endswith((".yaml", ".yml")) or "/" in ref or ref.startswith(".")


def _read_yaml(path: Path, label: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise KrlError(f"cannot read config {label} ({path}): {exc.strerror}.") from None
    except yaml.YAMLError as exc:
        raise KrlError(f"config {label} ({path}) is not valid YAML: {exc}".strip()) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise KrlError(f"config {label} ({path}) must be a YAML mapping of keys to values, not {type(data).__name__}.")
    return data


def _preset_file(ref: str) -> tuple[Path, str]:
    """(file, label) for a preset name or a YAML path."""
    if not _looks_like_path(ref):
        path = presets_dir() / f"{ref}{PRESET_SUFFIX}"
        if path.exists():
            return path, f"preset '{ref}'"
        if not Path(ref).exists():
            names = list_presets()
            raise KrlError(f"no preset '{ref}'.{did_you_mean(ref, names)} Presets: {', '.join(names)}; "
                           "or give a path to a YAML file.")
    path = Path(ref).expanduser()
    if not path.is_file():
        raise KrlError(f"config file '{ref}' does not exist. Give a preset ({', '.join(list_presets())}) or a YAML path.")
    return path, f"file '{ref}'"


def _load_raw(ref: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """The preset's mapping with its `extends:` chain merged in (the child wins)."""
    path, label = _preset_file(ref)
    key = str(path.resolve())
    if key in seen:
        raise KrlError(f"config {label} extends itself through a cycle; remove one of the `extends:` lines.")
    data = _read_yaml(path, label)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise KrlError(f"config {label}: `extends:` must name one preset or YAML path, got {parent!r}.")
    if _looks_like_path(parent) and not Path(parent).expanduser().is_absolute():
        beside = path.parent / parent  # relative to the file that extends it, like an include
        if beside.is_file():
            parent = str(beside.resolve())
    return deep_merge(_load_raw(parent, seen + (key,)), data)


def deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


# ---------------------------------------------------------------- keys, overrides, validation

def valid_keys(model: type[BaseModel] = RunConfig, prefix: str = "") -> list[str]:
    """Every dotted key the config accepts, sections included ('reward', 'reward.weights', 'reward.weights.speed')."""
    keys: list[str] = []
    for name, info in model.model_fields.items():
        dotted = f"{prefix}{name}"
        keys.append(dotted)
        sub = _section_type(info.annotation)
        if sub is not None:
            keys += valid_keys(sub, dotted + ".")
    return keys


def _section_type(annotation: Any) -> Optional[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _unknown_key_error(dotted: str, where: str) -> KrlError:
    keys = valid_keys()
    parent = dotted.rsplit(".", 1)[0] if "." in dotted else ""
    siblings = [k for k in keys if (k.rsplit(".", 1)[0] if "." in k else "") == parent]
    leaf = dotted.rsplit(".", 1)[-1]
    # Whole dotted names catch a wrong section; leaf names catch a right name in the wrong place ('lr' -> optim.lr).
    close = difflib.get_close_matches(dotted, keys, n=3, cutoff=0.6)
    close += [k for k in keys if k.rsplit(".", 1)[-1] == leaf]
    close += [f"{parent}.{c}" if parent else c
              for c in difflib.get_close_matches(leaf, [s.rsplit(".", 1)[-1] for s in siblings], n=2, cutoff=0.6)]
    leaves = {k.rsplit(".", 1)[-1]: k for k in keys}
    close += [leaves[c] for c in difflib.get_close_matches(leaf, list(leaves), n=2, cutoff=0.8)]
    close = list(dict.fromkeys(close))[:3]
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    section = f"'{parent}'" if parent else "the top level"
    listing = ", ".join(s.rsplit(".", 1)[-1] for s in siblings)
    return KrlError(f"unknown config key '{dotted}' ({where}).{hint} Valid keys in {section}: {listing}.")


def check_keys(data: Mapping[str, Any], where: str, model: type[BaseModel] = RunConfig, prefix: str = "") -> None:
    """Raise KrlError for the first key that the config does not have (with the nearest valid names)."""
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if key not in model.model_fields:
            raise _unknown_key_error(dotted, where)
        sub = _section_type(model.model_fields[key].annotation)
        if sub is not None and isinstance(value, Mapping):
            check_keys(value, where, sub, dotted + ".")


def parse_override(text: str) -> tuple[str, Any]:
    """'a.b=value' -> ('a.b', value parsed with YAML scalar rules: 4 -> int, true -> bool, [1,2] -> list)."""
    if "=" not in text:
        raise KrlError(f"override '{text}' must look like KEY=VALUE, e.g. dataset.batch_size=4.")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise KrlError(f"override '{text}' has an empty key; write it like dataset.batch_size=4.")
    raw = raw.strip()
    if raw == "":
        return key, ""
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        value = raw  # e.g. an unbalanced bracket in a free-text value: keep it as text
    return key, value


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    node = data
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        nxt = node.get(part)
        if nxt is None:
            nxt = node[part] = {}
        elif not isinstance(nxt, dict):
            raise KrlError(f"override '{key}': '{'.'.join(parts[: i + 1])}' is a value, not a section.")
        node = nxt
    node[parts[-1]] = value


def apply_overrides(data: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    out = _deep_copy(data)
    for text in overrides:
        key, value = parse_override(text)
        if key in PROVENANCE_KEYS[:2]:
            raise KrlError(f"'{key}' is recorded by kernelrl and cannot be overridden.")
        check_keys(_nest(key, value), f"override '{text}'")
        set_dotted(out, key, value)
    return out


def _nest(key: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    set_dotted(out, key, value)
    return out


def _deep_copy(data: Any) -> Any:
    if isinstance(data, Mapping):
        return {k: _deep_copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_deep_copy(v) for v in data]
    return data


def _error_location(err: Mapping[str, Any]) -> str:
    # Union members ("literal[...]", "list[int]") and validator tags add noise to the location; keep the user's key.
    parts = [str(p) for p in err.get("loc", ())
             if not (isinstance(p, str) and (p.startswith(("function-", "literal[", "list[")) or "[" in p))]
    return ".".join(parts)


def _shown(value: Any) -> str:
    text = repr(value)
    return type(value).__name__ if isinstance(value, (dict, list)) and len(text) > 80 else text


def config_from_dict(data: Mapping[str, Any], where: str = "config") -> RunConfig:
    """Validate a mapping into a RunConfig; unknown keys and bad values become one readable KrlError."""
    check_keys(data, where)
    try:
        return RunConfig.model_validate(dict(data))
    except pydantic.ValidationError as exc:
        # One line per key; a union's alternatives ("'auto' or 'cpu'", "a list") are joined with "or".
        by_key: dict[str, tuple[list[str], Any]] = {}
        for err in exc.errors():
            loc = _error_location(err)
            msgs, _ = by_key.setdefault(loc, ([], err.get("input")))
            msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
            if msgs:
                msg = msg.removeprefix("Input should be ")
            if msg not in msgs:
                msgs.append(msg)
        lines = [f"'{loc}': {' or '.join(msgs)} (got {_shown(got)})" for loc, (msgs, got) in by_key.items()]
        extra = f" (and {len(lines) - 5} more)" if len(lines) > 5 else ""
        raise KrlError(f"invalid {where}: " + "; ".join(lines[:5]) + extra
                       + ". Fix the value; the preset files in core/data/presets show valid examples.") from None


def load_config(preset_or_path: str, overrides: Sequence[str] = ()) -> RunConfig:
    """A preset name ('kevin', 'single-turn', 'demo') or YAML path, plus dotted overrides 'a.b=value'."""
    raw = _load_raw(preset_or_path)
    raw.pop("preset", None)
    raw.pop("overrides", None)
    where = f"preset '{preset_or_path}'" if not _looks_like_path(preset_or_path) else f"file '{preset_or_path}'"
    check_keys(raw, where)
    merged = apply_overrides(raw, overrides)
    merged["preset"] = preset_or_path
    merged["overrides"] = list(overrides)
    label = where + (f" with overrides {' '.join(overrides)}" if overrides else "")
    return config_from_dict(merged, label)


# ---------------------------------------------------------------- flattening and diffs

def flatten(data: Mapping[str, Any] | BaseModel, prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}. Lists (e.g. stages) stay whole values."""
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    out: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def config_diff(a: Mapping[str, Any] | BaseModel, b: Mapping[str, Any] | BaseModel,
                ignore: Sequence[str] = ()) -> dict[str, tuple[Any, Any]]:
    """Dotted key -> (value in a, value in b) for keys whose values differ; a missing key reads as None."""
    flat_a, flat_b = flatten(a), flatten(b)
    out: dict[str, tuple[Any, Any]] = {}
    for key in list(dict.fromkeys([*flat_a, *flat_b])):
        if key in ignore:
            continue
        va, vb = flat_a.get(key), flat_b.get(key)
        if va != vb:
            out[key] = (va, vb)
    return out


def overrides_of(config: RunConfig | Mapping[str, Any], preset: Optional[str] = None) -> dict[str, Any]:
    """Dotted key -> value for the keys whose values differ from the preset the config came from (`preset`, else
    the one recorded in the config, else the defaults). Sorted by key; iterate it for the key names."""
    cfg = config if isinstance(config, RunConfig) else RunConfig.model_validate(dict(config))
    preset = preset or cfg.preset
    base: RunConfig
    if preset:
        try:
            base = load_config(preset)
        except KrlError:
            # The preset file is gone: the recorded overrides are the best answer left.
            flat = flatten(cfg)
            keys = {parse_override(o)[0] for o in cfg.overrides}
            return {k: flat.get(k) for k in sorted(keys)}
    else:
        base = RunConfig()
    diff = config_diff(base, cfg, ignore=PROVENANCE_KEYS)
    return {key: diff[key][1] for key in sorted(diff)}


def with_overrides(config: RunConfig, overrides: Sequence[str]) -> RunConfig:
    """A copy of `config` with more dotted overrides (fork, the new-run form); provenance keeps growing."""
    data = config.model_dump(mode="json")
    merged = apply_overrides(data, overrides)
    merged["overrides"] = list(config.overrides) + list(overrides)
    return config_from_dict(merged, "overrides " + " ".join(overrides))
