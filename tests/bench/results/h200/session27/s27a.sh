. .gpu/env.sh
# Session 27, call A (one H200): the ticking-child attack (never run: a child running a tiny kernel each millisecond
# beside the reference's windows) with the gap probe off and on, then `gpu_check.sh gaps`: the spares warmed beside
# their task under a shared hold (KRL_WORKER_SPARES_WARM_SHARED=beside, never run) against the default, probe on.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
timeout 125 python3 tests/bench/bench_spin_attacks.py --repeats 1 > $OUT/raw/spin.txt 2>&1
export KRL_WORKER_TIMING_GAP_PROBE=1
for spares in 0 beside; do
    KRL_WORKER_SPARES_WARM_SHARED=$spares timeout 65 python3 tests/bench/bench_slot.py --n 16 --slots 1 \
        --kinds triton >> $OUT/raw/slot.txt 2>&1
    KRL_WORKER_SPARES_WARM_SHARED=$spares timeout 90 python3 tests/bench/bench_slot.py --n 48 --slots 8 \
        --kinds triton >> $OUT/raw/slot.txt 2>&1
done
left=$(( 545 - SECONDS )); (( left > 45 )) && KRL_WORKER_SPARES_WARM_SHARED=beside timeout $left \
    python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch >> $OUT/raw/slot.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
grep "^{" $OUT/raw/spin.txt | cut -c1-260
grep "^{" $OUT/raw/slot.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],'spares',d.get('spares_warm_shared'),d['evals_per_min'],d['correct'],'/',d['n'],d['verdicts'],'w5',sum(abs(x-1)<=.05 for x in s),'of',len(s),'gapped tasks',d.get('gapped_tasks'),'largest gap ms',d.get('gap_largest_ms'),{k:p.get(k) for k in sorted(p) if k.startswith(('timing_gapped','spares_warm','timing_held','total','device_wait'))}, d['errors'][:1])
"
tail -3 $OUT/raw/slot.txt | cut -c1-300
