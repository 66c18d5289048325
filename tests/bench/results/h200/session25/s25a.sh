. .gpu/env.sh
# Session 25, call A (one H200): the final tree of session 24 (6fd94b8), which ran on no GPU: every GPU test (the spin
# beside the reference among the attacks), the global-timer probe beside a spinning process, then identical torch code
# and Triton at 8 slots with the defaults.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
timeout -s INT 270 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=150 -rfE --tb=short \
    tests/evaluator/test_device_gate.py tests/evaluator/test_fidelity_gpu.py \
    tests/evaluator/test_attack_corpus.py tests/evaluator/test_triton_launchers.py \
    tests/evaluator/test_kernelbench_events_gpu.py tests/evaluator/test_slot_sol_floor.py > $OUT/raw/gpu_tests.txt 2>&1
timeout 80 python3 tests/bench/probe_time_slices.py > $OUT/raw/slices.txt 2>&1
timeout 85 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch > $OUT/raw/torch.txt 2>&1
left=$(( 560 - SECONDS )); (( left > 60 )) && timeout $left python3 tests/bench/bench_slot.py --n 48 --slots 8 \
    --kinds triton > $OUT/raw/triton.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
grep -E "PASSED|FAILED|XFAIL|XPASS|ERROR|SKIPPED|^E  |passed|failed" $OUT/raw/gpu_tests.txt | cut -c1-200 | tail -40
grep "^{" $OUT/raw/slices.txt; tail -3 $OUT/raw/slices.txt | cut -c1-300
for f in $OUT/raw/torch.txt $OUT/raw/triton.txt; do echo "== $f"; grep "^{" $f | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],d['verdicts'],'w5',sum(abs(x-1)<=.05 for x in s),'med',d.get('speedup_median'),'idle',d.get('gpu_idle_share'),'cpu',d.get('host_cpu_busy_share'),{k:p.get(k) for k in sorted(p) if k.startswith(('shared_hold','device_','timing_held','held_','total','timing','correctness','kernel_checks','recheck'))})
"; grep -v "^{\|^  [0-9]" $f | head -4 | cut -c1-300; done
