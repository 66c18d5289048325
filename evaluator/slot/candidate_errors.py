"""How a candidate's failures read to its author: tracebacks cut to the candidate's own frames, compiler logs cleaned,
and the test that tells a build failure from a runtime one."""

from __future__ import annotations

import traceback

MAX_MESSAGE_CHARS = 2000


def cap(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    half = limit // 2 - 20
    return text[:half] + "\n… [truncated] …\n" + text[-half:]


def format_traceback(exc: BaseException, candidate_filename: str) -> str:
    try:
        from evaluator.judging import errclean

        return errclean.clean_traceback(exc, candidate_filename, max_chars=MAX_MESSAGE_CHARS)
    except Exception:
        pass
    # Fallback: keep the frames in the candidate's file plus the exception line.
    frames = traceback.extract_tb(exc.__traceback__)
    lines = []
    for frame in frames:
        if frame.filename == candidate_filename:
            lines.append(f"  line {frame.lineno}, in {frame.name}: {(frame.line or '').strip()}")
    head = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    body = ("Traceback (candidate frames):\n" + "\n".join(lines[-8:]) + "\n") if lines else ""
    return cap(body + head)


def format_compile_error(exc: BaseException, candidate_source: str, candidate_filename: str) -> str:
    text = str(exc)
    if type(exc).__name__ == "CudaBuildError":
        return cap(text)  # compile.py already cleaned the compiler output
    try:
        from evaluator.judging import errclean

        if "Error building extension" in text or "error:" in text:
            return errclean.clean_compile_log(text, candidate_source, max_chars=MAX_MESSAGE_CHARS)
        return errclean.clean_traceback(exc, candidate_filename, max_chars=MAX_MESSAGE_CHARS)
    except Exception:
        pass
    return format_traceback(exc, candidate_filename)


def is_compile_exception(exc: BaseException) -> bool:
    """Kernel build failures: load_inline/nvcc, the compile cache hook, Triton's compiler."""
    for cls in type(exc).__mro__:
        if cls.__module__.startswith("triton") and cls.__name__ in ("CompilationError", "CompileTimeAssertionFailure",
                                                                   "UnsupportedLanguageConstruct", "TritonError",
                                                                   "OutOfResources", "PTXASError"):
            return True
        if cls.__name__ in ("CudaBuildError", "BuildError", "CompileError"):
            return True
    if "Error building extension" in str(exc):
        return True
    for frame in traceback.extract_tb(exc.__traceback__):
        name = frame.filename.replace("\\", "/")
        if name.endswith("torch/utils/cpp_extension.py") or name.endswith("evaluator/build/compile.py"):
            return True
    return False
