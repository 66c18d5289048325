. .gpu/env.sh
# Session 18, call E (one H200): identical torch code at 8 slots, each round's wait for the device now in the trace, with
# no settle, and with the first side of every held window released 3 ms and 10 ms after the hold is had
# (KRL_WORKER_TIMING_SETTLE_MS): does the first-released side's slowness follow a window handed over at once?
mkdir -p $OUT/raw
slot() { name=$1; limit=$2; vars=$3; shift 3; timeout $limit env $vars python3 tests/bench/bench_slot.py "$@" > $OUT/raw/$name.txt 2>&1 ; }
slot torch_settle0 75 X=1 --slots 8 --n 32 --kinds torch
slot torch_settle3 75 KRL_WORKER_TIMING_SETTLE_MS=3 --slots 8 --n 32 --kinds torch
slot torch_settle10 80 KRL_WORKER_TIMING_SETTLE_MS=10 --slots 8 --n 32 --kinds torch
tar -czf $OUT/raw.tgz -C $OUT raw
for f in torch_settle0 torch_settle3 torch_settle10; do
echo "== $f"; tail -2 $OUT/raw/$f.txt | grep -v "^{" | cut -c1-200
grep "^{" $OUT/raw/$f.txt | python3 -c "
import json,sys,statistics
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],'med',d.get('speedup_median'),'w5',sum(abs(x-1)<=.05 for x in s),'idle',d.get('gpu_idle_share'))
    print({k: p.get(k) for k in ('total','timing','timing_held','device_wait','timing_spread','timing_extra_rounds')})
    t=d['orders'].get('counted_rounds') or {}; alt=n=0; rs=[]; waited=[]; free=[]
    for rounds in t.values():
        sg=[1 if r[1]>r[3] else -1 for r in rounds]
        for a,b in zip(sg,sg[1:]): n+=1; alt+=a!=b
        for i,r in enumerate(rounds):
            if min(r[1],r[3])<=0: continue
            first, second = (r[1], r[3]) if i%2==0 else (r[3], r[1])
            (waited if len(r)>5 and r[5]>0.05 else free).append(first/second)
    print('parts', d['orders'].get('round_parts'), 'alternating', alt, 'of', n)
    print('first/second: after a wait', len(waited), round(statistics.median(waited),3) if waited else None, '; free', len(free), round(statistics.median(free),3) if free else None)
"
done
