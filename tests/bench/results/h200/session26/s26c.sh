. .gpu/env.sh
# Session 26, call C (one H200): are the honest windows' gaps (call A: 39 of 48 Triton tasks at 8 slots; call B: 8 of
# 16 at one slot) the other processes' streams waiting at shut device gates? A batch beside 1 and 7 gate waiters (call
# B's gate waiter hung: its cuBLAS set-up was queued behind its own gate), 7 idle contexts, 2 churning; then the slot
# with the probe and no gates (KRL_WORKER_TIMING_GATE=0) at one slot and eight.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
timeout 150 python3 tests/bench/probe_time_slices.py --reps 20 --neighbours gatex1,gatex7,idlex7,churnx2 \
    > $OUT/raw/slices.txt 2>&1
KRL_WORKER_TIMING_GATE=0 timeout 70 python3 tests/bench/bench_slot.py --n 16 --slots 1 --kinds triton \
    > $OUT/raw/slot.txt 2>&1
KRL_WORKER_TIMING_GATE=0 timeout 90 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton \
    >> $OUT/raw/slot.txt 2>&1
left=$(( 430 - SECONDS )); (( left > 50 )) && KRL_WORKER_TIMING_GATE=0 timeout $left python3 \
    tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch >> $OUT/raw/slot.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
grep "^{" $OUT/raw/slices.txt; grep -v "^{" $OUT/raw/slices.txt | tail -5 | cut -c1-300
grep "^{" $OUT/raw/slot.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],'gate',d.get('timing_gate'),'probe',d.get('gap_probe'),d['evals_per_min'],d['correct'],'/',d['n'],d['verdicts'],'w5',sum(abs(x-1)<=.05 for x in s),'gapped tasks',d.get('gapped_tasks'),'largest gap ms',d.get('gap_largest_ms'),{k:p.get(k) for k in sorted(p) if k.startswith(('timing_gapped','timing_gap_largest','timing_gate','total','timing_held'))})
"
