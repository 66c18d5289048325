. .gpu/env.sh
# Session 23, call C (one H200): with Triton tasks no longer latency-bound (call B: correctness 0.71 -> 0.30 s a task,
# the same 188-192 a minute, the exclusive hold 0.22 s a task against 0.11 s at one slot), is the device lock's shared
# side worth having on? Honest Triton speedups beside bandwidth hogs (never measured with the judge-driven slot), with
# the shared steps off (the default) and on; then Triton and identical torch code at 8 slots with every step shared.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
timeout 320 python3 tests/bench/bench_device_share.py --n 16 --slots 8 --passes 0,1 > $OUT/raw/share.txt 2>&1
KRL_WORKER_DEVICE_SHARED_STEPS=1 timeout 80 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton \
    > $OUT/raw/triton_shared.txt 2>&1
left=$(( 560 - SECONDS ))
(( left > 30 )) && KRL_WORKER_DEVICE_SHARED_STEPS=1 timeout $left python3 tests/bench/bench_slot.py --n 32 --slots 8 \
    --kinds torch > $OUT/raw/torch_shared.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
cut -c1-900 $OUT/raw/share.txt | grep -v "^  "
for f in $OUT/raw/triton_shared.txt $OUT/raw/torch_shared.txt; do echo "== $f"; grep "^{" $f | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],d['verdicts'],'shared',d.get('device_shared_steps'),'w5',sum(abs(x-1)<=.05 for x in s),'med',d.get('speedup_median'),'idle',d.get('gpu_idle_share'),{k:p.get(k) for k in ['total','timing','timing_held','device_wait','device_shared_wait','device_shared_hold','correctness','kernel_checks','held_rounds','held_kb_rounds','held_settle']})
"; grep -v "^{\|^  [0-9]" $f | head -4 | cut -c1-300; done
