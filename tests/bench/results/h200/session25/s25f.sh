. .gpu/env.sh
# Session 25, call F (one H200, the last device time): the final tree's gap probe threshold (0.25 ms): Triton, then
# identical torch code in the time left, at 8 slots.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
timeout 95 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton > $OUT/raw/triton.txt 2>&1
left=$(( 185 - SECONDS )); (( left > 50 )) && timeout $left python3 tests/bench/bench_slot.py --n 32 --slots 8 \
    --kinds torch > $OUT/raw/torch.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
for f in $OUT/raw/triton.txt $OUT/raw/torch.txt; do echo "== $f"; grep "^{" $f | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],'probe',d.get('gap_probe'),d['evals_per_min'],d['correct'],'/',d['n'],d['verdicts'],'w5',sum(abs(x-1)<=.05 for x in s),'med',d.get('speedup_median'),'gapped tasks',d.get('gapped_tasks'),'largest gap ms',d.get('gap_largest_ms'),{k:p.get(k) for k in sorted(p) if k.startswith(('device_drain','timing_held','timing_gapped','timing_spread','total'))})
"; grep "^  [0-9]" $f | tail -2 | cut -c1-200; done
