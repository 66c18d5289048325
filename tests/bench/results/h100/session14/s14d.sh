. .gpu/env.sh
# Session 14, call D: runners attach CUPTI only in their kernel checks (not in a spare's warm-up), so the reference
# timed first in a runner and a torch candidate's calls run without it. GPU tests (KernelBench's events, fidelity, the
# attack corpus: the lazily attached profiler must still see kernels that never launch), agreement with KernelBench's
# evaluator at 2 slots, and the slot's rate and self-speedup at 8 slots.
timeout -s INT 190 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=180 -rfE --tb=short \
    tests/evaluator/test_kernelbench_events_gpu.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_attack_corpus.py \
    > $OUT/gpu_tests.txt 2>&1
timeout 200 python3 tests/bench/bench_kernelbench_agreement.py --only 0,3,8,10-25,27,30-36 --out "$OUT/kb.json" \
    --budget-s 170 --kb-repeats 1 --slots 2 > "$OUT/kb.txt" 2>&1
timeout 100 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton > $OUT/slot.txt 2>&1
timeout 80 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch >> $OUT/slot.txt 2>&1
grep -E "PASSED|FAILED|XFAIL|XPASS|ERROR|^E  " $OUT/gpu_tests.txt | cut -c1-200 | grep -v PASSED | tail -12
grep -c PASSED $OUT/gpu_tests.txt
tail -4 $OUT/kb.txt
grep "^{" $OUT/slot.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],'med',d.get('speedup_median'),'w5',sum(abs(x-1)<=.05 for x in s),'idle',d.get('gpu_idle_share'),'cpu',d.get('host_cpu_busy_share'),{k:p.get(k) for k in ['total','timing','timing_held','device_wait','correctness','kernel_checks','cpu_judge','cpu_runner','cpu_runner_warm','timing_spread']})
"
