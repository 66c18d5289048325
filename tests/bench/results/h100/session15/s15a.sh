. .gpu/env.sh
python3 -m pip install -q --no-index --find-links .gpu/whl py-spy > /dev/null 2>&1 || echo "no py-spy"
# Session 15, call A: what stretches a task from ~1 s at one slot to 5.3 s at eight. (1) CUDA contexts made and ended
# a second, default against one hardware connection per context (CUDA_DEVICE_MAX_CONNECTIONS=1: fewer channels to set
# up and tear down). (2) The slot at 8 slots, Triton: default; with CUDA_DEVICE_MAX_CONNECTIONS=1 in every process;
# at 16 slots; with 5 counted rounds and 1 extra. (3) Python stacks of every process sampled with py-spy through one
# 8-slot pass, and one pass at 1 slot, to see where judges and runners wait.
nvidia-smi --query-gpu=name,persistence_mode,compute_mode,clocks.sm --format=csv > $OUT/gpu.txt 2>&1
timeout 40 python3 tests/bench/bench_context_churn.py --gpus 1 --lanes 8 --seconds 12 --profile 0 > $OUT/churn.txt 2>&1
CUDA_DEVICE_MAX_CONNECTIONS=1 timeout 40 python3 tests/bench/bench_context_churn.py --gpus 1 --lanes 8 --seconds 12 --profile 0 > $OUT/churn_conn1.txt 2>&1
timeout 90 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton > $OUT/slot.txt 2>&1
CUDA_DEVICE_MAX_CONNECTIONS=1 timeout 90 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton > $OUT/slot_conn1.txt 2>&1
timeout 90 python3 tests/bench/bench_slot.py --n 64 --slots 16 --kinds triton > $OUT/slot16.txt 2>&1
KRL_WORKER_TIMING_ROUNDS=5 KRL_WORKER_TIMING_EXTRA_ROUNDS=1 timeout 90 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton > $OUT/slot_r5.txt 2>&1
# Stacks: every python process every ~0.4 s for 25 s of an 8-slot pass, then of a 1-slot pass.
for pass in 8 1; do
  n=$([ $pass = 8 ] && echo 64 || echo 24)
  timeout 90 python3 tests/bench/bench_slot.py --n $n --slots $pass --kinds triton > $OUT/slot_stacks$pass.txt 2>&1 &
  bench=$!
  sleep 18
  end=$((SECONDS + 22))
  while [ $SECONDS -lt $end ] && kill -0 $bench 2>/dev/null; do
    echo "=== sweep $SECONDS" >> $OUT/stacks$pass.txt
    ps -eo pid,ppid,stat,wchan:28,pcpu,args --sort=pid | grep -E "python|PID" | grep -v grep | cut -c1-200 >> $OUT/stacks$pass.txt
    for p in $(pgrep -f python); do
      [ $p = $bench ] && continue
      echo "--- pid $p" >> $OUT/stacks$pass.txt
      timeout 2 py-spy dump --pid $p --nonblocking >> $OUT/stacks$pass.txt 2>&1
    done
    sleep 0.4
  done
  wait $bench
done
gzip -f $OUT/stacks8.txt $OUT/stacks1.txt
for f in churn churn_conn1; do echo "== $f"; tail -4 $OUT/$f.txt; done
for f in slot slot_conn1 slot16 slot_r5 slot_stacks8 slot_stacks1; do
echo "== $f"
grep "^{" $OUT/$f.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],'med',d.get('speedup_median'),'idle',d.get('gpu_idle_share'),'cpu',d.get('host_cpu_busy_share'),{k:p.get(k) for k in ['total','timing','timing_rounds','timing_held','device_wait','correctness','kernel_checks','cpu_judge','cpu_runner','cpu_runner_warm','timing_extra_rounds']})
"
done
