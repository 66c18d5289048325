. .gpu/env.sh
# Session 25, call D (one H200): the final tree (the gap probe on by default, up to 6 gapped rounds a task): the probe's,
# fidelity and runner-events GPU tests, identical torch code and Triton at 8 slots, honest Triton beside hogs.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
timeout -s INT 170 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=150 -rfE --tb=short \
    tests/evaluator/test_gap_probe.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_kernelbench_events_gpu.py \
    > $OUT/raw/gpu_tests.txt 2>&1
timeout 85 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch > $OUT/raw/torch.txt 2>&1
timeout 100 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton > $OUT/raw/triton.txt 2>&1
left=$(( 470 - SECONDS )); (( left > 60 )) && timeout $left python3 tests/bench/bench_device_share.py --n 16 --slots 8 \
    --passes 1 > $OUT/raw/share.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
grep -E "PASSED|FAILED|XFAIL|ERROR|^E  |passed|failed" $OUT/raw/gpu_tests.txt | cut -c1-220 | tail -20
cut -c1-900 $OUT/raw/share.txt | grep -v "^  "
for f in $OUT/raw/torch.txt $OUT/raw/triton.txt; do echo "== $f"; grep "^{" $f | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['device_shared_steps'],d['evals_per_min'],d['correct'],'/',d['n'],d['verdicts'],d['errors'][:2],'w5',sum(abs(x-1)<=.05 for x in s),'med',d.get('speedup_median'),'probe',d.get('gap_probe'),'gapped tasks',d.get('gapped_tasks'),'largest gap ms',d.get('gap_largest_ms'),{k:p.get(k) for k in sorted(p) if k.startswith(('device_drain','device_windows','timing_held','timing_gap','timing_interf','total','timing_spread'))})
"; grep -v "^{\|^  [0-9]" $f | head -4 | cut -c1-300; grep "^  [0-9]" $f | grep -v "correct speedup" | head -5 | cut -c1-250; done
