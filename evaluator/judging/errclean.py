"""Turns compiler logs and tracebacks into the few lines a model can learn from, with candidate line numbers.
nvcc/gcc/ld logs → the error lines (+ source and caret); tracebacks → candidate frames; Triton → message + line."""

from __future__ import annotations

import re
import shutil
import subprocess
import traceback
from typing import Optional

# nvcc (EDG front end): "/path/cuda.cu(12): error: ..."; gcc/clang: "/path/main.cpp:12:5: error: ..."
_NVCC_DIAG = re.compile(r"^(?P<file>[^\s()]+?)\((?P<line>\d+)\): (?P<kind>error|catastrophic error|warning)[^:]*: (?P<msg>.*)$")
_GCC_DIAG = re.compile(r"^(?P<file>[^\s:]+?):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<kind>fatal error|error|warning|note): (?P<msg>.*)$")
_LINKER = re.compile(r"undefined reference to|undefined symbol|ld: |collect2: error|ld returned")
_PTXAS = re.compile(r"^ptxas (?:fatal|error)|ptxas.*error", re.IGNORECASE)
_GCC_GUTTER = re.compile(r"^\s*(\d+)?\s*\|")  # "   12 |   foo(x);" and "      |   ^~~"
_GENERIC_ERROR = re.compile(r"\berror\b", re.IGNORECASE)
_NOISE = re.compile(r"^(\[\d+/\d+\]|FAILED:|ninja: |subprocess\.|The above exception|Traceback|  File |    )")


def clean_compile_log(log: str, candidate_source: str, max_chars: int = 2000,
                      generated_files: Optional[dict[str, str]] = None) -> str:
    """The diagnostics that matter from a build log, line numbers mapped into the candidate's source.

    generated_files: basename -> text of the files the build compiled ("cuda.cu", "main.cpp"); when given, each
    diagnostic's line is read from there and located in the candidate, which survives headers the build prepends."""
    lines = log.replace("\r", "").splitlines()
    candidate_lines = candidate_source.splitlines()
    generated = {name: text.splitlines() for name, text in (generated_files or {}).items()}
    errors: list[str] = []
    seen: set[str] = set()
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        match = _NVCC_DIAG.match(line.strip()) or _GCC_DIAG.match(line.strip())
        if match and match.group("kind") in ("error", "fatal error", "catastrophic error"):
            file_name = match.group("file").rsplit("/", 1)[-1]
            line_no = int(match.group("line"))
            # The source line and caret that follow the diagnostic.
            context: list[str] = []
            j = i + 1
            while j < len(lines) and len(context) < 3:
                nxt = lines[j].rstrip()
                if not nxt.strip() or _NVCC_DIAG.match(nxt.strip()) or _GCC_DIAG.match(nxt.strip()):
                    break
                if nxt.lstrip().startswith(("In file included", "from ", "[", "FAILED:", "ninja:", "detected in")):
                    break
                context.append(_GCC_GUTTER.sub("", nxt) if _GCC_GUTTER.match(nxt) else nxt)
                j += 1
            text_line = None
            if file_name in generated and 0 < line_no <= len(generated[file_name]):
                text_line = generated[file_name][line_no - 1]
            elif context:
                text_line = context[0]
            mapped = _map_line(text_line, line_no, generated.get(file_name), candidate_lines)
            where = f"line {mapped}" if mapped else f"{file_name}:{line_no} (generated code, not in your source)"
            if not mapped and file_name == "main.cpp":
                where = "the generated Python binding (main.cpp; check `functions=` and the declarations in cpp_sources)"
            entry = f"{where}: {match.group('kind')}: {match.group('msg').strip()}"
            if context:
                entry += "\n" + "\n".join("    " + c.strip() if k == 0 else "    " + c.rstrip()[len(_indent(context[0])):]
                                          for k, c in enumerate(context[:2]))
            key = entry.split("\n", 1)[0]
            if key not in seen:
                seen.add(key)
                errors.append(entry)
            i = j
            continue
        stripped = line.strip()
        if stripped and (_LINKER.search(stripped) or _PTXAS.search(stripped)) and not stripped.startswith(("c++ ", "g++ ", "/usr/bin/c++", "nvcc ")):
            entry = _demangle_linker_line(stripped)
            if entry not in seen:
                seen.add(entry)
                errors.append(entry)
        i += 1
    if not errors:
        # Unknown format: keep error-looking lines that are not command lines or ninja chatter.
        for line in lines:
            stripped = line.strip()
            if _GENERIC_ERROR.search(stripped) and not _NOISE.match(line) and len(stripped) < 600:
                if stripped not in seen:
                    seen.add(stripped)
                    errors.append(stripped)
    if not errors:
        tail = [l for l in lines if l.strip() and not _NOISE.match(l)][-10:]
        return _cap("Build failed:\n" + "\n".join(tail), max_chars)
    total = len(errors)
    header = f"Compilation failed with {total} error{'s' if total != 1 else ''} (line numbers refer to your source):"
    return _cap_entries(header, errors, max_chars)


def _indent(text: str) -> str:
    return text[: len(text) - len(text.lstrip())]


def _map_line(text_line: Optional[str], line_no: int, generated: Optional[list[str]], candidate: list[str]) -> Optional[int]:
    """Candidate line holding the same code, preferring the match whose neighbours also agree."""
    if text_line is None or not text_line.strip():
        return None
    wanted = text_line.strip()
    matches = [k for k, c in enumerate(candidate) if c.strip() == wanted]
    if not matches:
        return None
    if len(matches) == 1 or generated is None:
        return matches[0] + 1

    def score(k: int) -> int:
        total = 0
        for delta in range(-4, 5):
            g, c = line_no - 1 + delta, k + delta
            if 0 <= g < len(generated) and 0 <= c < len(candidate) and generated[g].strip() == candidate[c].strip():
                total += 1
        return total

    return max(matches, key=score) + 1


_MANGLED = re.compile(r"_Z[\w]+")


def _demangle_linker_line(line: str) -> str:
    names = _MANGLED.findall(line)
    if not names or not shutil.which("c++filt"):
        return line
    try:
        out = subprocess.run(["c++filt", *names], capture_output=True, text=True, timeout=5).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return line
    for name, plain in zip(names, out):
        line = line.replace(name, plain)
    return line


def _cap(text: str, max_chars: int) -> str:
    text = text.strip()
    if len(text) <= max_chars:
        return text
    return text[: max_chars - 16].rstrip() + "\n… [truncated]"


def _cap_entries(header: str, entries: list[str], max_chars: int) -> str:
    """Whole diagnostics, first ones first (the first error usually causes the rest)."""
    out = header
    for k, entry in enumerate(entries):
        if len(out) + 1 + len(entry) > max_chars - 40:
            if k == 0:
                out += "\n" + entry[: max_chars - len(out) - 40]
            out += f"\n… and {len(entries) - k} more error(s)"
            break
        out += "\n" + entry
    return out[:max_chars]


# ---------------------------------------------------------------- Python tracebacks

_COMPILER_DIAGNOSTIC = re.compile(r"(\.(cu|cuh|cpp|cc|h|hpp)\(\d+\)|:\d+(:\d+)?): (fatal )?error")


def clean_traceback(exc: BaseException, candidate_filename: str, max_chars: int = 2000) -> str:
    """The exception with only the frames in the candidate's file (and a compile log or Triton error cleaned)."""
    triton_text = _triton_message(exc, candidate_filename)
    if triton_text:
        return _cap(triton_text, max_chars)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if _same_file(f.filename, candidate_filename)]
    message = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    # Only a build log is cleaned as one: runtime messages such as "CUDA error: an illegal memory access" are not.
    if "Error building extension" in message or _COMPILER_DIAGNOSTIC.search(message):
        source = _read(candidate_filename)
        cleaned = clean_compile_log(message, source or "", max_chars=max_chars)
        message = f"{type(exc).__name__}: {cleaned}"
    parts = []
    if frames:
        parts.append("Traceback (your code only):")
        for frame in frames[-6:]:
            parts.append(f"  line {frame.lineno}, in {frame.name}")
            if frame.line:
                parts.append(f"    {frame.line.strip()}")
    parts.append(_cap(message, max(200, max_chars - sum(len(p) + 1 for p in parts))))
    return _cap("\n".join(parts), max_chars)


def _same_file(a: str, b: str) -> bool:
    return a == b or (bool(b) and a.endswith("/" + b.rsplit("/", 1)[-1]) and a.rsplit("/", 1)[-1] == b.rsplit("/", 1)[-1])


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


def _triton_message(exc: BaseException, candidate_filename: str) -> Optional[str]:
    """Triton's CompilationError: its message plus the line of the candidate it points at."""
    seen = set()
    current: Optional[BaseException] = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if any(cls.__module__.startswith("triton") and cls.__name__ == "CompilationError" for cls in type(current).__mro__):
            break
        current = current.__cause__ or current.__context__
    else:
        return None
    if current is None:
        return None
    node = getattr(current, "node", None)
    src = getattr(current, "src", None)
    detail = getattr(current, "error_message", None) or ""
    lineno = getattr(node, "lineno", None)
    candidate = _read(candidate_filename) or ""
    where = ""
    if lineno and src:
        src_lines = src.split("\n")
        code = src_lines[lineno - 1].strip() if lineno - 1 < len(src_lines) else ""
        base = _find_block(src_lines, candidate.splitlines())
        if base is not None:
            where = f"line {base + lineno - 1}"
        else:
            where = f"line {lineno} of the kernel function"
        if code:
            where += f": {code}"
    inner = detail or str(current).rsplit("\n", 1)[-1]
    cause = current.__cause__
    if not detail and cause is not None:
        inner = "".join(traceback.format_exception_only(type(cause), cause)).strip()
    text = f"Triton compilation error at {where}\n{inner}" if where else f"Triton compilation error:\n{current}"
    return text


def _find_block(block: list[str], candidate: list[str]) -> Optional[int]:
    """1-based candidate line where `block`'s first line (a `def`) sits, checked against its next lines."""
    if not block:
        return None
    first = block[0].strip()
    for k, line in enumerate(candidate):
        if line.strip() == first:
            ok = all(k + d >= len(candidate) or candidate[k + d].strip() == block[d].strip()
                     for d in range(1, min(4, len(block))))
            if ok:
                return k + 1
    return None
