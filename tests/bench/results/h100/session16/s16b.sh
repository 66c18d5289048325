. .gpu/env.sh
# Session 16, call B: (1) what the batch's harness costs beside the calls (probe_harness.py: value sets, projection,
# step by step); (2) identical torch code at 8 slots with one hardware queue (the default) and with CUDA's 8, and at 2
# slots: is the self-speedup's shortfall (medians 0.93-0.94 in session 15) the queue count or the load?; (3) the
# exclusive hold's A/B on Triton at 8 slots: the default (7 counted + up to 3 extra rounds, 5 ms batches), 2.5 ms
# batches, 5 + 1 rounds, both; identical torch code under both. First, KernelBench's events through the slot with the
# bound's harness taken from the counted rounds (no hold of its own).
mkdir -p $OUT/raw
timeout -s INT 130 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=120 -rfE --tb=short \
    tests/evaluator/test_kernelbench_events_gpu.py > $OUT/raw/gpu_tests.txt 2>&1
timeout 40 python3 tests/bench/probe_harness.py > $OUT/raw/probe_harness.txt 2>&1
slot() { name=$1; vars=$2; shift 2; timeout 85 env $vars python3 tests/bench/bench_slot.py --slots 8 "$@" > $OUT/raw/$name.txt 2>&1 ; }
slot torch_q1 X=1 --n 32 --kinds torch
slot torch_q8 CUDA_DEVICE_MAX_CONNECTIONS=8 --n 32 --kinds torch
timeout 60 python3 tests/bench/bench_slot.py --slots 2 --n 16 --kinds torch > $OUT/raw/torch_s2.txt 2>&1
slot triton_default X=1 --n 64 --kinds triton
slot triton_b25 KRL_WORKER_TIMING_BATCH_MS=2.5 --n 64 --kinds triton
slot triton_r51 "KRL_WORKER_TIMING_ROUNDS=5 KRL_WORKER_TIMING_EXTRA_ROUNDS=1" --n 64 --kinds triton
slot triton_both "KRL_WORKER_TIMING_BATCH_MS=2.5 KRL_WORKER_TIMING_ROUNDS=5 KRL_WORKER_TIMING_EXTRA_ROUNDS=1" --n 64 --kinds triton
slot torch_both "KRL_WORKER_TIMING_BATCH_MS=2.5 KRL_WORKER_TIMING_ROUNDS=5 KRL_WORKER_TIMING_EXTRA_ROUNDS=1" --n 32 --kinds torch
tar -czf $OUT/raw.tgz -C $OUT raw
grep -E "PASSED|FAILED|ERROR|^E  " $OUT/raw/gpu_tests.txt | cut -c1-200 | tail -12; tail -1 $OUT/raw/gpu_tests.txt
cut -c1-900 $OUT/raw/probe_harness.txt
for f in torch_q1 torch_q8 torch_s2 triton_default triton_b25 triton_r51 triton_both torch_both; do
echo "== $f"; tail -2 $OUT/raw/$f.txt | grep -v "^{" | cut -c1-200
grep "^{" $OUT/raw/$f.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],'med',d.get('speedup_median'),'w5',sum(abs(x-1)<=.05 for x in s),'idle',d.get('gpu_idle_share'),'cpu',d.get('host_cpu_busy_share'),{k:p.get(k) for k in ['total','timing','timing_held','held_rounds','held_sizing','held_kb_rounds','held_kb_harness','device_wait','timing_spread','timing_extra_rounds','round_trip']})
"
done
