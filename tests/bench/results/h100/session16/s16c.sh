. .gpu/env.sh
# Session 16, call C: the batch's harness made lighter (the sets' draws before the gate, one multiply-add a set behind
# it; the timed hand-over projects the sums alone, the judge's magnitudes after the window): the slot's GPU tests, the
# harness probe again, the slot's rate and identical torch code at 8 slots (default rounds, and 5 + 1), torch at 2.
mkdir -p $OUT/raw
timeout -s INT 230 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=180 -rfE --tb=short \
    tests/evaluator/test_kernelbench_events_gpu.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_attack_corpus.py \
    tests/evaluator/test_device_gate.py tests/evaluator/test_slot_sol_floor.py > $OUT/raw/gpu_tests.txt 2>&1
timeout 40 python3 tests/bench/probe_harness.py > $OUT/raw/probe_harness.txt 2>&1
slot() { name=$1; vars=$2; shift 2; timeout 80 env $vars python3 tests/bench/bench_slot.py "$@" > $OUT/raw/$name.txt 2>&1 ; }
slot triton_default X=1 --slots 8 --n 64 --kinds triton
slot torch_default X=1 --slots 8 --n 32 --kinds torch
slot torch_r51 "KRL_WORKER_TIMING_ROUNDS=5 KRL_WORKER_TIMING_EXTRA_ROUNDS=1" --slots 8 --n 32 --kinds torch
slot torch_s2 X=1 --slots 2 --n 16 --kinds torch
tar -czf $OUT/raw.tgz -C $OUT raw
grep -E "PASSED|FAILED|XFAIL|XPASS|ERROR|^E  " $OUT/raw/gpu_tests.txt | cut -c1-200 | grep -v PASSED | tail -14
echo "passed: $(grep -c PASSED $OUT/raw/gpu_tests.txt)"; tail -1 $OUT/raw/gpu_tests.txt
cut -c1-1000 $OUT/raw/probe_harness.txt
for f in triton_default torch_default torch_r51 torch_s2; do
echo "== $f"; tail -2 $OUT/raw/$f.txt | grep -v "^{" | cut -c1-200
grep "^{" $OUT/raw/$f.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],'med',d.get('speedup_median'),'w5',sum(abs(x-1)<=.05 for x in s),'idle',d.get('gpu_idle_share'),'cpu',d.get('host_cpu_busy_share'),{k:p.get(k) for k in ['total','timing','timing_held','held_rounds','held_sizing','held_kb_rounds','device_wait','timing_spread','timing_extra_rounds']})
    print('rounds', json.dumps(d.get('orders',{}).get('rounds_sample'))[:600])
"
done
