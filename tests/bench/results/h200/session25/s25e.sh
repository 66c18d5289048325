. .gpu/env.sh
# Session 25, call E (one H200, the device time left): the gap probe off and on, on one machine, in turn: identical
# torch code, then Triton, at 8 slots (calls A, B and D, on three machines, read fewer within ±5% with the probe).
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
for probe in 0 1; do KRL_WORKER_TIMING_GAP_PROBE=$probe timeout 78 python3 tests/bench/bench_slot.py --n 32 --slots 8 \
    --kinds torch >> $OUT/raw/torch.txt 2>&1; done
for probe in 0 1; do KRL_WORKER_TIMING_GAP_PROBE=$probe timeout 92 python3 tests/bench/bench_slot.py --n 48 --slots 8 \
    --kinds triton >> $OUT/raw/triton.txt 2>&1; done
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
for f in $OUT/raw/torch.txt $OUT/raw/triton.txt; do echo "== $f"; grep "^{" $f | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],'probe',d.get('gap_probe'),d['evals_per_min'],d['correct'],'/',d['n'],d['verdicts'],'w5',sum(abs(x-1)<=.05 for x in s),'med',d.get('speedup_median'),'gapped tasks',d.get('gapped_tasks'),'largest gap ms',d.get('gap_largest_ms'),{k:p.get(k) for k in sorted(p) if k.startswith(('device_drain','timing_held','timing_gapped','timing_spread','total'))})
"; done
