. .gpu/env.sh
# Session 18, call C (one H200): the live agreement with KernelBench's own evaluator at 2 slots (its pass in the same
# call), then identical torch code at 8 slots with every GPU step outside the timing held off the timed windows
# (KRL_WORKER_DEVICE_SHARED_STEPS=1) and without, every task's counted rounds kept: call A's rounds were bimodal (a
# 768-call batch read ~3.4 or ~6.5 ms), as when another context's work takes time slices inside a timed window.
mkdir -p $OUT/raw
nvidia-smi -L > $OUT/raw/device.txt
timeout 330 python3 tests/bench/bench_kernelbench_agreement.py --only 0,3,8,10-25,27,30-36 --out "$OUT/raw/kb.json" \
    --budget-s 300 --kb-repeats 1 --slots 2 > "$OUT/raw/kb.txt" 2>&1
slot() { name=$1; limit=$2; vars=$3; shift 3; timeout $limit env $vars python3 tests/bench/bench_slot.py "$@" > $OUT/raw/$name.txt 2>&1 ; }
slot torch_shared 75 KRL_WORKER_DEVICE_SHARED_STEPS=1 --slots 8 --n 32 --kinds torch
slot torch_default 75 X=1 --slots 8 --n 32 --kinds torch
cp $OUT/raw/kb.json $OUT/kb.json 2>/dev/null
tar -czf $OUT/raw.tgz -C $OUT raw
tail -12 $OUT/raw/kb.txt | cut -c1-400
for f in torch_shared torch_default; do
echo "== $f"; tail -2 $OUT/raw/$f.txt | grep -v "^{" | cut -c1-200
grep "^{" $OUT/raw/$f.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],'med',d.get('speedup_median'),'w5',sum(abs(x-1)<=.05 for x in s),'idle',d.get('gpu_idle_share'),'cpu',d.get('host_cpu_busy_share'))
    print({k: p.get(k) for k in ('total','correctness','kernel_checks','timing','timing_rounds','timing_hooks','timing_held','device_wait','device_shared_wait','device_shared_hold','timing_spread','timing_extra_rounds','cpu_judge','cpu_runner')})
    o=d.get('orders') or {}; print('parts', o.get('round_parts'), 'ratios', o.get('round_ratios'))
"
done
