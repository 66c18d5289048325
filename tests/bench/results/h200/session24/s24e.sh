. .gpu/env.sh
# Session 24, call E (one H200, the device time left): call D's defaults with the warm rounds held shared whole again
# (hand-overs included), the hand-over's stack reserved, the spares warming the sets' and hand-over's kernels, and the
# rounds held together falling back to a window a round after a drain overran. Identical torch code, honest Triton
# beside bandwidth hogs, Triton, at 8 slots.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
timeout 40 python3 -m pytest -q -p no:cacheprovider -m gpu tests/evaluator/test_device_blocks.py > $OUT/raw/gpu_tests.txt 2>&1
timeout 85 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch > $OUT/raw/torch.txt 2>&1
timeout 100 python3 tests/bench/bench_device_share.py --n 16 --slots 8 --passes 1 > $OUT/raw/share.txt 2>&1
left=$(( 320 - SECONDS )); (( left > 60 )) && timeout $left python3 tests/bench/bench_slot.py --n 48 --slots 8 \
    --kinds triton > $OUT/raw/triton.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"; tail -2 $OUT/raw/gpu_tests.txt
cut -c1-900 $OUT/raw/share.txt | grep -v "^  "
for f in $OUT/raw/torch.txt $OUT/raw/triton.txt; do echo "== $f"; grep "^{" $f | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],d['verdicts'],'w5',sum(abs(x-1)<=.05 for x in s),'med',d.get('speedup_median'),'idle',d.get('gpu_idle_share'),'cpu',d.get('host_cpu_busy_share'),{k:p.get(k) for k in sorted(p) if k.startswith(('shared_hold','device_','timing_held','held_','total','timing','correctness','kernel_checks','recheck'))})
"; grep -v "^{\|^  [0-9]" $f | head -4 | cut -c1-300; done
