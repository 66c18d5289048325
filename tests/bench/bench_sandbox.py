"""What isolation costs: starting a process in each sandbox that works here (python -c pass, and import torch), and
publishing / verifying a built extension in the build cache. Prints figures; asserts nothing about speed."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from evaluator.isolation.sandbox import NoSandbox, SandboxUnavailable, get_sandbox, worker_spec  # noqa: E402


def say(text: str) -> None:
    print(text, flush=True)


def timed_runs(sandbox, spec, argv: list[str], repeats: int) -> list[float]:
    sandbox.prepare(spec)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(sandbox.command(spec, argv), env=sandbox.launch_env(spec), cwd=sandbox.launch_cwd(spec),
                       check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
    return times


def describe(times: list[float]) -> str:
    ordered = sorted(times)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return f"median {statistics.median(times) * 1e3:7.1f} ms  p90 {p90 * 1e3:7.1f} ms  (n={len(times)})"


def bench_start(repeats: int, torch_repeats: int) -> None:
    sandboxes = [NoSandbox()]
    for kind in ("bwrap", "unshare"):
        try:
            sandboxes.append(get_sandbox(kind))
        except SandboxUnavailable as exc:
            say(f"  {kind}: unavailable ({exc})")
    with tempfile.TemporaryDirectory(prefix="krl-bench-sandbox-") as root:
        os.chmod(root, 0o755)
        for sandbox in sandboxes:
            private = os.path.join(root, sandbox.kind)
            os.makedirs(private)
            spec = worker_spec(private, os.environ, cache_dir=os.path.join(root, "cache"))
            start = timed_runs(sandbox, spec, [sys.executable, "-c", "pass"], repeats)
            torch_start = timed_runs(sandbox, spec, [sys.executable, "-c", "import torch"], torch_repeats)
            say(f"  {sandbox.kind:8s} python -c pass:       {describe(start)}")
            say(f"  {sandbox.kind:8s} python -c 'import torch': {describe(torch_start)}")


def bench_cache(repeats: int) -> None:
    """Publishing a real built extension (hash + copy + manifest) and verifying it at lookup."""
    from evaluator.api import EvalRequest
    from evaluator.build.artefacts import entry_key, lookup, publish_compile
    from evaluator.build.compile import compile_candidate

    source = ("from torch.utils.cpp_extension import load_inline\n"
              "lib = load_inline(name='answer_ext', cpp_sources='extern \"C\" int krl_answer() { return 42; }', "
              "is_python_module=False, no_implicit_headers=True)\n")
    with tempfile.TemporaryDirectory(prefix="krl-bench-cache-") as root:
        private, cache = os.path.join(root, "w"), os.path.join(root, "cache")
        os.makedirs(private)
        os.chdir(private)
        started = time.perf_counter()
        record = compile_candidate(EvalRequest("b", "", source, backend="cuda"), cache, os.path.join(private, "b"))
        say(f"  build of a tiny C++ extension (private folder): {time.perf_counter() - started:.2f} s ok={record.ok}")
        size = os.path.getsize(record.builds[0].so_path)
        publish, verify = [], []
        for k in range(repeats):
            variant = source + f"# {k}\n"  # another candidate source: another entry, published afresh
            started = time.perf_counter()
            published = publish_compile(record.to_dict(), private, cache, variant)
            publish.append(time.perf_counter() - started)
            entry = entry_key(published.source_sha256, published.builds[0].key)
            started = time.perf_counter()
            assert lookup(cache, entry) is not None
            verify.append(time.perf_counter() - started)
        say(f"  publish_compile ({size / 1024:.0f} KiB artefact): {describe(publish)}")
        say(f"  lookup with sha256 verification:          {describe(verify)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--torch-repeats", type=int, default=5)
    args = parser.parse_args()
    say(f"== sandbox start cost ({os.cpu_count()} CPUs, {sys.platform}, uid {os.geteuid()})")
    bench_start(args.repeats, args.torch_repeats)
    say("== build cache: publish and verify")
    bench_cache(args.repeats)


if __name__ == "__main__":
    main()
