. .gpu/env.sh
# Session 13, call F: the exchange folders on the judge host's own tmpfs (isolation/exchange_tmpfs.py; this machine's
# /tmp is ext4): a 256 MiB identical-code problem at 8 slots with it off, then on (the default); the gate's GPU test
# (its page now lives on that tmpfs) and the Triton rate with everything default.
timeout -s INT 150 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=140 -rfE --tb=short \
    tests/evaluator/test_device_gate.py tests/evaluator/test_fidelity_gpu.py::test_identical_code_reads_about_one_in_the_judges_convention \
    > $OUT/gpu_tests.txt 2>&1
KRL_WORKER_EXCHANGE_TMPFS=0 timeout 95 python3 tests/bench/bench_slot.py --n 16 --slots 8 --kinds torch --sizes 67108864 > $OUT/slot.txt 2>&1
timeout 95 python3 tests/bench/bench_slot.py --n 16 --slots 8 --kinds torch --sizes 67108864 >> $OUT/slot.txt 2>&1
timeout 85 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton >> $OUT/slot.txt 2>&1
grep -E "PASSED|FAILED|XFAIL|ERROR|^E  " $OUT/gpu_tests.txt | cut -c1-200 | tail -8
grep "^{" $OUT/slot.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],'tmpfs',d.get('exchange_tmpfs'),d.get('sizes'),d['evals_per_min'],d['correct'],'/',d['n'],'med',d.get('speedup_median'),'w5',sum(abs(x-1)<=.05 for x in s),'gated',p.get('timing_gated'),{k:p.get(k) for k in ['total','correctness','trials_judge_inputs','trials_runner','trials_judge_compare','timing','timing_setup','timing_kept','recheck','cpu_judge','cpu_runner']})
"
