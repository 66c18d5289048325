#!/usr/bin/env bash
# The GPU checks a session should run first on a lent GPU machine, each part with a limit that fits one 10-minute
# call: `gpu_check.sh slot` (~7 min: the slot's throughput and the self-speedup of identical code), `gpu_check.sh
# tests` (~5 min: the GPU tests) and `gpu_check.sh kb` (~7 min: the agreement with KernelBench's own evaluator, then
# the runner-events GPU tests; KERNELBENCH_ROOT at a KernelBench checkout); `gpu_check.sh share` (~7 min: the
# device lock's shared steps off and on at 8 slots, then honest speedups beside hogs); `gpu_check.sh cupti` (~4 min:
# identical code with the runner's CUPTI detached after its checks, the default, and kept attached; then the runner
# traits' own host cost, bench_runner_overhead.py); `gpu_check.sh pin` (~4 min: identical code and Triton with the
# timed pair on one CPU, KRL_WORKER_TIMING_SAME_CPU=1, at one slot and eight); `gpu_check.sh profile` (~2 min: the judges'
# own CPU by function at 8 slots, slot/judge_profile.py); `gpu_check.sh rounds` (~7 min: the GPU's counted and extra
# rounds at most, 7+3 by default, against 5+1 and 3+1 for Triton and 5+1 for identical torch code: the exclusive hold
# a task against the self-speedup); `gpu_check.sh batch` (~6 min: the GPU's batch target, 5 ms against 2.5 ms, for
# Triton and identical torch code); `gpu_check.sh churn` (~2 min, on a multi-GPU kind: CUDA contexts made and ended a
# second on one GPU and on all, plain and profiled, bench_context_churn.py); `gpu_check.sh gate` (~5 min: device gates on,
# the default, against off at 8 slots, Triton and identical torch code, then the gate's GPU test); `gpu_check.sh alloc` (~5 min: where the judges'
# device allocations are made, KRL_WORKER_ALLOC_HISTORY, at 8 Triton slots and in the small GEMM problems' KernelBench
# rounds); `gpu_check.sh drain` (~7 min: identical torch code with the defaults, with the picked outputs' comparison
# unheld and with a window a round, then Triton and the hogs: what moves the self-speedup and what the drains cost);
# `gpu_check.sh slices` (~3 min: a spinning process beside a timed batch and a global-timer probe, probe_time_slices.py,
# then the spin attack through the slot); `gpu_check.sh probe` (~6 min: the spin attacks and the honest matmul with the
# judge's gap probe off and on, bench_spin_attacks.py, its GPU test, then Triton and identical torch code at 8 slots
# with the probe off and on in turn); `gpu_check.sh gaps` (~7 min: the spares warmed beside their task under a shared hold
# against the default, Triton at 1 and 8 slots and identical torch code, the gap probe on to count gapped tasks).
# Run from the repository root with $OUT set (the device tool sets it); bubblewrap's .deb files in .gpu/deb if the machine lacks
# it. Results land in $OUT; a summary is printed at the end.
set -u
PARTS=" ${*:-slot tests} "
OUT=${OUT:-/tmp/gpu_check}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} MAX_JOBS=16
if ! command -v bwrap >/dev/null && ls .gpu/deb/*.deb >/dev/null 2>&1; then
    mkdir -p /tmp/deb && for f in .gpu/deb/*.deb; do dpkg -x "$f" /tmp/deb; done
    export PATH=/tmp/deb/usr/bin:$PATH LD_LIBRARY_PATH=/tmp/deb/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
nvidia-smi -L > "$OUT/device.txt" 2>&1
if [[ $PARTS == *" slot "* ]]; then  # one slot, then eight (the default on 16 cores), Triton; then CUDA at eight;
    # then identical torch code at eight (its speedups are the self-speedup distribution)
    timeout 90 python3 tests/bench/bench_slot.py --n 12 --slots 1 --kinds triton > "$OUT/slot.txt" 2>&1
    timeout 90 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton >> "$OUT/slot.txt" 2>&1
    timeout 150 python3 tests/bench/bench_slot.py --n 16 --slots 8 --kinds cuda >> "$OUT/slot.txt" 2>&1
    timeout 70 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch >> "$OUT/slot.txt" 2>&1
fi
if [[ $PARTS == *" cupti "* ]]; then  # identical code with the runner's CUPTI detached after its checks (the default,
    # evaluator/judging/timing.release_cupti) and kept attached (KRL_WORKER_CUPTI_TEARDOWN=0), then Triton
    timeout 70 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch > "$OUT/slot.txt" 2>&1
    KRL_WORKER_CUPTI_TEARDOWN=0 timeout 70 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch \
        >> "$OUT/slot.txt" 2>&1
    timeout 90 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton >> "$OUT/slot.txt" 2>&1
    timeout 150 python3 tests/bench/bench_runner_overhead.py --repeats 2 > "$OUT/overhead.txt" 2>&1
fi
if [[ $PARTS == *" pin "* ]]; then  # the judge's timing thread and the runner on one CPU while the device is held
    # (isolation/timing_priority.py, opt-in), against the default at one slot, then at eight with Triton too
    timeout 60 python3 tests/bench/bench_slot.py --n 12 --slots 1 --kinds torch > "$OUT/slot.txt" 2>&1
    KRL_WORKER_TIMING_SAME_CPU=1 timeout 60 python3 tests/bench/bench_slot.py --n 12 --slots 1 --kinds torch \
        >> "$OUT/slot.txt" 2>&1
    KRL_WORKER_TIMING_SAME_CPU=1 timeout 80 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch \
        >> "$OUT/slot.txt" 2>&1
    KRL_WORKER_TIMING_SAME_CPU=1 timeout 90 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton \
        >> "$OUT/slot.txt" 2>&1
fi
if [[ $PARTS == *" profile "* ]]; then  # where the judges' own CPU goes at 8 slots (the slot's bound since session 8)
    timeout 120 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton --profile > "$OUT/profile.txt" 2>&1
fi
if [[ $PARTS == *" rounds "* ]]; then  # the exclusive hold (0.21 s a Triton task on an H200, half of it the counted
    # rounds: 6, none extra, each side's two fastest) against the fidelity, with 4 and 8 rounds
    timeout 90 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton > "$OUT/slot.txt" 2>&1
    for pair in 4,0 8,0; do
        KRL_WORKER_TIMING_ROUNDS=${pair%,*} KRL_WORKER_TIMING_EXTRA_ROUNDS=${pair#*,} timeout 90 \
            python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton >> "$OUT/slot.txt" 2>&1
    done
    timeout 70 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch >> "$OUT/slot.txt" 2>&1
    KRL_WORKER_TIMING_ROUNDS=4 KRL_WORKER_TIMING_EXTRA_ROUNDS=0 timeout 70 \
        python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch >> "$OUT/slot.txt" 2>&1
fi
if [[ $PARTS == *" batch "* ]]; then  # the GPU's batch target (5 ms by default; batches are sized on a warm round
    # since session 10, so longer than before and each round holds the device longer) against 2.5 ms: rate, hold and
    # identical torch code's self-speedups
    for ms in "" 2.5; do
        KRL_WORKER_TIMING_BATCH_MS=$ms timeout 90 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton \
            >> "$OUT/slot.txt" 2>&1
        KRL_WORKER_TIMING_BATCH_MS=$ms timeout 70 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch \
            >> "$OUT/slot.txt" 2>&1
    done
fi
if [[ $PARTS == *" alloc "* ]]; then  # where the judges' device allocations are made (slot/allocation_sites.py):
    # Triton at 8 slots, then the small GEMM problems' agreement with KernelBench (their KernelBench rounds' sites)
    KRL_WORKER_ALLOC_HISTORY=$OUT/alloc timeout 120 python3 tests/bench/bench_slot.py --n 24 --slots 8 \
        --kinds triton > "$OUT/alloc.txt" 2>&1
    python3 tests/bench/summarize_alloc_sites.py "$OUT/alloc" >> "$OUT/alloc.txt" 2>&1
    if [[ -n "${KERNELBENCH_ROOT:-}" ]]; then
        KRL_WORKER_ALLOC_HISTORY=$OUT/alloc_kb timeout 200 python3 tests/bench/bench_kernelbench_agreement.py \
            --only 27,30,31,33,34 --out "$OUT/alloc_kb.json" --budget-s 170 --skip-kernelbench > "$OUT/alloc_kb.txt" 2>&1
        python3 tests/bench/summarize_alloc_sites.py "$OUT/alloc_kb" >> "$OUT/alloc_kb.txt" 2>&1
    fi
    tail -30 "$OUT/alloc.txt"; tail -30 "$OUT/alloc_kb.txt" 2>/dev/null
fi
if [[ $PARTS == *" gate "* ]]; then  # slot/device_gate.py on and off, the same machine
    for gate in 1 0; do
        KRL_WORKER_TIMING_GATE=$gate timeout 80 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton \
            >> "$OUT/slot.txt" 2>&1
        KRL_WORKER_TIMING_GATE=$gate timeout 60 python3 tests/bench/bench_slot.py --n 24 --slots 8 --kinds torch \
            >> "$OUT/slot.txt" 2>&1
    done
    timeout -s INT 120 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=110 -rfE --tb=short \
        tests/evaluator/test_device_gate.py > "$OUT/gate_tests.txt" 2>&1
fi
if [[ $PARTS == *" churn "* ]]; then  # why 4 GPUs of one host evaluated no faster than one (session 11)
    gpus=$(nvidia-smi -L | wc -l)
    timeout 240 python3 tests/bench/bench_context_churn.py --gpus "1,$gpus" --lanes 8 --seconds 20 \
        > "$OUT/churn.txt" 2>&1
fi
if [[ $PARTS == *" share "* ]]; then  # the device lock's shared steps (docs/slot.md): off, on; then beside hogs
    KRL_WORKER_DEVICE_SHARED_STEPS=0 timeout 90 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds triton \
        > "$OUT/share.txt" 2>&1
    KRL_WORKER_DEVICE_SHARED_STEPS=1 timeout 90 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds triton \
        >> "$OUT/share.txt" 2>&1
    timeout 280 python3 tests/bench/bench_device_share.py --n 16 --slots 8 >> "$OUT/share.txt" 2>&1
fi
if [[ $PARTS == *" drain "* ]]; then  # ~7 min: the defaults (every step shared, the counted rounds held together),
    # then the picked outputs' comparison unheld, then a window a round: identical torch code (the self-speedup, which
    # the shorter steps of session 24 moved) and beside hogs (device_drain, shared_hold_<step>, device_windows)
    timeout 80 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch > "$OUT/slot.txt" 2>&1
    KRL_WORKER_DEVICE_SHARED_STEPS=trials,checks,timing_inputs,recheck,warm_rounds timeout 80 python3 \
        tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch >> "$OUT/slot.txt" 2>&1
    KRL_WORKER_TIMING_HOLD_TOGETHER=0 timeout 80 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch \
        >> "$OUT/slot.txt" 2>&1
    timeout 100 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton >> "$OUT/slot.txt" 2>&1
    timeout 100 python3 tests/bench/bench_device_share.py --n 16 --slots 8 --passes 1 > "$OUT/share.txt" 2>&1
fi
if [[ $PARTS == *" slices "* ]]; then  # ~3 min: a spinning process beside a timed batch (does it slow it, does a
    # global-timer probe see the time slices), then the spin attack through the slot (docs/known-gaps.md)
    timeout 90 python3 tests/bench/probe_time_slices.py > "$OUT/slices.txt" 2>&1
    timeout -s INT 120 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=110 -rfE --tb=short \
        "tests/evaluator/test_attack_corpus.py::test_cuda_attack_is_stopped[gpu_spin_beside_reference]" \
        > "$OUT/slices_tests.txt" 2>&1
fi
if [[ $PARTS == *" probe "* ]]; then  # ~6 min: the gap probe (slot/gap_probe.py): what the attacks gain, what it costs
    timeout 130 python3 tests/bench/bench_spin_attacks.py --repeats 1 > "$OUT/spin.txt" 2>&1
    timeout -s INT 60 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=50 -rfE --tb=short \
        tests/evaluator/test_gap_probe.py > "$OUT/probe_tests.txt" 2>&1
    for probe in 0 1; do
        KRL_WORKER_TIMING_GAP_PROBE=$probe timeout 90 python3 tests/bench/bench_slot.py --n 48 --slots 8 \
            --kinds triton >> "$OUT/slot.txt" 2>&1
        KRL_WORKER_TIMING_GAP_PROBE=$probe timeout 75 python3 tests/bench/bench_slot.py --n 32 --slots 8 \
            --kinds torch >> "$OUT/slot.txt" 2>&1
    done
fi
if [[ $PARTS == *" gaps "* ]]; then  # ~7 min: the spares warmed beside their task under a shared hold
    # (KRL_WORKER_SPARES_WARM_SHARED=beside, slot/upkeep_hold.py; session 27, call A) against the default, with the gap probe
    # on so each run says how many tasks had a gapped window (session 26: the spares are the honest gaps at one slot)
    export KRL_WORKER_TIMING_GAP_PROBE=1
    for spares in 0 beside; do
        KRL_WORKER_SPARES_WARM_SHARED=$spares timeout 70 python3 tests/bench/bench_slot.py --n 16 --slots 1 \
            --kinds triton >> "$OUT/slot.txt" 2>&1
        KRL_WORKER_SPARES_WARM_SHARED=$spares timeout 95 python3 tests/bench/bench_slot.py --n 48 --slots 8 \
            --kinds triton >> "$OUT/slot.txt" 2>&1
    done
    KRL_WORKER_SPARES_WARM_SHARED=beside timeout 75 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch \
        >> "$OUT/slot.txt" 2>&1
    unset KRL_WORKER_TIMING_GAP_PROBE
fi
if [[ $PARTS == *" kb "* && -n "${KERNELBENCH_ROOT:-}" ]]; then
    timeout 280 python3 tests/bench/bench_kernelbench_agreement.py --only 0,3,8,10-25,27,30-36 --out "$OUT/kb.json" \
        --budget-s 250 --kb-repeats 2 > "$OUT/kb.txt" 2>&1
fi
if [[ $PARTS == *" kb "* ]]; then  # the runner's event times within the judge's bounds, through the real slot
    timeout -s INT 200 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=180 -rfE --tb=short \
        tests/evaluator/test_kernelbench_events_gpu.py > "$OUT/kb_tests.txt" 2>&1
fi
if [[ $PARTS == *" tests "* ]]; then
    timeout -s INT 300 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=280 -rfE --tb=short \
        tests/evaluator/test_device_gate.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_slot_sol_floor.py \
        tests/evaluator/test_attack_corpus.py tests/evaluator/test_triton_launchers.py \
        tests/evaluator/test_output_digest.py tests/evaluator/test_slot_projection_attacks.py > "$OUT/gpu_tests.txt" 2>&1
fi
cat "$OUT/device.txt"
[ -f "$OUT/slot.txt" ] && python3 - "$OUT/slot.txt" <<'PY'
import json, sys  # per run: rate, verdicts, the exclusive hold's split, and identical code's speedups within 5%
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line); p = r["phase_mean_s"]; s = r.get("speedups") or []
        print(r["kind"], r["slots"], "gate", r.get("timing_gate"), "cupti_teardown", r.get("cupti_teardown"),
              "same_cpu", r.get("same_cpu"),
              "rounds", r.get("timing_rounds") or "6", "+", r.get("timing_extra_rounds") or "0",
              "batch_ms", r.get("timing_batch_ms") or "5",
              f"{r['correct']}/{r['n']}",
              r["evals_per_min"], "/min", r["verdicts"],
              "held", p.get("timing_held"), "rounds+hooks", round(p.get("timing_rounds", 0) + p.get("timing_hooks", 0), 3), "wait", p.get("device_wait"),
              "ready", p.get("judge_ready"), "speedup median", r.get("speedup_median"),
              "within 5%", sum(abs(v - 1) <= 0.05 for v in s), "of", len(s),
              "interfered", p.get("timing_interfered_rounds"))
        print("   held by window", {k[5:]: v for k, v in p.items() if k.startswith("held_")},
              "round ratios", (r.get("orders") or {}).get("round_ratios"))
        print("   gap probe", r.get("gap_probe"), "gapped tasks", r.get("gapped_tasks"), "largest gap ms",
              r.get("gap_largest_ms"), "gapped rounds", p.get("timing_gapped_rounds"), "spares warm shared",
              r.get("spares_warm_shared"), p.get("spares_warm"))
        print("   shared", r.get("device_shared_steps"), "drain", p.get("device_drain"), "windows",
              p.get("device_windows"), {k[12:]: v for k, v in p.items() if k.startswith("shared_hold_")})
PY
[ -f "$OUT/share.txt" ] && cut -c1-1500 "$OUT/share.txt"
[ -f "$OUT/slices.txt" ] && grep "^{" "$OUT/slices.txt"
[ -f "$OUT/spin.txt" ] && grep "^{" "$OUT/spin.txt" | cut -c1-300
[ -f "$OUT/probe_tests.txt" ] && grep -E "passed|failed" "$OUT/probe_tests.txt" | tail -2
[ -f "$OUT/slices_tests.txt" ] && grep -E "PASSED|FAILED|^E  " "$OUT/slices_tests.txt" | cut -c1-300 | tail -5
[ -f "$OUT/profile.txt" ] && grep -A40 "^judges' profile" "$OUT/profile.txt" | cut -c1-160
[ -f "$OUT/overhead.txt" ] && cat "$OUT/overhead.txt"
[ -f "$OUT/kb.txt" ] && grep -E "^both correct|^diagnostic|^against|^KernelBench against" "$OUT/kb.txt"
[ -f "$OUT/kb_tests.txt" ] && grep -E "passed|failed|FAILED|ERROR" "$OUT/kb_tests.txt" | tail -8
[ -f "$OUT/gpu_tests.txt" ] && grep -E "passed|failed|FAILED|ERROR" "$OUT/gpu_tests.txt" | tail -15
[ -f "$OUT/gate_tests.txt" ] && grep -E "passed|failed|FAILED|ERROR" "$OUT/gate_tests.txt" | tail -5
exit 0
