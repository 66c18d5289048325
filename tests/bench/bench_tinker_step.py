"""Tinker step timing against the autospecced SDK with a latency model: the update step serialised (before issue 14)
vs forward_backward + optim_step submitted together (now), and a group sampled as one unseeded call vs one per sample.

The training side is a clock-cycle server (tests/core/tinker_sdk_fakes.ClockServer): a request runs in the first
cycle after it arrives, together with everything queued by then. Figures are in cycles as well as seconds, since
the cycle length is the model's assumption, not a measurement of the service.

    .venv/bin/python tests/bench/bench_tinker_step.py [--cycle-s 1.0] [--rtt-s 0.05] [--sample-latency-s 0.5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import tinker  # noqa: E402
from tinker import types  # noqa: E402

from core.backends.base import AdamParams, Datum, SamplingParams  # noqa: E402
from core.train import split_even, update_policy  # noqa: E402
from tests.core.tinker_sdk_fakes import ClockServer, FakeTinker  # noqa: E402

MESSAGES = [{"role": "user", "content": "Write ReLU."}]


def open_backend(fake: FakeTinker):
    import tinker

    from core.backends.tinker import TinkerBackend

    tinker.RestClient = fake.rest_class  # the capability call goes to the fake, not the network
    return TinkerBackend("Qwen/Qwen3-8B", service_client=fake.service)


def serialised_update(backend, datums, substeps: int, adam: AdamParams) -> None:
    """The update as it was: wait for each forward_backward before sending its optim_step."""
    for chunk in split_even(datums, substeps):
        backend.forward_backward(chunk, "importance_sampling", None)
        backend.optim_step(adam)


def time_update(overlapped: bool, substeps: int, cycle_s: float, rtt_s: float, repeats: int) -> list[float]:
    fake = FakeTinker()
    backend = open_backend(fake)
    prompt = backend.render(MESSAGES)
    seqs = backend.sample(prompt, 8, SamplingParams(max_tokens=4096))
    datums = [Datum.from_sample(prompt.tokens, s.tokens, s.logprobs, 1.0 if i % 2 else -1.0)
              for i, s in enumerate(seqs)]
    times = []
    for _ in range(repeats):
        fake.clock = ClockServer(cycle_s=cycle_s, round_trip_s=rtt_s)
        time.sleep(cycle_s * 0.25)  # start a quarter into a cycle, as a step finishing its rollouts would
        start = time.monotonic()
        if overlapped:
            update_policy(backend, datums, substeps, "importance_sampling", None, AdamParams())
        else:
            serialised_update(backend, datums, substeps, AdamParams())
        times.append(time.monotonic() - start)
    return times


def time_group_sampling(mode: str, group: int, latency_s: float, repeats: int) -> list[float]:
    """one_call: num_samples=group, seed None (what the backend sends). per_sample_parallel: `group` calls with
    distinct seeds submitted together. per_sample_serial: the same, each awaited before the next."""
    fake = FakeTinker(sample_latency_s=latency_s)
    backend = open_backend(fake)
    prompt = backend.render(MESSAGES)
    backend.sample(prompt, 1, SamplingParams(max_tokens=64))  # publish the weights outside the timing
    sampler = fake.samplers[-1]
    model_input = types.ModelInput.from_ints(prompt.tokens)
    times = []
    for _ in range(repeats):
        start = time.monotonic()
        if mode == "one_call":
            backend.sample(prompt, group, SamplingParams(max_tokens=4096, seed=7))
        elif mode == "per_sample_parallel":
            futures = [sampler.sample(prompt=model_input, num_samples=1,
                                      sampling_params=types.SamplingParams(max_tokens=4096, seed=7 + i))
                       for i in range(group)]
            [f.result() for f in futures]
        else:
            for i in range(group):
                sampler.sample(prompt=model_input, num_samples=1,
                               sampling_params=types.SamplingParams(max_tokens=4096, seed=7 + i)).result()
        times.append(time.monotonic() - start)
    return times


def summary(times: list[float], unit: float) -> str:
    median = statistics.median(times)
    return f"median {median:6.3f} s  ({median / unit:4.2f} cycles)  min {min(times):6.3f}  max {max(times):6.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycle-s", type=float, default=1.0)
    parser.add_argument("--rtt-s", type=float, default=0.05)
    parser.add_argument("--sample-latency-s", type=float, default=0.5)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"tinker {tinker.__version__}; clock cycle {args.cycle_s} s, round trip {args.rtt_s} s, "
          f"{args.repeats} repeats")
    print("\nupdate step (forward_backward + optim_step per substep):")
    for substeps in (1, 2, 4):
        before = time_update(False, substeps, args.cycle_s, args.rtt_s, args.repeats)
        after = time_update(True, substeps, args.cycle_s, args.rtt_s, args.repeats)
        print(f"  substeps {substeps}  serialised  {summary(before, args.cycle_s)}")
        print(f"  substeps {substeps}  overlapped  {summary(after, args.cycle_s)}")
    print(f"\ngroup of {args.group} first-turn samples, {args.sample_latency_s} s per request in flight:")
    for mode in ("one_call", "per_sample_parallel", "per_sample_serial"):
        times = time_group_sampling(mode, args.group, args.sample_latency_s, args.repeats)
        print(f"  {mode:20s}  median {statistics.median(times):6.3f} s  requests {1 if mode == 'one_call' else args.group}")


if __name__ == "__main__":
    main()
