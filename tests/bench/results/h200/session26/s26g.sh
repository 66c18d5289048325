. .gpu/env.sh
# Session 26, call G (one H200, the last ~270 s of device time): at 8 slots, call F's spares warmed under a shared
# hold left 35 of 48 Triton tasks with a gapped window. Here every piece of the slot's own GPU upkeep is held shared
# (KRL_WORKER_SPARES_WARM_SHARED=1 and KRL_WORKER_UPKEEP_SHARED=1: a finished runner's end, the judge's cache release,
# the sizing rounds' queueing), with the probe on: Triton at 8 slots, then identical torch code in the time left.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
export KRL_WORKER_TIMING_GAP_PROBE=1 KRL_WORKER_SPARES_WARM_SHARED=1 KRL_WORKER_UPKEEP_SHARED=1
timeout 95 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton > $OUT/raw/slot.txt 2>&1
left=$(( 185 - SECONDS )); (( left > 45 )) && timeout $left python3 tests/bench/bench_slot.py --n 24 --slots 8 \
    --kinds torch >> $OUT/raw/slot.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
grep "^{" $OUT/raw/slot.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],'probe',d.get('gap_probe'),d['evals_per_min'],d['correct'],'/',d['n'],d['verdicts'],'w5',sum(abs(x-1)<=.05 for x in s),'gapped tasks',d.get('gapped_tasks'),'largest gap ms',d.get('gap_largest_ms'),{k:p.get(k) for k in sorted(p) if k.startswith(('timing_gapped','timing_gap_largest','spares_warm','device_drain','device_shared_hold','timing_held','total'))}, d['errors'][:1])
"
tail -3 $OUT/raw/slot.txt | cut -c1-300
