. .gpu/env.sh
# Session 13, call C: (1) CUDA's spin-waits against blocking synchronisation (KRL_WORKER_BLOCKING_SYNC=1) for every
# judge and runner, 8 slots, Triton then identical torch code, each beside the default on this machine; (2) the honest
# Triton ReLU that reuses its output buffer (hack_detected in call B) through the pool; (3) the churn's victim with a
# batch queued behind a device sleep.
timeout 85 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton > $OUT/slot.txt 2>&1
KRL_WORKER_BLOCKING_SYNC=1 timeout 85 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton >> $OUT/slot.txt 2>&1
timeout 70 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch >> $OUT/slot.txt 2>&1
KRL_WORKER_BLOCKING_SYNC=1 timeout 70 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch >> $OUT/slot.txt 2>&1
timeout 80 python3 tests/bench/bench_timing_under_load.py --via pool --repeats 2 --passes quiet_off \
    --kernels relu_triton_50us,relu_triton_200us > $OUT/reuse.txt 2>&1
timeout 45 python3 tests/bench/bench_context_churn.py --gpus 1 --lanes 4 --seconds 6 --profile 0 --victim > $OUT/churn.txt 2>&1
grep "^{" $OUT/slot.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],'bsync',d.get('blocking_sync'),d['evals_per_min'],d['correct'],'/',d['n'],'med',d.get('speedup_median'),'w5',sum(abs(x-1)<=.05 for x in s),'idle',d.get('gpu_idle_share'),'cpu',d.get('host_cpu_busy_share'),{k:p.get(k) for k in ['total','timing','timing_held','device_wait','correctness','cpu_judge','cpu_runner']}, 'between', d['orders'].get('judge_between_orders_s'))
"
tail -8 $OUT/reuse.txt
grep "^{" $OUT/churn.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); v=d.get('victim',{})
    print(d['lanes_per_gpu'], d['children_per_s'], 'ev', v.get('events_ms'), 'queued', v.get('queued_ms'))
"
