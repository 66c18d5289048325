. .gpu/env.sh
# Session 14, call C. (1) Spare runners no longer run prepare_worker's timing warm-up (200 flushed samples on the GPU
# while other slots time): 8 slots, Triton and identical torch code, rate and self-speedup. (2) What the runners'
# profiler costs the rate: CUPTI's attachment was measured serialised host-wide at 1.3-1.6 profiled contexts a second on
# one GPU (session 12), about the slot's 76-84 tasks a minute, and every task's runner attaches it.
# KRL_WORKER_KERNEL_PROFILE=0 (a measurement knob) leaves it out; Triton's launch counter still checks launches.
# (3) Agreement with KernelBench's evaluator, ours at 2 slots, one KernelBench pass.
timeout 100 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton > $OUT/slot.txt 2>&1
KRL_WORKER_KERNEL_PROFILE=0 timeout 100 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton > $OUT/slot_noprof.txt 2>&1
timeout 80 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch >> $OUT/slot.txt 2>&1
KRL_WORKER_KERNEL_PROFILE=0 timeout 80 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch >> $OUT/slot_noprof.txt 2>&1
timeout 215 python3 tests/bench/bench_kernelbench_agreement.py --only 0,3,8,10-25,27,30-36 --out "$OUT/kb.json" \
    --budget-s 185 --kb-repeats 1 --slots 2 > "$OUT/kb.txt" 2>&1
for f in slot slot_noprof; do
echo "== $f"
grep "^{" $OUT/$f.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],'med',d.get('speedup_median'),'w5',sum(abs(x-1)<=.05 for x in s),'idle',d.get('gpu_idle_share'),'cpu',d.get('host_cpu_busy_share'),{k:p.get(k) for k in ['total','timing','timing_held','device_wait','correctness','kernel_checks','cpu_judge','cpu_runner','cpu_runner_warm','timing_spread']})
"
done
tail -6 $OUT/kb.txt
