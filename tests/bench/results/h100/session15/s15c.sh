. .gpu/env.sh
# Session 15, call C: the verdicts and timings with one hardware queue per context (the new default): the GPU tests
# (KernelBench's events, fidelity, the attack corpus, device gates, speed-of-light floor), agreement with KernelBench's
# own evaluator at 2 slots (its pass in the same call), identical torch code at 8 slots, and where a runner's first
# Triton launch spends its time on a full cache hit (probe_triton_jit.py, top functions).
mkdir -p $OUT/raw
timeout -s INT 200 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=180 -rfE --tb=short \
    tests/evaluator/test_kernelbench_events_gpu.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_attack_corpus.py \
    tests/evaluator/test_device_gate.py tests/evaluator/test_slot_sol_floor.py > $OUT/raw/gpu_tests.txt 2>&1
timeout 215 python3 tests/bench/bench_kernelbench_agreement.py --only 0,3,8,10-25,27,30-36 --out "$OUT/raw/kb.json" \
    --budget-s 185 --kb-repeats 1 --slots 2 > "$OUT/raw/kb.txt" 2>&1
timeout 60 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch > $OUT/raw/slot_torch.txt 2>&1
timeout 40 python3 tests/bench/probe_triton_jit.py > $OUT/raw/probe_jit.txt 2>&1
cp $OUT/raw/kb.json $OUT/kb.json 2>/dev/null
tar -czf $OUT/raw.tgz -C $OUT raw
grep -E "PASSED|FAILED|XFAIL|XPASS|ERROR|^E  " $OUT/raw/gpu_tests.txt | cut -c1-200 | grep -v PASSED | tail -14
echo "passed: $(grep -c PASSED $OUT/raw/gpu_tests.txt)"; tail -2 $OUT/raw/gpu_tests.txt
tail -8 $OUT/raw/kb.txt | cut -c1-400
grep "^{" $OUT/raw/slot_torch.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],'med',d.get('speedup_median'),'w5',sum(abs(x-1)<=.05 for x in s),'idle',d.get('gpu_idle_share'),{k:p.get(k) for k in ['total','timing_held','device_wait','timing_spread','timing_extra_rounds']})
"
tail -1 $OUT/raw/probe_jit.txt | cut -c1-2500
