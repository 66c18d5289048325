. .gpu/env.sh
# Session 20, call C (one H200), on the code where a slot's runners hold only their own GPU's node: the slot's GPU
# tests; the Triton rate at 8 slots; the live agreement with KernelBench's own evaluator at 2 slots with the judge's
# clock readings after each of KernelBench's rounds (KRL_WORKER_KB_CLOCKS=1, set by the bench; never run before) and
# KernelBench's own SM clock per pair: do the tasks where both evaluators read a small problem 2-5x slow come with a
# low clock?
mkdir -p $OUT/raw
nvidia-smi -L > $OUT/raw/device.txt
timeout -s INT 215 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=170 -rfE --tb=short \
    tests/evaluator/test_kernelbench_events_gpu.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_attack_corpus.py \
    tests/evaluator/test_device_gate.py tests/evaluator/test_slot_sol_floor.py > $OUT/raw/gpu_tests.txt 2>&1
timeout 75 python3 tests/bench/bench_slot.py --slots 8 --n 64 --kinds triton > $OUT/raw/triton_default.txt 2>&1
timeout 215 python3 tests/bench/bench_kernelbench_agreement.py --only 0,3,8,10-25,27,30-36 --out "$OUT/raw/kb.json" \
    --budget-s 195 --kb-repeats 2 --slots 2 > "$OUT/raw/kb.txt" 2>&1
cp $OUT/raw/kb.json $OUT/kb.json 2>/dev/null
tar -czf $OUT/raw.tgz -C $OUT raw
grep -E "PASSED|FAILED|XFAIL|XPASS|ERROR|^E  " $OUT/raw/gpu_tests.txt | cut -c1-200 | grep -v PASSED | tail -14
echo "passed: $(grep -c PASSED $OUT/raw/gpu_tests.txt)"; tail -1 $OUT/raw/gpu_tests.txt
tail -2 $OUT/raw/triton_default.txt | grep -v "^{" | cut -c1-200
grep "^{" $OUT/raw/triton_default.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],'med',d.get('speedup_median'),'w5',sum(abs(x-1)<=.05 for x in s),'w10',sum(abs(x-1)<=.10 for x in s),'idle',d.get('gpu_idle_share'))
    print({k: p.get(k) for k in ('total','timing','timing_held','held_rounds','held_kb_rounds','held_settle','device_wait','timing_spread','cpu_judge','cpu_runner')})
"
tail -36 $OUT/raw/kb.txt | cut -c1-250
