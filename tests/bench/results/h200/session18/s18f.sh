. .gpu/env.sh
# Session 18, call F (one H200, the last of the device time): the runner's queue order sent before the judge queues its
# reference, the armed drain (the runner told before its gate opens), a 3 ms settle in windows had after a wait (the
# new default): the gate's and the corpus's GPU tests, identical torch code with the settle and without, the Triton rate.
mkdir -p $OUT/raw
timeout -s INT 150 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=120 -rfE --tb=short \
    tests/evaluator/test_device_gate.py tests/evaluator/test_attack_corpus.py tests/evaluator/test_fidelity_gpu.py \
    > $OUT/raw/gpu_tests.txt 2>&1
slot() { name=$1; limit=$2; vars=$3; shift 3; timeout $limit env $vars python3 tests/bench/bench_slot.py "$@" > $OUT/raw/$name.txt 2>&1 ; }
slot torch_settle3 70 X=1 --slots 8 --n 32 --kinds torch
slot torch_settle0 70 KRL_WORKER_TIMING_SETTLE_MS=0 --slots 8 --n 32 --kinds torch
slot triton_settle3 75 X=1 --slots 8 --n 64 --kinds triton
tar -czf $OUT/raw.tgz -C $OUT raw
grep -E "PASSED|FAILED|XFAIL|XPASS|ERROR|^E  " $OUT/raw/gpu_tests.txt | cut -c1-200 | grep -v PASSED | tail -14
echo "passed: $(grep -c PASSED $OUT/raw/gpu_tests.txt)"; tail -1 $OUT/raw/gpu_tests.txt
for f in torch_settle3 torch_settle0 triton_settle3; do
echo "== $f"; tail -2 $OUT/raw/$f.txt | grep -v "^{" | cut -c1-200
grep "^{" $OUT/raw/$f.txt | python3 -c "
import json,sys,statistics
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],'med',d.get('speedup_median'),'w5',sum(abs(x-1)<=.05 for x in s),'idle',d.get('gpu_idle_share'))
    print({k: p.get(k) for k in ('total','timing','timing_held','device_wait','timing_spread','timing_extra_rounds','cpu_judge','cpu_runner')})
    t=d['orders'].get('counted_rounds') or {}; alt=n=0; waited=[]; free=[]; cb=[]; rb=[]
    for rounds in t.values():
        sg=[1 if r[1]>r[3] else -1 for r in rounds]
        for a,b in zip(sg,sg[1:]): n+=1; alt+=a!=b
        if rounds:
            mr=statistics.median(r[1] for r in rounds); mc=statistics.median(r[3] for r in rounds)
            rb+=[r[1]/mr for r in rounds]; cb+=[r[3]/mc for r in rounds]
        for i,r in enumerate(rounds):
            if min(r[1],r[3])<=0: continue
            first, second = (r[1], r[3]) if i%2==0 else (r[3], r[1])
            (waited if len(r)>5 and r[5]>0.1 else free).append(first/second)
    q=lambda v:[round(sorted(v)[int(len(v)*p)],3) for p in (.1,.5,.9)] if v else None
    print('parts', d['orders'].get('round_parts'), 'alternating', alt, 'of', n)
    print('first/second: after a wait', len(waited), q(waited), '; free', len(free), q(free), '; batch/median ref', q(rb), 'cand', q(cb))
"
done
