. .gpu/env.sh
# Session 24, call A (one H200): 5d978d8's per-type answer fields (evidence.ANSWER_FIELDS) had never run on a GPU.
# Every GPU test, then Triton and identical torch code at 8 slots with the defaults.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; git log -1 --oneline; } > $OUT/raw/device.txt 2>&1
timeout 300 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=150 -rfE --tb=short \
    tests/evaluator/test_device_gate.py tests/evaluator/test_triton_launchers.py tests/evaluator/test_fidelity_gpu.py \
    tests/evaluator/test_attack_corpus.py tests/evaluator/test_slot_sol_floor.py \
    tests/evaluator/test_kernelbench_events_gpu.py > $OUT/raw/gpu_tests.txt 2>&1
left=$(( 530 - SECONDS )); (( left > 60 )) && timeout $(( left < 110 ? left : 110 )) python3 tests/bench/bench_slot.py \
    --n 48 --slots 8 --kinds triton > $OUT/raw/triton.txt 2>&1
left=$(( 530 - SECONDS )); (( left > 50 )) && timeout $left python3 tests/bench/bench_slot.py --n 32 --slots 8 \
    --kinds torch > $OUT/raw/torch.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
grep -E "PASSED|FAILED|XFAIL|XPASS|ERROR|SKIPPED|^E  |passed|failed" $OUT/raw/gpu_tests.txt | cut -c1-200 | tail -40
for f in $OUT/raw/triton.txt $OUT/raw/torch.txt; do echo "== $f"; grep "^{" $f | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],d['verdicts'],'shared',d.get('device_shared_steps'),'w5',sum(abs(x-1)<=.05 for x in s),'med',d.get('speedup_median'),'idle',d.get('gpu_idle_share'),'cpu',d.get('host_cpu_busy_share'),{k:p.get(k) for k in ['total','timing','timing_held','device_wait','device_shared_wait','device_shared_hold','device_shared_overrun','correctness','kernel_checks','held_rounds','held_kb_rounds','held_settle']})
"; grep -v "^{\|^  [0-9]" $f | head -4 | cut -c1-300; done
