. .gpu/env.sh
# Session 17, call D (the last 361 s of device time): the 256 MiB ReLUs again with picks capped at 1 GiB (e161b36),
# the Triton rate at 8 slots on the same code, and the one GPU test call C's time cut off.
timeout 95 env X=1 python3 tests/bench/bench_slot.py --slots 8 --n 16 --kinds torch --sizes 67108864 --profile > $OUT/torch_big.txt 2>&1
timeout 75 env X=1 python3 tests/bench/bench_slot.py --slots 8 --n 64 --kinds triton > $OUT/triton_default.txt 2>&1
timeout -s INT 60 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=50 -rfE --tb=short \
    tests/evaluator/test_slot_sol_floor.py > $OUT/gpu_tests.txt 2>&1
for f in torch_big triton_default; do
echo "== $f"; grep "^{" $OUT/$f.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],'med',d.get('speedup_median'),'w5',sum(abs(x-1)<=.05 for x in s),'idle',d.get('gpu_idle_share'),'cpu',d.get('host_cpu_busy_share'))
    print({k: p.get(k) for k in ('total','correctness','trials_judge_inputs','trials_runner','trials_judge_compare','kernel_checks','timing','timing_setup','timing_rounds','timing_hooks','timing_kept','timing_held','recheck','cpu_judge','cpu_runner')})
"
done
grep -E "PASSED|FAILED|ERROR" $OUT/gpu_tests.txt | cut -c1-160; tail -1 $OUT/gpu_tests.txt
