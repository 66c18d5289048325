. .gpu/env.sh
# Session 27, call B (one H200): the runner's task group frozen for each of the judge's reference windows
# (slot/reference_watch.py, KRL_WORKER_FREEZE_RUNNER, on by default from this session): the attacks that work beside
# the reference (the new lean ticking child among them) with the freezer off and on, the probe off; then its cost and
# the self-speedup at 8 slots, Triton and identical torch code, freezer on and off in turn.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; stat -fc %T /sys/fs/cgroup; } > $OUT/raw/device.txt 2>&1
for freeze in 0 1; do
    KRL_WORKER_FREEZE_RUNNER=$freeze timeout 100 python3 tests/bench/bench_spin_attacks.py --repeats 1 --probe 0 \
        >> $OUT/raw/spin.txt 2>&1
done
for freeze in 1 0; do
    KRL_WORKER_FREEZE_RUNNER=$freeze timeout 85 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton \
        >> $OUT/raw/slot.txt 2>&1
    KRL_WORKER_FREEZE_RUNNER=$freeze timeout 70 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch \
        >> $OUT/raw/slot.txt 2>&1
done
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
grep "^{" $OUT/raw/spin.txt | cut -c1-330
grep "^{" $OUT/raw/slot.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],'freeze',d.get('freeze_runner'),d['evals_per_min'],d['correct'],'/',d['n'],d['verdicts'],'w5',sum(abs(x-1)<=.05 for x in s),'of',len(s),'median',d.get('speedup_median'),{k:p.get(k) for k in sorted(p) if k.startswith(('timing_freeze','timing_unfrozen','timing_interfered','timing_held','total','device_wait','device_drain'))}, d['errors'][:1])
"
tail -2 $OUT/raw/slot.txt | cut -c1-300
