"""The training loop a run executes: sample groups → evaluate → per-turn rewards/advantages → update → registry.
`python -m core.train <run-id> --workspace W` runs a registered run (procman spawns it); run_foreground() runs here."""

from __future__ import annotations

import json
import logging
import math
import os
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional, Sequence

from core.backends.base import (AdamParams, CheckpointPaths, Datum, TrainingBackend, base_logprobs,
                                submit_forward_backward, submit_optim_step)
from core.backends.factory import open_backend
from core.checkpoint import (append_checkpoint_record, capture_rng, checkpoint_dir, checkpoint_name,
                             load_trainer_state, restore_rng, save_trainer_state)
from core.config import RunConfig, config_from_dict
from core.env import make_retriever
from core.errors import KrlError
from core.heldout import heldout_metrics, split_heldout
from core.job import (MarkedEnded, RunLifecycle, configure_logging, job_main, remove_logging, run_job,
                      start_foreground)
from core.losses import (ACTION_TOKENS, KL_V1_SUM, KL_V2_SUM, SAMPLING_LOGPROB_SUM, add_sums, apply_kl_penalty,
                         loss_fn_config, post_update_kl, sample_train_metrics)
from core.overlap import RolloutPrefetch
from core.problems import Problem, load_problem_set
from core.registry import Registry, TrajectoryRecord
from core.rollouts import Rollout, RolloutRunner, StopRequested, context_metrics, derive_seed, wait_all
from core.step_recovery import (StepRecovery, keep_or_save_final, keep_resume_point, restore_last_completed,
                                rolling_due, save_rolling_checkpoint)
from core.system_metrics import StepSampler, visible_gpu_indices
from core.train_metrics import group_outcome_fractions, rollout_metrics
from core.run_status import RunStatus
from core.reward import BatchAdvantages, StageSchedule, per_turn_advantages

log = logging.getLogger("krl.train")

MAX_ROLLOUT_THREADS = 64


# ---------------------------------------------------------------- determinism helpers

def epoch_order(n_problems: int, epoch: int, seed: int, shuffle: bool) -> list[int]:
    order = list(range(n_problems))
    if shuffle:
        random.Random(derive_seed("data-order", seed, epoch)).shuffle(order)
    return order


def batch_for_step(n_problems: int, step: int, batch_size: int, seed: int,
                   shuffle: bool = True) -> list[tuple[int, int]]:
    """(problem index, epoch) for each group of a step: a pure function of the seed, so a resume sees the same order."""
    batch = []
    for position in range(step * batch_size, (step + 1) * batch_size):
        epoch, offset = divmod(position, n_problems)
        batch.append((epoch_order(n_problems, epoch, seed, shuffle)[offset], epoch))
    return batch


def lr_at(step: int, config: RunConfig) -> float:
    """Learning rate for a 0-based step: linear warmup over optim.warmup_steps, then constant/linear/cosine decay."""
    optim = config.optim
    if optim.warmup_steps and step < optim.warmup_steps:
        return optim.lr * (step + 1) / optim.warmup_steps
    decay_steps = max(1, config.max_steps - optim.warmup_steps)
    progress = min(1.0, max(0.0, (step - optim.warmup_steps) / decay_steps))
    if optim.schedule == "linear":
        return optim.lr * (1.0 - progress)
    if optim.schedule == "cosine":
        return optim.lr * 0.5 * (1.0 + math.cos(math.pi * progress))
    return optim.lr


def split_even(items: Sequence[Any], parts: int) -> list[list[Any]]:
    parts = max(1, min(parts, len(items))) if items else 1
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        out.append(list(items[start:end]))
        start = end
    return out


# ---------------------------------------------------------------- the update

def update_policy(backend: TrainingBackend, datums: Sequence[Datum], substeps: int, loss_kind: str,
                  loss_config: Optional[dict[str, float]], adam: AdamParams) -> dict[str, float]:
    """forward_backward + optim_step for each of `substeps` chunks, every call submitted before any result is
    awaited: Tinker runs a model's requests in order, so a step queued right behind its pass lands in the same clock
    cycle instead of the next one. Returns optim/* metrics, the sampler/trainer KL among them."""
    submitted = [(submit_forward_backward(backend, chunk, loss_kind, loss_config), submit_optim_step(backend, adam))
                 for chunk in split_even(datums, substeps)]
    loss_sum, tokens, grad_norms, gap_sums = 0.0, 0.0, [], {}
    server: dict[str, list[float]] = {}
    for pass_future, step_future in submitted:
        passed, stepped = pass_future.result(), step_future.result()
        loss_sum += passed.get("loss:sum", 0.0)
        tokens += passed.get("tokens", 0.0)
        add_sums(gap_sums, passed)
        if "grad_norm" in stepped:
            grad_norms.append(stepped["grad_norm"])
        for key, value in {**passed, **stepped}.items():
            if key not in _OWN_SUMS:
                server.setdefault(key, []).append(float(value))
    metrics = {"optim/loss": loss_sum, "optim/tokens": tokens, **sample_train_metrics(gap_sums)}
    # Every other metric the service reports, under its own name: ':sum' ones add up over the chunks, the rest
    # are averaged.
    for key, values in server.items():
        metrics[f"optim/{key}"] = sum(values) if key.endswith(":sum") else sum(values) / len(values)
    if grad_norms:
        metrics["optim/grad_norm"] = sum(grad_norms) / len(grad_norms)
    return metrics


_OWN_SUMS = {"tokens", "grad_norm", KL_V1_SUM, KL_V2_SUM, SAMPLING_LOGPROB_SUM, ACTION_TOKENS}


# ---------------------------------------------------------------- the trainer


class Trainer:
    """Runs one registered run from its start (or last checkpoint) to max_steps, writing everything to the registry."""

    def __init__(self, registry: Registry, run_id: int, stop_after_step: Optional[int] = None) -> None:
        self.registry = registry
        self.stop_after_step = stop_after_step
        self.run_id = run_id
        row = registry.get_run(run_id)
        self.name = row["name"]
        self.row = row
        self.config: RunConfig = config_from_dict(row["config"] or {}, f"config of run '{self.name}'")
        self.run_dir = registry.run_dir(self.name)
        self.stop_event = threading.Event()
        self.stop_reason = ""
        self.backend: Optional[TrainingBackend] = None
        self.evaluator: Any = None
        self.rollout_runner: Optional[RolloutRunner] = None
        self.schedule = StageSchedule.from_config(self.config)
        self.retriever: Any = None
        self.env_config: RunConfig = self.config  # what episodes see (eval.size may be adapted to a CPU evaluator)
        self.problems: list[Problem] = []
        self.heldout: list[Problem] = []  # eval_every: problems kept out of training (core/heldout.py)
        self.last_completed_step: Optional[int] = None
        self.last_checkpoint_step: Optional[int] = None
        self.last_checkpoint_final = False
        self.update_started = False  # the current try of a step has sent training calls
        self.recovery: Optional[StepRecovery] = None
        self.prefetch: Optional[RolloutPrefetch] = None
        self.start_step = 0
        self.lifecycle = RunLifecycle(registry, run_id)  # heartbeat, and "a reader ended the run" (core/job.py)
        self.marked_ended = self.lifecycle.marked_ended
        self._pool: Optional[ThreadPoolExecutor] = None
        self._tb: Any = None
        self._system: Optional[StepSampler] = None  # system/* metrics (GPU, CPU, RAM), a mean per step
        self._cluster: Any = None  # cluster.json for the TUI's Cluster tab (eval.cluster / eval.endpoint only)

    # ------------------------------------------------------------ control

    def request_stop(self, reason: str) -> None:
        if not self.stop_event.is_set():
            self.stop_reason = reason
            self.stop_event.set()
            log.info("%s received: stopping after a checkpoint", reason)

    def stopped_message(self, stop: StopRequested) -> str:
        return f"{stop} — checkpoint at step {self.last_checkpoint_step}"

    def finished_message(self) -> str:
        return f"{self.config.max_steps} steps"

    # ------------------------------------------------------------ setup

    def _write_config(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.run_dir / "config.yaml.tmp"
        tmp.write_text(self.config.to_yaml())
        os.replace(tmp, self.run_dir / "config.yaml")

    def _load_problems(self, saved_ids: Optional[list[str]]) -> None:
        problems = load_problem_set(self.config.problems)
        recorded = getattr(self.backend, "problem_ids", None)
        if callable(recorded):
            have = set(recorded())
            skipped = [p.id for p in problems if p.id not in have]
            problems = [p for p in problems if p.id in have]
            if skipped:
                message = (f"replay: {len(skipped)} problem(s) have no recordings and are skipped: "
                           f"{', '.join(skipped[:6])}")
                log.info(message)
                self.registry.add_event(self.run_id, "warning", message)
            if not problems:
                raise KrlError(f"none of the problems in '{self.config.problems}' has recordings in "
                               f"{getattr(self.backend, 'path', 'the replay file')}.")
        if self.config.eval_every:
            problems, self.heldout = split_heldout(problems, self.config)
            self.registry.add_event(self.run_id, "heldout", f"held out of training for eval_every: "
                                                             f"{', '.join(p.id for p in self.heldout)}")
        if saved_ids:
            by_id = {p.id: p for p in problems}
            missing = [pid for pid in saved_ids if pid not in by_id]
            if missing:
                raise KrlError(f"cannot resume run '{self.name}': its problems changed since the checkpoint "
                               f"(missing: {', '.join(missing[:5])}). Fork it with a new problems= instead.")
            problems = [by_id[pid] for pid in saved_ids]
        self.problems = problems

    def _resume_point(self) -> tuple[Optional[dict[str, Any]], Optional[Path], bool]:
        """(checkpoint row, its trainer-state folder, same_run) to restore from, or (None, None, False)."""
        checkpoint = self.registry.last_checkpoint(self.run_id)
        if checkpoint is not None:
            return checkpoint, checkpoint_dir(self.run_dir, checkpoint["name"]), True
        parent_id = self.row.get("parent_run_id")
        if parent_id is None:
            return None, None, False
        parent = self.registry.get_run(int(parent_id))
        candidates = self.registry.checkpoints(parent["id"])
        wanted = self.row.get("parent_step")
        if wanted is not None:
            candidates = [c for c in candidates if c["step"] <= int(wanted)]
        if not candidates:
            raise KrlError(f"fork '{self.name}': parent run '{parent['name']}' has no checkpoint at or before step "
                           f"{wanted}. Fork from a step that has one (`krl runs show {parent['name']}`).")
        checkpoint = candidates[-1]
        if wanted is not None and checkpoint["step"] != int(wanted):
            self.registry.add_event(self.run_id, "warning", f"parent has no checkpoint at step {wanted}; "
                                                            f"starting from step {checkpoint['step']}")
        return checkpoint, checkpoint_dir(self.registry.run_dir(parent["name"]), checkpoint["name"]), False

    def setup(self) -> None:
        self.lifecycle.mark_running(self.request_stop)
        self._write_config()
        self.lifecycle.start_heartbeat()
        checkpoint, folder, same_run = self._resume_point()
        state: dict[str, Any] = {}
        if checkpoint is not None and folder is not None:
            state = load_trainer_state(folder)
            self.start_step = int(state["step"]) + 1
            self.last_completed_step = int(state["step"])
            if same_run:
                self.last_checkpoint_step = int(state["step"])
            restore_rng(state.get("rng"))
            message = (f"resuming from checkpoint {checkpoint['name']} (step {state['step']}"
                       f"{'' if same_run else ' of run ' + str(state.get('run'))}) at step {self.start_step}")
            log.info(message)
            self.registry.add_event(self.run_id, "resume", message)
        # Steps from start_step on are (re)done now, checkpoint or not: a crash before the first checkpoint must
        # not leave the earlier attempt's lines in metrics.jsonl.
        self._truncate_metrics_jsonl(self.start_step)
        backend_state = state.get("backend_state_path") if state.get("backend_can_train") else None
        self.backend = open_backend(self.config, state_path=backend_state or None)
        if backend_state and not self.backend.can_train:
            log.info("backend %s cannot train; checkpoint weights not loaded", self.config.backend)
        self._load_problems(state.get("problem_ids") if same_run else None)
        self.retriever = make_retriever(self.config)
        from core.cluster_snapshot import start_recording
        from core.run_evaluator import open_run_evaluator, remote_address

        self.evaluator = open_run_evaluator(self.config.eval)  # local pool, eval.cluster or eval.endpoint
        self._cluster = start_recording(self.evaluator, remote_address(self.config.eval), self.run_dir)
        self.env_config = self.config
        if getattr(self.evaluator, "cpu_mode", False) and self.config.eval.size == "gpu":
            # gpu_sizes make each reference run for seconds on a CPU: keep the files' own sizes there.
            eval_section = self.config.eval.model_copy(update={"size": "default"})
            self.env_config = self.config.model_copy(update={"eval": eval_section})
            message = ("the evaluator runs on the CPU: problems keep their own sizes instead of eval.size=gpu "
                       "(GPU sizes would take minutes per kernel)")
            log.warning(message)
            self.registry.add_event(self.run_id, "warning", message)
        self.rollout_runner = RolloutRunner(self.backend, self.evaluator, self.env_config, self.retriever,
                                            self.stop_event, lambda: self.stop_reason, self.schedule)
        cfg = self.config
        # Episodes of up to max_steps_off_policy later steps run beside the current step's.
        width = min(MAX_ROLLOUT_THREADS,
                    cfg.dataset.batch_size * cfg.dataset.group_size * (1 + cfg.max_steps_off_policy))
        self._pool = ThreadPoolExecutor(max_workers=max(1, width), thread_name_prefix="krl-rollout")
        self._tb = _tensorboard_writer(self.run_dir)
        self._system = StepSampler(gpu_indices=visible_gpu_indices()).start()
        self.recovery = StepRecovery(cfg.recovery, self.backend,
                                     lambda kind, message: self.registry.add_event(self.run_id, kind, message),
                                     self.stop_event)
        self.prefetch = RolloutPrefetch(self._submit_rollouts, cfg.max_steps_off_policy, cfg.max_steps)
        log.info("run %s: backend %s, model %s, %d problems, steps %d..%d, batch %d x group %d, %d turns, "
                 "evaluator on %s", self.name, self.config.backend, self.config.model, len(self.problems),
                 self.start_step, self.config.max_steps - 1, self.config.dataset.batch_size,
                 self.config.dataset.group_size, self.config.max_turns, ",".join(self.evaluator.devices))

    # ------------------------------------------------------------ episodes

    def _submit_rollouts(self, step: int) -> list:
        cfg = self.config
        batch = batch_for_step(len(self.problems), step, cfg.dataset.batch_size, cfg.seed, cfg.dataset.shuffle)
        futures = []
        for group, (problem_index, epoch) in enumerate(batch):
            futures += self.rollout_runner.submit_group(self._pool, step, group, self.problems[problem_index], epoch,
                                                        range(cfg.dataset.group_size))
        return futures

    # ------------------------------------------------------------ one step

    def _datums(self, rollouts: list[Rollout], advantages: BatchAdvantages) -> list[Datum]:
        by_group: dict[int, list[Rollout]] = {}
        for rollout in rollouts:
            by_group.setdefault(rollout.group, []).append(rollout)
        datums = []
        # Only a KL penalty gives a zero-advantage turn a gradient; without one, skipping it saves a forward pass.
        penalised = self.config.loss.kl_penalty_coef > 0
        for group_index, group in sorted(by_group.items()):
            adv = advantages.groups[group_index]
            if adv.dropped and (self.config.loss.remove_constant_reward_groups or not penalised):
                continue
            for rollout in group:
                for turn, turn_sample in enumerate(rollout.samples):
                    value = adv.advantages[rollout.sample][turn]
                    seq = turn_sample.sequence
                    if (value == 0.0 and not penalised) or not seq.tokens or not turn_sample.prompt.tokens:
                        continue
                    datums.append(Datum.from_sample(turn_sample.prompt.tokens, seq.tokens, seq.logprobs, value))
        return datums

    def _train(self, step: int, datums: list[Datum]) -> dict[str, float]:
        cfg = self.config
        lr = lr_at(step, cfg)
        metrics: dict[str, float] = {"optim/lr": lr, "optim/num_datums": float(len(datums))}
        if not self.backend.can_train or not datums:
            return metrics
        adam = AdamParams(learning_rate=lr, beta1=cfg.optim.beta1, beta2=cfg.optim.beta2, eps=cfg.optim.eps,
                          weight_decay=cfg.optim.weight_decay, grad_clip_norm=cfg.optim.grad_clip or 0.0)
        if cfg.loss.kl_penalty_coef > 0:
            metrics.update(apply_kl_penalty(datums, base_logprobs(self.backend, datums), cfg.loss.kl_penalty_coef))
        self.update_started = True
        metrics.update(update_policy(self.backend, datums, cfg.loss.substeps, cfg.loss.kind,
                                     loss_fn_config(cfg.loss), adam))
        scorer = getattr(self.backend, "post_update_logprobs", None)
        if cfg.compute_post_kl and scorer is not None:
            metrics.update(post_update_kl(datums, scorer(datums)))
        return metrics

    def run_step(self, step: int) -> dict[str, float]:
        cfg = self.config
        t_start = time.monotonic()
        events: list[tuple[str, str]] = []
        switched = self.schedule.switched_at(step)
        if switched is not None:
            events.append(("stage", f"stage {switched.index} ({switched.name}) starts at step {step}"))
        # The weights now are those after `step` updates: data sampled from an older version is off-policy.
        taken = self.prefetch.take(step, version=step)
        rollouts = sorted(wait_all(taken.futures), key=lambda r: (r.group, r.sample))
        self.prefetch.run_ahead(step, version=step)
        t_rollout = time.monotonic()
        groups: dict[int, list[Rollout]] = {}
        for rollout in rollouts:
            groups.setdefault(rollout.group, []).append(rollout)
        group_advs = []
        for group_index in sorted(groups):
            scores = [r.env.trajectory.scores for r in sorted(groups[group_index], key=lambda r: r.sample)]
            group_advs.append(per_turn_advantages(scores, cfg.reward.gamma, cfg.reward.normalise_std,
                                                  cfg.reward.leave_one_out))
        advantages = BatchAdvantages(group_advs)
        train_metrics = self._train(step, self._datums(rollouts, advantages))
        t_train = time.monotonic()
        records: list[TrajectoryRecord] = []
        for rollout in rollouts:
            adv = advantages.groups[rollout.group]
            records.append(rollout.env.trajectory.to_record(rollout.group, rollout.sample, adv.returns[rollout.sample],
                                                            adv.advantages[rollout.sample], cfg.reward.gamma))
        metrics = rollout_metrics([r.env.trajectory for r in rollouts], cfg)
        metrics.update(context_metrics(rollouts))
        metrics.update(advantages.metrics())
        metrics.update(self.schedule.metrics(step))
        metrics.update(train_metrics)
        metrics.update(group_outcome_fractions({g: [r.env.trajectory.solved for r in members]
                                                for g, members in groups.items()}))
        if cfg.max_steps_off_policy:
            metrics.update(self.prefetch.metrics(taken))
        metrics["recovery/retries"] = float(self.recovery.retries)
        metrics["progress/step"] = float(step)
        metrics["progress/done_frac"] = (step + 1) / cfg.max_steps
        metrics["time/rollout"] = t_rollout - t_start
        metrics["time/train"] = t_train - t_rollout
        metrics["time/total"] = time.monotonic() - t_start
        if advantages.n_dropped == len(advantages.groups) and self.backend.can_train:
            events.append(("warning", f"step {step}: every group had equal rewards; no update"))
        if self._system is not None:
            metrics.update(self._system.take())
        self.registry.write_step(self.run_id, step, metrics, records, events)
        self._append_metrics_jsonl(step, metrics)
        if self._tb is not None:
            for key, value in metrics.items():
                self._tb.add_scalar(key, value, step)
            self._tb.flush()
        self.last_completed_step = step
        log.info("step %d (%d/%d)  reward %.3f  correct %.0f%%  solved %.0f%%  fast_1 %.0f%%  dropped %d/%d  %.1fs",
                 step, step + 1, cfg.max_steps, metrics.get("env/all/reward/total", 0.0),
                 100 * metrics.get("env/all/correct_rate", 0.0), 100 * metrics.get("env/all/solved_rate", 0.0),
                 100 * metrics.get("env/all/fast_1", 0.0), advantages.n_dropped, len(advantages.groups),
                 metrics["time/total"])
        return metrics

    def _evaluate_heldout(self, step: int) -> None:
        """eval_every: score the held-out problems with the current weights, as metrics of this step
        (eval/heldout/fast_p/eager/kernelbench/1 beside env/all/reward/total)."""
        metrics = heldout_metrics(self.rollout_runner, self._pool, self.heldout,
                                  self.config.evaluation.heldout_samples, step)
        self.registry.log_metrics(self.run_id, step, metrics)

    def _truncate_metrics_jsonl(self, first_new_step: int) -> None:
        """Drop lines of steps that will be redone (written after the checkpoint we resume from)."""
        path = self.run_dir / "metrics.jsonl"
        if not path.exists():
            return
        kept = []
        for line in path.read_text().splitlines():
            try:
                if json.loads(line).get("step", -1) < first_new_step:
                    kept.append(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill mid-write
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        os.replace(tmp, path)

    def _append_metrics_jsonl(self, step: int, metrics: dict[str, float]) -> None:
        with open(self.run_dir / "metrics.jsonl", "a") as handle:
            handle.write(json.dumps({"step": step, **metrics}) + "\n")

    # ------------------------------------------------------------ checkpoints

    def checkpoint(self, step: int, final: bool = False, rolling: bool = False) -> None:
        """final: the checkpoint a run ends or stops on, which a service keeps (periodic ones may expire).
        rolling: a state-only checkpoint between periodic ones, expiring after recovery.rolling_ttl_s."""
        name = checkpoint_name(step) + ("-rolling" if rolling else "")
        folder = checkpoint_dir(self.run_dir, name)
        folder.mkdir(parents=True, exist_ok=True)
        if rolling:
            paths = CheckpointPaths(self.backend.save_rolling_state(name, self.config.recovery.rolling_ttl_s), None)
        else:
            paths = self.backend.save_state(name, str(folder.parent), final=final)
        trainer_path = save_trainer_state(folder, {
            "step": step, "run": self.name, "seed": self.config.seed,
            "problem_ids": [p.id for p in self.problems], "batch_size": self.config.dataset.batch_size,
            "backend": self.config.backend, "backend_can_train": bool(self.backend.can_train),
            "backend_state_path": paths.state_path or None, "sampler_path": paths.sampler_path,
            "rng": capture_rng(), "time": time.time()})
        state_path = paths.state_path or str(trainer_path)
        self.registry.add_checkpoint(self.run_id, step, name, state_path, paths.sampler_path)
        # The cookbook's `batch` is the batch to run next, so its tools resume where this checkpoint leaves off.
        kind = "rolling" if rolling else "final" if final else "periodic"
        append_checkpoint_record(self.run_dir, {"name": name, "batch": step + 1, "step": step,
                                                "state_path": state_path,
                                                "sampler_path": paths.sampler_path,
                                                "trainer_state_path": str(trainer_path),
                                                "kind": kind, "final": final, "ttl_s": self._ttl_s(kind)})
        if not rolling:  # rolling ones are resume points for retries, not the run's checkpoints
            self.last_checkpoint_step = step
            self.last_checkpoint_final = final
        log.info("checkpoint %s saved (%s)", name, kind)

    def _ttl_s(self, kind: str) -> Optional[int]:
        if kind == "final" or self.config.backend != "tinker":
            return None
        return self.config.recovery.rolling_ttl_s if kind == "rolling" else self.config.tinker.checkpoint_ttl_s

    def _prepare_retry(self, _failure: BaseException) -> None:
        """Before a step is tried again: drop what was sampled ahead, publish a fresh sampler, and undo a
        half-applied update."""
        self.prefetch.discard()
        refresh = getattr(self.backend, "refresh_sampler", None)
        if refresh is not None:
            refresh()
        if self.update_started:
            restore_last_completed(self)

    def _final_checkpoint(self) -> None:
        """Checkpoint the last completed step unless it already has one (step -1 + 1 = 0: nothing done yet is
        checkpointed as the initial state, so a resume always has something to start from)."""
        if self.last_completed_step is None:
            if self.last_checkpoint_step is None and self.backend is not None:
                self.checkpoint(-1, final=True)
            return
        if self.last_checkpoint_step != self.last_completed_step or not self.last_checkpoint_final:
            keep_or_save_final(self, self.last_completed_step)

    # ------------------------------------------------------------ the whole run

    def run(self) -> None:
        """Setup, steps, checkpoints. Raises StopRequested on a stop (after checkpointing)."""
        self.setup()
        cfg = self.config
        self._check_stop_and_checkpoint()
        if self.last_checkpoint_step is None and rolling_due(cfg.recovery, self.backend, -1, False):
            self.checkpoint(self.start_step - 1, rolling=True)  # what a failed first update is undone to
        for step in range(self.start_step, cfg.max_steps):
            try:
                self.update_started = False
                self.recovery.run(step, lambda: self.run_step(step), self._prepare_retry)
                if self._cluster is not None:
                    self._cluster.record_soon()
                if cfg.eval_every and (step + 1) % cfg.eval_every == 0:
                    self._evaluate_heldout(step)
                periodic = (step + 1) % cfg.checkpoint_every == 0 or step == cfg.max_steps - 1
                if periodic:
                    self.recovery.run(step, lambda: self.checkpoint(step, final=step == cfg.max_steps - 1),
                                      lambda _exc: None)
                elif rolling_due(cfg.recovery, self.backend, step, periodic):
                    save_rolling_checkpoint(self, step)
            except StopRequested:
                self._final_checkpoint()
                raise
            except Exception as failure:
                self.prefetch.discard()
                keep_resume_point(self, failure)
                raise
            if not self.registry.heartbeat(self.run_id) or self.marked_ended.is_set():
                raise MarkedEnded(self.registry.get_run(self.run_id)["status"])
            if self.stop_after_step is not None and step >= self.stop_after_step and step < cfg.max_steps - 1:
                self.request_stop(f"stop after step {self.stop_after_step}")
            self._check_stop_and_checkpoint()
        if self.last_completed_step is not None and self.last_checkpoint_step != self.last_completed_step:
            self.checkpoint(self.last_completed_step, final=True)

    def _check_stop_and_checkpoint(self) -> None:
        if self.stop_event.is_set():
            self._final_checkpoint()
            raise StopRequested(self.stop_reason)

    def close(self) -> None:
        self.lifecycle.stop()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        if self._cluster is not None:
            self._cluster.stop()  # its last snapshot, while the evaluator still answers
        if self.evaluator is not None:
            # A stuck worker must not keep a stopping job alive past procman's grace period.
            closer = threading.Thread(target=self.evaluator.close, daemon=True)
            closer.start()
            closer.join(timeout=15.0)
        if self.backend is not None:
            try:
                self.backend.close()
            except Exception as exc:  # closing is best effort
                log.warning("closing the backend failed: %s", exc)
        if self._tb is not None:
            self._tb.close()
        if self._system is not None:
            self._system.stop()
        self.lifecycle.join()


def _tensorboard_writer(run_dir: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except Exception:  # tensorboard is optional
        return None
    try:
        return SummaryWriter(log_dir=str(run_dir / "tensorboard"))
    except Exception:
        return None


# ---------------------------------------------------------------- job entry points

def execute(registry: Registry, run_id: int, install_signals: bool = True,
            stop_after_step: Optional[int] = None) -> int:
    """Run a registered run to its end in this process; returns the exit code (0 finished/stopped, 1 failed).
    Signals: SIGTERM (and SIGINT) → checkpoint → `stopped`. stop_after_step: stop (as on SIGTERM) once that step is
    done — a pause at a known point, e.g. to test resume."""
    return run_job(registry, run_id, lambda: Trainer(registry, run_id, stop_after_step=stop_after_step),
                   install_signals)


def run_foreground(config: RunConfig, name: str | None = None, workspace: Any = None) -> dict[str, Any]:
    """Register a run and execute it in this process (`krl train` without --detach); progress goes to stderr and
    <ws>/<name>/logs.log. Returns the final runs row. Ctrl-C stops it with a checkpoint (resumable)."""
    from core.procman import unique_run_name

    registry = Registry.for_workspace(workspace)
    handlers: list[logging.Handler] = []
    try:
        cfg = config.model_dump(mode="json")
        name = name or config.name or unique_run_name(registry, config.preset or config.backend)
        cfg["name"] = name
        row = registry.create_run(
            name, kind="replay" if config.backend == "replay" else "train", config=cfg, preset=config.preset,
            model=config.model, backend=config.backend, problem_set=config.problems, gpus_requested=config.gpus,
            total_steps=config.max_steps, tags=config.tags, status=RunStatus.QUEUED)
        handlers = configure_logging(registry.run_dir(name) / "logs.log")
        start_foreground(registry, row)
        execute(registry, row["id"])
        return registry.get_run(row["id"])
    finally:
        remove_logging(handlers)
        registry.close()


def main(argv: Sequence[str] | None = None) -> int:
    return job_main(argv, "python -m core.train", "Run a registered kernelrl run.", execute)


if __name__ == "__main__":
    sys.exit(main())
