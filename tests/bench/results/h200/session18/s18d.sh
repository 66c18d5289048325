. .gpu/env.sh
# Session 18, call D (one H200): why the side released first in a round reads slower on this machine (call C: 72-77% of
# round pairs alternate, median 1.4x). The probe separates a sibling's waiting stream from the GPU's idle clocks; one
# slot alone shows whether other slots are needed for it; 8 slots without gates whether the gates are.
mkdir -p $OUT/raw
timeout 60 python3 tests/bench/probe_gate_sibling.py --reps 30 > $OUT/raw/probe_sibling.txt 2>&1
slot() { name=$1; limit=$2; vars=$3; shift 3; timeout $limit env $vars python3 tests/bench/bench_slot.py "$@" > $OUT/raw/$name.txt 2>&1 ; }
slot torch_one 60 X=1 --slots 1 --n 8 --kinds torch
slot torch_ungated 75 KRL_WORKER_TIMING_GATE=0 --slots 8 --n 32 --kinds torch
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/probe_sibling.txt | tail -40
for f in torch_one torch_ungated; do
echo "== $f"; tail -2 $OUT/raw/$f.txt | grep -v "^{" | cut -c1-200
grep "^{" $OUT/raw/$f.txt | python3 -c "
import json,sys,statistics
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],'med',d.get('speedup_median'),'w5',sum(abs(x-1)<=.05 for x in s),'idle',d.get('gpu_idle_share'))
    print({k: p.get(k) for k in ('total','timing','timing_held','device_wait','timing_spread','timing_extra_rounds')})
    t=d['orders'].get('counted_rounds') or {}; alt=n=0; rs=[]
    for rounds in t.values():
        sg=[1 if r[1]>r[3] else -1 for r in rounds]
        for a,b in zip(sg,sg[1:]): n+=1; alt+=a!=b
        rs+=[max(r[1],r[3])/min(r[1],r[3]) for r in rounds if min(r[1],r[3])>0]
    print('parts', d['orders'].get('round_parts'), 'alternating', alt, 'of', n, 'slow/fast', round(statistics.median(rs),2) if rs else None)
"
done
