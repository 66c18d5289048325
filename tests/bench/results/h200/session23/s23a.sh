. .gpu/env.sh
# Session 23, call A (one H200): session 22's last code on a GPU for the first time (runner_slot.py split from
# judge_host.py, the allocation-site record) and where a Triton task's ~2.4 s of latency at 8 slots goes on the
# runner's side: Triton at 8 slots plain, then with every judge and runner profiled (cProfile, so slower), the
# allocation sites, identical torch code at 8 slots, then the slot's GPU tests.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
timeout 80 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton --keep $OUT/raw/plain > $OUT/raw/triton.txt 2>&1
timeout 100 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds triton --profile --keep $OUT/raw/prof \
    > $OUT/raw/triton_prof.txt 2>&1
KRL_WORKER_ALLOC_HISTORY=$OUT/raw/alloc timeout 80 python3 tests/bench/bench_slot.py --n 24 --slots 8 --kinds triton \
    > $OUT/raw/alloc.txt 2>&1
python3 tests/bench/summarize_alloc_sites.py $OUT/raw/alloc >> $OUT/raw/alloc.txt 2>&1
timeout 70 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch > $OUT/raw/torch.txt 2>&1
left=$(( 570 - SECONDS ))
timeout -s INT $left python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=120 -rfE --tb=short \
    tests/evaluator/test_allocation_sites.py tests/evaluator/test_device_gate.py tests/evaluator/test_slot_sol_floor.py \
    tests/evaluator/test_attack_corpus.py tests/evaluator/test_fidelity_gpu.py > $OUT/raw/gpu_tests.txt 2>&1
rm -rf $OUT/raw/*/trace-*.jsonl.lock 2>/dev/null
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"; tail -3 /tmp/site-install.log
grep -E "PASSED|FAILED|XFAIL|XPASS|ERROR|^E  |passed|failed" $OUT/raw/gpu_tests.txt | cut -c1-200 | tail -30
for f in $OUT/raw/triton.txt $OUT/raw/triton_prof.txt $OUT/raw/alloc.txt $OUT/raw/torch.txt; do echo "== $f"; grep "^{" $f | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],'w5',sum(abs(x-1)<=.05 for x in s),'idle',d.get('gpu_idle_share'),{k:p.get(k) for k in ['total','timing','timing_held','device_wait','correctness','kernel_checks','cpu_judge','cpu_runner','trials_runner']})
"; grep -v "^{\|^  [0-9]" $f | head -5 | cut -c1-300; done
grep -A40 "runners' profile" $OUT/raw/triton_prof.txt | head -45 | cut -c1-160
