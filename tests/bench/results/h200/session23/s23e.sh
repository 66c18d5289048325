. .gpu/env.sh
# Session 23, call E (one H200, the device time left): the defaults of call D again (every step shared, the first
# trial unheld), identical torch code at 8 slots twice and Triton once, for the spread of the self-speedup figure.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
timeout 65 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch > $OUT/raw/torch.txt 2>&1
left=$(( 185 - SECONDS )); (( left > 45 )) && timeout $left python3 tests/bench/bench_slot.py --n 32 --slots 8 \
    --kinds torch >> $OUT/raw/torch.txt 2>&1
left=$(( 185 - SECONDS )); (( left > 45 )) && timeout $left python3 tests/bench/bench_slot.py --n 32 --slots 8 \
    --kinds triton > $OUT/raw/triton.txt 2>&1
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
for f in $OUT/raw/torch.txt $OUT/raw/triton.txt; do echo "== $f"; grep "^{" $f | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],d['verdicts'],'shared',d.get('device_shared_steps'),'w5',sum(abs(x-1)<=.05 for x in s),'med',d.get('speedup_median'),'idle',d.get('gpu_idle_share'),{k:p.get(k) for k in ['total','timing','timing_held','device_wait','device_shared_wait','device_shared_hold']})
"; grep -v "^{\|^  [0-9]" $f | head -4 | cut -c1-300; done
