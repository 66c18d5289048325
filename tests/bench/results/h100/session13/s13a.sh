. .gpu/env.sh
# Session 13, call A: session 12's last code on a GPU (the gated rounds' own module, the runner's shared _batch, the
# sin projection): the GPU tests, then the slot's rate and identical code's speedups at 8 slots, and Triton at 1.
timeout -s INT 300 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=280 -rfE --tb=short \
    tests/evaluator/test_device_gate.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_slot_sol_floor.py \
    tests/evaluator/test_attack_corpus.py > $OUT/gpu_tests.txt 2>&1
timeout 90 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton > $OUT/slot.txt 2>&1
timeout 70 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch >> $OUT/slot.txt 2>&1
timeout 55 python3 tests/bench/bench_slot.py --n 12 --slots 1 --kinds triton >> $OUT/slot.txt 2>&1
grep -E "PASSED|FAILED|XFAIL|XPASS|ERROR|^E  " $OUT/gpu_tests.txt | cut -c1-250 | tail -24
grep "^{" $OUT/slot.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],'med',d.get('speedup_median'),'w5',sum(abs(x-1)<=.05 for x in s),'idle',d.get('gpu_idle_share'),'cpu',d.get('host_cpu_busy_share'),{k:p.get(k) for k in ['total','timing','timing_held','device_wait','correctness','cpu_judge','cpu_runner']}, 'between', d['orders'].get('judge_between_orders_s'))
"
