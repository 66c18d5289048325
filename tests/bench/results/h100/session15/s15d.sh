# Session 15, call D (nvidia-h100-x4, the last ~400 s of device time): Ray's scaling on 4 GPUs with one hardware queue
# per CUDA context (the new default; session 11, before it and before the gates: 1 GPU 69.7 a minute, 4 GPUs 67.0,
# efficiency 0.24): Triton through Ray on 1 then 4 GPUs (gpu_batch.sh rayt). Then, on GPU 0 if time is left: the
# early-start side stream with the default one queue and with CUDA's eight, and the slot's Triton rate at 8 slots
# with Triton's version hash done once in the zygote.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
RAY_BUDGET_S=170 timeout 250 bash tests/bench/gpu_batch.sh rayt > $OUT/rayt_summary.txt 2>&1
cat $OUT/rayt_summary.txt | cut -c1-700 | tail -30
if ! command -v bwrap >/dev/null; then
    export PATH=/tmp/deb/usr/bin:$PATH LD_LIBRARY_PATH=/tmp/deb/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
export KERNELBENCH_ROOT=$PWD/.gpu/kernelbench CUDA_VISIBLE_DEVICES=0
timeout -s INT 110 python3 -m pytest -q -p no:cacheprovider -m gpu --timeout=100 -rfE --tb=line \
    tests/evaluator/test_attack_corpus.py -k "early_start" > $OUT/early_start.txt 2>&1
tail -4 $OUT/early_start.txt | cut -c1-300
timeout 70 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton > $OUT/slot.txt 2>&1
grep "^{" $OUT/slot.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],'med',d.get('speedup_median'),'w5',sum(abs(x-1)<=.05 for x in s),'idle',d.get('gpu_idle_share'),'cpu',d.get('host_cpu_busy_share'),{k:p.get(k) for k in ['total','timing_held','device_wait','correctness','trials_runner','kernel_checks','cpu_judge','cpu_runner','cpu_runner_warm']})
"
