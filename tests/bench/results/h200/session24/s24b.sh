. .gpu/env.sh
# Session 24, call B (one H200): where the default's drains come from (each shared step's hold by name, the exclusive
# acquisitions' drain and count, new instruments), and a task's counted rounds held as one window each
# (KRL_WORKER_TIMING_HOLD_TOGETHER=1) against a window a round. Triton at 8 slots both ways, identical torch code with
# the rounds held together, then honest Triton beside bandwidth hogs with them held together.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; git log -1 --oneline; } > $OUT/raw/device.txt 2>&1
timeout 110 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton > $OUT/raw/triton.txt 2>&1
KRL_WORKER_TIMING_HOLD_TOGETHER=1 timeout 110 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton \
    > $OUT/raw/triton_together.txt 2>&1
KRL_WORKER_TIMING_HOLD_TOGETHER=1 timeout 90 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch \
    > $OUT/raw/torch_together.txt 2>&1
left=$(( 540 - SECONDS )); (( left > 100 )) && KRL_WORKER_TIMING_HOLD_TOGETHER=1 timeout $left python3 \
    tests/bench/bench_device_share.py --n 16 --slots 8 --passes 1 > $OUT/raw/share_together.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
cut -c1-900 $OUT/raw/share_together.txt | grep -v "^  "
for f in $OUT/raw/triton.txt $OUT/raw/triton_together.txt $OUT/raw/torch_together.txt; do echo "== $f"; grep "^{" $f | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],d['verdicts'],'w5',sum(abs(x-1)<=.05 for x in s),'med',d.get('speedup_median'),'idle',d.get('gpu_idle_share'),'cpu',d.get('host_cpu_busy_share'),{k:p.get(k) for k in sorted(p) if k.startswith(('shared_hold','device_','timing_held','held_','total','timing','correctness','kernel_checks','recheck'))})
"; grep -v "^{\|^  [0-9]" $f | head -4 | cut -c1-300; done
