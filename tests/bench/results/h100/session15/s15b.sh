. .gpu/env.sh
# Session 15, call B (code with CUDA_DEVICE_MAX_CONNECTIONS=1 by default in the pool's processes): (1) context churn
# with 2 and 4 queues, to place 1 (call A: 13.9 a second) against CUDA's default 8 (5.9); (2) where a runner's first
# Triton launch spends its ~1 s (probe_triton_jit.py); (3) the slot, Triton, at 8, 12 and 16 slots; identical torch
# code at 8; (4) the judges' own CPU by function at 8 slots (--profile: what the judge does for ~1 s between orders).
mkdir -p $OUT/raw
CUDA_DEVICE_MAX_CONNECTIONS=2 timeout 30 python3 tests/bench/bench_context_churn.py --gpus 1 --lanes 8 --seconds 10 --profile 0 > $OUT/raw/churn_conn2.txt 2>&1
CUDA_DEVICE_MAX_CONNECTIONS=4 timeout 30 python3 tests/bench/bench_context_churn.py --gpus 1 --lanes 8 --seconds 10 --profile 0 > $OUT/raw/churn_conn4.txt 2>&1
timeout 60 python3 tests/bench/probe_triton_jit.py > $OUT/raw/probe_jit.txt 2>&1
timeout 80 python3 tests/bench/bench_slot.py --n 64 --slots 8 --kinds triton > $OUT/raw/slot8.txt 2>&1
timeout 110 python3 tests/bench/bench_slot.py --n 96 --slots 12 --kinds triton > $OUT/raw/slot12.txt 2>&1
timeout 120 python3 tests/bench/bench_slot.py --n 112 --slots 16 --kinds triton > $OUT/raw/slot16.txt 2>&1
timeout 70 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch > $OUT/raw/slot_torch.txt 2>&1
timeout 80 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton --profile > $OUT/raw/slot_profile.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw && rm -rf $OUT/raw/slot*.txt
for f in churn_conn2 churn_conn4; do echo "== $f"; tail -1 $OUT/raw/$f.txt | cut -c1-330; done
echo "== probe"; cat $OUT/raw/probe_jit.txt | cut -c1-700
tar -xzf $OUT/raw.tgz -C /tmp
for f in slot8 slot12 slot16 slot_torch slot_profile; do
echo "== $f"; tail -2 /tmp/raw/$f.txt | grep -v "^{" | cut -c1-200
grep "^{" /tmp/raw/$f.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],'med',d.get('speedup_median'),'w5',sum(abs(x-1)<=.05 for x in s),'idle',d.get('gpu_idle_share'),'cpu',d.get('host_cpu_busy_share'),{k:p.get(k) for k in ['total','timing','timing_rounds','timing_held','device_wait','correctness','kernel_checks','cpu_judge','cpu_runner','cpu_runner_warm','timing_extra_rounds']}, 'between', d.get('orders',{}).get('judge_between_orders_s'))
"
done
sed -n '/judges. profile/,$p' /tmp/raw/slot_profile.txt | head -45 | cut -c1-160
