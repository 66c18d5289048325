. .gpu/env.sh
# Session 19, call B (one H200): the live agreement with KernelBench's own evaluator at 2 slots on session 18's code (the
# 3 ms settle in every held window, KernelBench's rounds included), then the Triton rate and identical torch code with
# 5 counted rounds and 1 extra (session 16: 252.5 a minute, but 5 of 32 within ±5%, before the settle halved the spread).
mkdir -p $OUT/raw
nvidia-smi -L > $OUT/raw/device.txt
timeout 330 python3 tests/bench/bench_kernelbench_agreement.py --only 0,3,8,10-25,27,30-36 --out "$OUT/raw/kb.json" \
    --budget-s 300 --kb-repeats 1 --slots 2 > "$OUT/raw/kb.txt" 2>&1
slot() { name=$1; limit=$2; vars=$3; shift 3; timeout $limit env $vars python3 tests/bench/bench_slot.py "$@" > $OUT/raw/$name.txt 2>&1 ; }
slot triton_r5 75 "KRL_WORKER_TIMING_ROUNDS=5 KRL_WORKER_TIMING_EXTRA_ROUNDS=1" --slots 8 --n 64 --kinds triton
slot torch_r5 70 "KRL_WORKER_TIMING_ROUNDS=5 KRL_WORKER_TIMING_EXTRA_ROUNDS=1" --slots 8 --n 32 --kinds torch
cp $OUT/raw/kb.json $OUT/kb.json 2>/dev/null
tar -czf $OUT/raw.tgz -C $OUT raw
tail -32 $OUT/raw/kb.txt | cut -c1-260
for f in triton_r5 torch_r5; do
echo "== $f"; tail -2 $OUT/raw/$f.txt | grep -v "^{" | cut -c1-200
grep "^{" $OUT/raw/$f.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],'med',d.get('speedup_median'),'w5',sum(abs(x-1)<=.05 for x in s),'idle',d.get('gpu_idle_share'))
    print({k: p.get(k) for k in ('total','timing','timing_held','device_wait','timing_spread','timing_extra_rounds','cpu_judge','cpu_runner')})
"
done
