"""Model evaluation as a kind of run (kind 'eval'): every problem x sample played through core/rollouts.py with the
same feedback as training, one registry transaction per finished sample, summary metrics from the stored records.
`python -m core.evaluation <run-id>` is the job procman spawns; evaluate_foreground() runs one in this process."""

from __future__ import annotations

import json
import logging
import math
import platform
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Optional, Sequence

from core import scores
from core.backends.factory import open_backend
from core.checkpoint import checkpoint_dir, load_trainer_state
from core.config import RunConfig, config_from_dict
from core.env import make_retriever
from core.errors import KrlError
from core.job import RunLifecycle, configure_logging, job_main, remove_logging, run_job, start_foreground
from core.problems import Problem, load_problem_set
from core.registry import Registry
# eval_conversations and eval_records stay importable from here: the faces read an evaluation through this module.
from core.records import eval_conversations, eval_records  # noqa: F401
from core.run_status import RunStatus
from core.rollouts import Rollout, RolloutRunner, StopRequested
from evaluator.api import DEFAULT_TOLERANCE, KERNELBENCH_CONVENTION, SPEEDUP_CONVENTION

log = logging.getLogger("krl.eval")

MAX_ROLLOUT_THREADS = 64
SUMMARY_STEP = 0  # the step the summary metrics are written at (an eval run has no training steps)
SUMMARY_PREFIX = "eval/"
SUMMARY_EVERY_S = 30.0  # a long evaluation shows partial numbers (runs list, TUI) this often
# The baseline label of speedups timed in KernelBench's convention: fast_p/kbtime/<counting convention>/<p> and
# geomean_speedup/kbtime sit beside the judge's fast_p/eager/... (device time).
KERNELBENCH_TIMING = "kbtime"
# What must match for two evaluations to be compared (the rest of the stamp is shown, not enforced).
COMPARABLE_STAMP_KEYS = ("devices", "precision", "tolerance", "timing", "kernel_backend", "problem_sizes",
                         "torch", "max_turns", "baseline")


def eval_summary(registry: Registry, name_or_id: str | int) -> dict[str, Any]:
    """An eval run's headline numbers recomputed from its stored records, with its stamp and counts."""
    row = registry.get_run(name_or_id)
    if row["kind"] != "eval":
        raise KrlError(f"run '{row['name']}' is a {row['kind']} run, not an evaluation. List evaluations with "
                       "`krl evals ls`.")
    meta = (row.get("summary") or {}).get("eval") or {}
    config = config_from_dict(row["config"] or {}, f"config of run '{row['name']}'")
    records = eval_records(registry, row["id"])
    problem_ids = meta.get("problem_ids") or sorted({r["problem_id"] for r in records})
    keys = {"eager": "speedup", KERNELBENCH_TIMING: "speedup_kernelbench"}  # kbtime: left out when never measured
    if any("speedup_compile" in r for r in records):
        keys["compile"] = "speedup_compile"
    return {
        "name": row["name"], "status": row["status"], "model": row["model"], "backend": row["backend"],
        "problem_set": row["problem_set"], "samples": config.evaluation.samples, "turns": config.max_turns,
        "source_run": config.evaluation.source_run, "source_step": config.evaluation.source_step,
        "problems_total": len(problem_ids),
        "samples_done": len({(r["problem_id"], r["sample"]) for r in records}),
        "scores": scores.summarise(records, problem_ids, config.evaluation.samples, config.max_turns, keys),
        "verdicts": scores.counts(records, "verdict"), "hack_rules": scores.counts(records, "hack_rule"),
        "stamp": meta.get("stamp") or {}, "throughput": meta.get("throughput") or {},
        "baselines": baselines_measured(meta),
    }


def baselines_measured(meta: dict[str, Any]) -> dict[str, Any]:
    """Which baselines the speedups are against: eager always; torch.compile for the problems listed (a problem
    whose compile baseline is unavailable counts as not fast in fast_p/compile and is absent from its geomean)."""
    stored = meta.get("baselines") or {}
    unavailable = {pid: b["unavailable"].get("compile") for pid, b in stored.items()
                   if (b.get("unavailable") or {}).get("compile")}
    return {"eager": "every result", "compile": {
        "measured": sorted(meta.get("compile_over_eager") or {}), "unavailable": unavailable,
        "compile_s": {pid: b.get("compile_s") for pid, b in stored.items() if b.get("compile_s") is not None}}}


# ---------------------------------------------------------------- compare

def stamp_differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    return {key: (a.get(key), b.get(key)) for key in COMPARABLE_STAMP_KEYS if a.get(key) != b.get(key)}


def compare_evals(registry: Registry, name_a: str, name_b: str, force: bool = False,
                  n_resamples: int = 2000) -> dict[str, Any]:
    """B against A on their shared problems: the per-problem table and paired bootstrap intervals of the difference
    in fast_1 (KernelBench convention, best turn) and in geomean speedup. Evaluations made differently (device,
    tolerance, timing, precision, …) are refused unless force, and then the differences travel with the result."""
    summary_a, summary_b = eval_summary(registry, name_a), eval_summary(registry, name_b)
    differences = stamp_differences(summary_a["stamp"], summary_b["stamp"])
    if differences and not force:
        listing = "; ".join(f"{k}: {a!r} vs {b!r}" for k, (a, b) in differences.items())
        raise KrlError(f"evaluations '{summary_a['name']}' and '{summary_b['name']}' were made differently "
                       f"({listing}); their numbers are not comparable. Re-run one to match, or pass --force to "
                       "compare anyway (the differences are printed with the result).")
    incomplete = {s["name"]: f"{s['samples_done']}/{s['problems_total'] * s['samples']} samples, {s['status']}"
                  for s in (summary_a, summary_b) if s["samples_done"] < s["problems_total"] * s["samples"]}
    if incomplete and not force:
        listing = "; ".join(f"'{name}' ({state})" for name, state in incomplete.items())
        raise KrlError(f"not every sample is evaluated yet: {listing}. Its unrun problems would count as unsolved. "
                       "Wait for it to finish or resume it (`krl evals resume NAME`), or pass --force to compare only "
                       "the problems both have finished (the result is marked partial).")
    ids_a = set(_problem_ids(registry, summary_a["name"]))
    ids_b = set(_problem_ids(registry, summary_b["name"]))
    views, unfinished = {}, set()
    for label, summary in (("a", summary_a), ("b", summary_b)):
        records = eval_records(registry, registry.get_run(summary["name"])["id"])
        views[label] = scores.best_by_turn(records)
        if summary["name"] in incomplete:
            # A problem with samples still to play is left out rather than counted as unsolved.
            played: dict[str, set] = {}
            for record in records:
                played.setdefault(record["problem_id"], set()).add(record["sample"])
            unfinished |= {pid for pid in (ids_a | ids_b) if len(played.get(pid, ())) < summary["samples"]}
    # A problem whose source changed between the two evaluations is not the same problem: left out, and said.
    hashes_a, hashes_b = _problem_hashes(registry, summary_a["name"]), _problem_hashes(registry, summary_b["name"])
    changed = sorted(pid for pid in ids_a & ids_b if hashes_a.get(pid) and hashes_b.get(pid)
                     and hashes_a[pid] != hashes_b[pid])
    shared = sorted((ids_a & ids_b) - set(changed) - unfinished)
    fast_a = scores.fast_p_per_problem(views["a"], 1.0, scores.KERNELBENCH, shared)
    fast_b = scores.fast_p_per_problem(views["b"], 1.0, scores.KERNELBENCH, shared)
    best_a, best_b = scores.best_speedup_per_problem(views["a"]), scores.best_speedup_per_problem(views["b"])
    # The geomean comparison needs a speedup on both sides: problems both solved.
    both = [pid for pid in shared if best_a.get(pid) and best_b.get(pid)]
    intervals = [
        scores.paired_bootstrap(fast_a, fast_b, scores.mean, "fast_1/kernelbench", n_resamples),
        scores.paired_bootstrap({p: best_a[p] for p in both}, {p: best_b[p] for p in both}, scores.mean_log,
                                "log_geomean_speedup", n_resamples),
    ]
    table = [{"problem_id": pid, "a_fast_1": fast_a.get(pid), "b_fast_1": fast_b.get(pid),
              "a_best_speedup": best_a.get(pid), "b_best_speedup": best_b.get(pid),
              "a_solved": any(o.correct for o in views["a"] if o.problem_id == pid),
              "b_solved": any(o.correct for o in views["b"] if o.problem_id == pid)} for pid in shared]
    geomean = intervals[1].to_dict()
    if geomean["difference"] is not None:
        # exp of the log interval: the ratio of B's geomean speedup to A's.
        geomean.update(ratio=math.exp(geomean["difference"]), ratio_low=math.exp(geomean["low"]),
                       ratio_high=math.exp(geomean["high"]))
    return {"a": summary_a["name"], "b": summary_b["name"], "shared_problems": len(shared),
            "only_a": sorted(ids_a - ids_b), "only_b": sorted(ids_b - ids_a), "changed_source": changed,
            "partial": incomplete, "unfinished_problems": sorted(unfinished & ids_a & ids_b),
            "fast_1": intervals[0].to_dict(), "geomean_speedup": geomean, "problems": table,
            "stamp_differences": {k: list(v) for k, v in differences.items()}}


def _problem_hashes(registry: Registry, name: str) -> dict[str, str]:
    return ((registry.get_run(name).get("summary") or {}).get("eval") or {}).get("problem_hashes") or {}


def _problem_ids(registry: Registry, name: str) -> list[str]:
    row = registry.get_run(name)
    meta = (row.get("summary") or {}).get("eval") or {}
    return meta.get("problem_ids") or sorted({r["problem_id"] for r in eval_records(registry, row["id"])})


# ---------------------------------------------------------------- the stamp

def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for module in ("torch", "triton", "transformers"):
        try:
            versions[module] = __import__(module).__version__
        except Exception:  # not installed: say so rather than guess
            versions[module] = "absent"
    try:
        from importlib.metadata import version

        versions["kernelrl"] = version("kernelrl")
    except Exception:
        versions["kernelrl"] = "unknown"
    return versions


def make_stamp(config: RunConfig, devices: Sequence[str], device_names: Sequence[str],
               compile_baseline: str) -> dict[str, Any]:
    """How the numbers were made: what must match before two evaluations are compared (COMPARABLE_STAMP_KEYS)."""
    versions = _versions()
    ev = config.eval
    default = DEFAULT_TOLERANCE[config.kernel.precision]
    return {
        "devices": sorted(set(device_names)) or list(devices), "evaluator_devices": list(devices),
        "precision": config.kernel.precision, "kernel_backend": config.kernel.backend,
        "tolerance": {"atol": default, "rtol": default, "source": "KernelBench default for the precision"},
        "timing": {"correctness_trials": ev.correctness_trials, "timing_trials": ev.timing_trials,
                   "warmup_trials": ev.warmup_trials, "clock": "cuda_events" if devices != ["cpu"] else "monotonic",
                   "statistic": "median"},
        "problem_sizes": ev.size, "max_turns": config.max_turns, "torch": versions["torch"], "versions": versions,
        "baseline": {"eager": "the reference module's median, timed by the same worker as each kernel",
                     "compile": compile_baseline},
        "speedups": {"eager": SPEEDUP_CONVENTION, KERNELBENCH_TIMING: KERNELBENCH_CONVENTION,
                     "geomean_clip": list(scores.SPEEDUP_CLIP)},
        "sampling": {"temperature": config.sampling.temperature, "top_p": config.sampling.top_p,
                     "max_tokens": config.sampling.max_tokens},
        "host": platform.node(),
    }


COMPILE_BASELINE_MEASURED = ("torch.compile(mode='default') of the reference, timed interleaved with eager in a "
                             "trusted baseline process on the evaluator's device; speedup_compile = speedup x "
                             "compile median / eager median (evaluator/local/baseline.py)")
COMPILE_BASELINE_CPU_NOTE = ("not measured: CPU evaluator (inductor's C++ build takes minutes per problem on a small "
                             "CPU; KRL_BASELINE_COMPILE_ON_CPU=1 measures it)")
COMPILE_BASELINE_NO_API = "not measured: this evaluator (cluster or HTTP client) has no baseline API"


def compile_baseline_plan(config: RunConfig, evaluator: Any) -> tuple[bool, str]:
    """(measure the torch.compile baseline?, the stamp's words for it)."""
    import os

    if "compile" not in config.evaluation.baselines:
        return False, "not requested"
    if not callable(getattr(evaluator, "measure_baseline", None)):
        return False, COMPILE_BASELINE_NO_API
    if getattr(evaluator, "cpu_mode", False) and os.environ.get("KRL_BASELINE_COMPILE_ON_CPU") != "1":
        return False, COMPILE_BASELINE_CPU_NOTE
    return True, COMPILE_BASELINE_MEASURED


# ---------------------------------------------------------------- the job

class EvaluationJob:
    """Plays every (problem, sample) of a registered eval run that has no stored trajectory yet, writing each as it
    finishes; a stop leaves the finished samples stored and a resume plays only the rest."""

    def __init__(self, registry: Registry, run_id: int, stop_after_samples: Optional[int] = None) -> None:
        self.registry = registry
        self.run_id = run_id
        self.row = registry.get_run(run_id)
        self.name = self.row["name"]
        self.config: RunConfig = config_from_dict(self.row["config"] or {}, f"config of run '{self.name}'")
        self.samples = self.config.evaluation.samples
        self.stop_after_samples = stop_after_samples
        self.stop_event = threading.Event()
        self.stop_reason = ""
        self.backend: Any = None
        self.evaluator: Any = None
        self.problems: list[Problem] = []
        self.samples_written = 0
        self._pool: Optional[ThreadPoolExecutor] = None
        self.lifecycle = RunLifecycle(registry, run_id, thread_name="krl-eval-heartbeat")
        self._baselines: dict[str, Future] = {}
        self._cluster: Any = None  # cluster.json for the TUI's Cluster tab (eval.cluster / eval.endpoint only)

    def request_stop(self, reason: str) -> None:
        if not self.stop_event.is_set():
            self.stop_reason = reason
            self.stop_event.set()
            log.info("%s received: stopping; finished samples are kept", reason)

    def stopped_message(self, stop: StopRequested) -> str:
        return f"{stop} — {self.samples_written} sample(s) written this segment"

    def finished_message(self) -> str:
        return f"{len(self.problems)} problems x {self.samples} samples"

    # ------------------------------------------------------------ setup

    def _load_problems(self) -> None:
        problems = load_problem_set(self.config.problems)
        recorded = getattr(self.backend, "problem_ids", None)
        if callable(recorded):
            have = set(recorded())
            skipped = [p.id for p in problems if p.id not in have]
            problems = [p for p in problems if p.id in have]
            if skipped:
                self.registry.add_event(self.run_id, "warning", f"replay: {len(skipped)} problem(s) have no "
                                                                f"recordings and are skipped: {', '.join(skipped[:6])}")
            if not problems:
                raise KrlError(f"none of the problems in '{self.config.problems}' has recordings in "
                               f"{getattr(self.backend, 'path', 'the replay file')}.")
        self.problems = problems

    def setup(self) -> None:
        self.lifecycle.mark_running(self.request_stop)
        self.lifecycle.start_heartbeat()
        # evaluation.state_path: a training checkpoint's weights (krl eval --run NAME --checkpoint STEP).
        self.backend = open_backend(self.config, state_path=self.config.evaluation.state_path or None,
                                    sampler_path=self.config.evaluation.sampler_path)
        self._load_problems()
        from core.cluster_snapshot import start_recording
        from core.run_evaluator import open_run_evaluator, remote_address

        self.evaluator = open_run_evaluator(self.config.eval)  # local pool, eval.cluster or eval.endpoint
        self._cluster = start_recording(self.evaluator, remote_address(self.config.eval),
                                        self.registry.run_dir(self.name))
        env_config = self.config
        if self.evaluator.cpu_mode and self.config.eval.size == "gpu":
            env_config = self.config.model_copy(update={"eval": self.config.eval.model_copy(
                update={"size": "default"})})
            self.registry.add_event(self.run_id, "warning", "the evaluator runs on the CPU: problems keep their "
                                                            "own sizes instead of eval.size=gpu")
        self.runner = RolloutRunner(self.backend, self.evaluator, env_config, make_retriever(self.config),
                                    self.stop_event, lambda: self.stop_reason)
        width = min(MAX_ROLLOUT_THREADS, len(self.problems) * self.samples)
        self._pool = ThreadPoolExecutor(max_workers=max(1, width), thread_name_prefix="krl-eval")
        self.registry.update_run(self.run_id, total_steps=len(self.problems) * self.samples)

    # ------------------------------------------------------------ the evaluation

    def _done(self) -> set[tuple[str, int]]:
        return {(pid, int(sample)) for pid, sample in self.registry.trajectory_samples(self.run_id)}

    def _write(self, index: int, rollout: Rollout) -> None:
        record = rollout.env.trajectory.to_record(index, rollout.sample, gamma=self.config.reward.gamma)
        # One step per (problem, sample): write_step replaces only that sample if it is ever written again.
        self.registry.write_step(self.run_id, index * self.samples + rollout.sample, {}, [record])
        self.samples_written += 1
        self._write_progress()

    def _write_progress(self) -> None:
        """Finished samples, counted from what is stored (samples finish out of order, so the highest step written
        is not the progress); every face reads this count through core.progress."""
        row = self.registry.get_run(self.run_id)
        summary = dict(row.get("summary") or {})
        meta = dict(summary.get("eval") or {})
        meta["samples_done"] = len(self._done())
        summary["eval"] = meta
        self.registry.update_run(self.run_id, summary=summary)

    def run(self) -> None:
        self.setup()
        done = self._done()
        todo = [(i, p, [s for s in range(self.samples) if (p.id, s) not in done]) for i, p in enumerate(self.problems)]
        todo = [(i, p, samples) for i, p, samples in todo if samples]
        if done:
            self.registry.add_event(self.run_id, "resume", f"{len(done)} sample(s) already evaluated are kept; "
                                                           f"{sum(len(s) for _, _, s in todo)} to go")
        self._write_meta(throughput=None)
        self._write_progress()
        log.info("eval %s: backend %s, model %s, %d problems x %d samples, %d turns, %d sample(s) to play, "
                 "evaluator on %s", self.name, self.config.backend, self.config.model, len(self.problems),
                 self.samples, self.config.max_turns, sum(len(s) for _, _, s in todo),
                 ",".join(self.evaluator.devices))
        t0 = time.monotonic()
        pending: dict[Future, int] = {}
        for index, problem, samples in todo:
            for future in self.runner.submit_group(self._pool, 0, index, problem, 0, samples, self.samples):
                pending[future] = index
        first_error: Optional[BaseException] = None
        turns, eval_s, last_summary = 0, 0.0, time.monotonic()
        while pending:
            finished, _ = wait(list(pending), timeout=1.0, return_when=FIRST_COMPLETED)
            for future in finished:
                index = pending.pop(future)
                try:
                    rollout = future.result()
                except BaseException as exc:  # noqa: BLE001 - the first real error is raised once all have ended
                    if first_error is None or (isinstance(first_error, StopRequested)
                                               and not isinstance(exc, StopRequested)):
                        first_error = exc
                    if not isinstance(exc, StopRequested):
                        self.request_stop(f"a sample failed: {type(exc).__name__}: {exc}")
                    continue
                self._write(index, rollout)
                if not self.lifecycle.still_ours():
                    # A reader ended the run (its heartbeat looked stale): stop the other samples and write nothing
                    # more, so the recorded status stays true.
                    self.request_stop("the run was marked ended")
                    self.lifecycle.check_alive()
                turns += len(rollout.samples)
                eval_s += sum(t.eval_result.phase_times_s.get("total", 0.0)
                              for t in rollout.env.trajectory.transitions if t.eval_result.request_id)
                if self.stop_after_samples is not None and self.samples_written >= self.stop_after_samples:
                    self.request_stop(f"stop after {self.stop_after_samples} samples")
            if pending and time.monotonic() - last_summary > SUMMARY_EVERY_S:
                self.write_summary()
                last_summary = time.monotonic()
        elapsed_s = time.monotonic() - t0
        workers = self.config.eval.cpu_workers if self.evaluator.cpu_mode else \
            len(self.evaluator.devices) * int(getattr(self.evaluator, "workers_per_device", 1))
        # Busy share: the evaluator's own time per request over what its workers could give in the wall time; near
        # 1 means evaluation bounds the throughput (sampling overlaps it), well below 1 means waiting on sampling.
        throughput = {"samples": self.samples_written, "turns": turns, "seconds": round(elapsed_s, 3),
                      "samples_per_min": round(60 * self.samples_written / elapsed_s, 2) if elapsed_s else None,
                      "evaluator_workers": workers, "evaluator_seconds": round(eval_s, 3),
                      "evaluator_busy_frac": round(eval_s / (elapsed_s * workers), 3) if elapsed_s else None}
        if not self.stop_event.is_set():
            self._start_baselines()
        self._collect_baselines()
        self._write_meta(throughput=throughput)
        self.write_summary()
        if first_error is not None and not isinstance(first_error, StopRequested):
            raise first_error
        if self.stop_event.is_set():
            raise StopRequested(self.stop_reason)

    def _write_meta(self, throughput: Optional[dict[str, Any]]) -> None:
        row = self.registry.get_run(self.run_id)
        summary = dict(row.get("summary") or {})
        meta = dict(summary.get("eval") or {})
        device_names = sorted({r["device"] for r in eval_records(self.registry, self.run_id) if r["device"]})
        compile_note = compile_baseline_plan(self.config, self.evaluator)[1]
        meta.update(problem_ids=[p.id for p in self.problems], problem_hashes={p.id: p.hash for p in self.problems},
                    stamp=make_stamp(self.config, self.evaluator.devices, device_names, compile_note))
        if throughput is not None:
            meta["throughput"] = throughput
        summary["eval"] = meta
        self.registry.update_run(self.run_id, summary=summary)

    def _start_baselines(self) -> None:
        """torch.compile baselines of the problems that have none stored yet, measured by the evaluator's trusted
        baseline process once the samples are done, so a baseline never shares the GPU with a timed candidate."""
        measure, _ = compile_baseline_plan(self.config, self.evaluator)
        if not measure:
            return
        from evaluator.local.baseline import BaselineRequest

        stored = ((self.registry.get_run(self.run_id).get("summary") or {}).get("eval") or {}).get("baselines", {})
        ev = self.runner.config.eval  # the sizes the candidates are evaluated at (CPU: the problems' own)
        for problem in self.problems:
            if problem.id in stored:
                continue
            request = BaselineRequest(
                problem_id=problem.id, reference_source=problem.source, problem_hash=problem.hash,
                precision=self.config.kernel.precision, size_overrides=problem.gpu_sizes if ev.size == "gpu" else {},
                timing_trials=ev.timing_trials, warmup_trials=ev.warmup_trials, seed=self.config.seed)
            self._baselines[problem.id] = self.evaluator.measure_baseline(request)

    def _collect_baselines(self) -> None:
        """Wait for the baselines (not when stopping: those not done are measured again on resume) and store them
        in summary.eval: baselines (per problem), compile_over_eager and compile_baseline_ms (measured ones)."""
        if not self._baselines:
            return
        results = {}
        for pid, future in self._baselines.items():
            if self.stop_event.is_set() and not future.done():
                future.cancel()
                continue
            try:
                results[pid] = future.result()
            except Exception as exc:  # noqa: BLE001 - a baseline never fails the evaluation
                log.warning("baseline of %s failed: %s", pid, exc)
        row = self.registry.get_run(self.run_id)
        summary = dict(row.get("summary") or {})
        meta = dict(summary.get("eval") or {})
        stored = dict(meta.get("baselines") or {})
        ratios, compile_ms = dict(meta.get("compile_over_eager") or {}), dict(meta.get("compile_baseline_ms") or {})
        for pid, result in results.items():
            stored[pid] = {"eager_ms": result.eager.median_ms if result.eager else None,
                           "compile_ms": result.compiled.median_ms if result.compiled else None,
                           "compile_s": result.compile_s, "compile_s_now": result.compile_s_now,
                           "compile_record_hit": result.compile_record_hit, "unavailable": result.unavailable,
                           "device_name": result.device_name}
            if result.compile_over_eager is not None:
                ratios[pid], compile_ms[pid] = result.compile_over_eager, result.compiled.median_ms
            else:
                self.registry.add_event(self.run_id, "warning", f"torch.compile baseline of {pid} unavailable: "
                                                                f"{result.unavailable.get('compile', '?')}")
        meta.update(baselines=stored, compile_over_eager=ratios, compile_baseline_ms=compile_ms)
        summary["eval"] = meta
        self.registry.update_run(self.run_id, summary=summary)

    def write_summary(self) -> dict[str, Any]:
        """The headline numbers as metrics of this run (eval/<key>), recomputed from every stored record."""
        summary = eval_summary(self.registry, self.run_id)
        metrics = {SUMMARY_PREFIX + key: value for key, value in summary["scores"].items()}
        self.registry.log_metrics(self.run_id, SUMMARY_STEP, metrics)
        return summary

    def close(self) -> None:
        self.lifecycle.stop()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        if self._cluster is not None:
            self._cluster.stop()  # its last snapshot, while the evaluator still answers
        if self.evaluator is not None:
            closer = threading.Thread(target=self.evaluator.close, daemon=True)
            closer.start()
            closer.join(timeout=15.0)
        if self.backend is not None:
            try:
                self.backend.close()
            except Exception as exc:  # closing is best effort
                log.warning("closing the backend failed: %s", exc)
        self.lifecycle.join()


# ---------------------------------------------------------------- entry points

def execute(registry: Registry, run_id: int, install_signals: bool = True,
            stop_after_samples: Optional[int] = None) -> int:
    """Run a registered eval run to its end here; 0 finished/stopped, 1 failed. SIGTERM/SIGINT stop it (finished
    samples kept, resumable). stop_after_samples: stop like on SIGTERM once that many samples are written (tests)."""
    return run_job(registry, run_id, lambda: EvaluationJob(registry, run_id, stop_after_samples), install_signals)


def create_eval_run(registry: Registry, config: RunConfig, name: Optional[str] = None,
                    tags: Sequence[str] = ()) -> dict[str, Any]:
    from core.procman import unique_run_name

    cfg = config.model_dump(mode="json")
    name = name or config.name or unique_run_name(registry, f"eval-{config.backend}")
    cfg["name"] = name
    return registry.create_run(name, kind="eval", config=cfg, preset=config.preset, model=config.model,
                               backend=config.backend, problem_set=config.problems, gpus_requested=config.gpus,
                               total_steps=None, tags=list(tags) + list(config.tags), status=RunStatus.QUEUED)


def evaluate_foreground(config: RunConfig, name: Optional[str] = None, workspace: Any = None,
                        stop_after_samples: Optional[int] = None, resume: Optional[str] = None) -> dict[str, Any]:
    """Register an eval run (or take the stopped one named `resume`) and execute it in this process; progress on
    stderr and in <ws>/<name>/logs.log. Returns the final runs row."""
    registry = Registry.for_workspace(workspace)
    handlers: list[logging.Handler] = []
    try:
        row = registry.get_run(resume) if resume else create_eval_run(registry, config, name)
        handlers = configure_logging(registry.run_dir(row["name"]) / "logs.log")
        start_foreground(registry, row)
        execute(registry, row["id"], stop_after_samples=stop_after_samples)
        return registry.get_run(row["id"])
    finally:
        remove_logging(handlers)
        registry.close()


def checkpoint_state(registry: Registry, run_name: str, step: Optional[int]) -> tuple[dict[str, Any], dict[str, Any],
                                                                                    Optional[str]]:
    """(run row, checkpoint row, backend state path or None) of a training run's checkpoint (the last when step is
    None): what `krl eval --run NAME --checkpoint STEP` loads."""
    run = registry.get_run(run_name)
    # Rolling checkpoints (state only, short-lived) are resume points for retries, not weights to evaluate.
    checkpoints = [c for c in registry.checkpoints(run["id"]) if not c["name"].endswith("-rolling")]
    if step is not None:
        checkpoints = [c for c in checkpoints if c["step"] == step]
    if not checkpoints:
        have = ", ".join(str(c["step"]) for c in registry.checkpoints(run["id"])) or "none"
        raise KrlError(f"run '{run['name']}' has no checkpoint{f' at step {step}' if step is not None else ''} "
                       f"(checkpoints at steps: {have}).")
    checkpoint = checkpoints[-1]
    state = load_trainer_state(checkpoint_dir(registry.run_dir(run["name"]), checkpoint["name"]))
    backend_state = state.get("backend_state_path") if state.get("backend_can_train") else None
    return run, checkpoint, backend_state or None


def main(argv: Sequence[str] | None = None) -> int:
    return job_main(argv, "python -m core.evaluation", "Run a registered evaluation.", execute)


if __name__ == "__main__":
    sys.exit(main())
