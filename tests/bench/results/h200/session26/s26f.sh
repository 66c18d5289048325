. .gpu/env.sh
# Session 26, call F (one H200, the last device time): where honest windows' gaps come from. A batch's probe beside a
# process running a tiny kernel every millisecond (1 and 7 of them); then one slot of Triton with the probe on, by
# default and with each task's new spares warmed before it under a shared hold (KRL_WORKER_SPARES_WARM_SHARED=1); then
# 8 slots of Triton with both, against call A's probe-on run (101.9 a minute, 39 of 48 tasks gapped).
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
timeout 100 python3 tests/bench/probe_time_slices.py --reps 20 --neighbours tickx1,tickx7 > $OUT/raw/slices.txt 2>&1
export KRL_WORKER_TIMING_GAP_PROBE=1
echo "== default" > $OUT/raw/slot.txt
timeout 70 python3 tests/bench/bench_slot.py --n 16 --slots 1 --kinds triton >> $OUT/raw/slot.txt 2>&1
echo "== spares warm shared" >> $OUT/raw/slot.txt
KRL_WORKER_SPARES_WARM_SHARED=1 timeout 80 python3 tests/bench/bench_slot.py --n 16 --slots 1 --kinds triton \
    >> $OUT/raw/slot.txt 2>&1
left=$(( 380 - SECONDS )); (( left > 50 )) && KRL_WORKER_SPARES_WARM_SHARED=1 timeout $(( left < 95 ? left : 95 )) \
    python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton >> $OUT/raw/slot.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
grep "^{" $OUT/raw/slices.txt; grep -v "^{" $OUT/raw/slices.txt | tail -3 | cut -c1-300
grep -E "^==|^\{" $OUT/raw/slot.txt | python3 -c "
import json,sys
for l in sys.stdin:
    if l.startswith('=='): print(l.strip()); continue
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],'probe',d.get('gap_probe'),d['evals_per_min'],d['correct'],'/',d['n'],d['verdicts'],'w5',sum(abs(x-1)<=.05 for x in s),'gapped tasks',d.get('gapped_tasks'),'largest gap ms',d.get('gap_largest_ms'),{k:p.get(k) for k in sorted(p) if k.startswith(('timing_gapped','timing_gap_largest','spares_warm','device_drain','timing_held','judge_ready','total'))}, d['errors'][:1])
"
