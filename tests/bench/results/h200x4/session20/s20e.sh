# Session 20, call E (nvidia-h200-x2, the device time left): the same host's one-GPU rate beside its two-GPU one, one
# local pool a pass over GPU 0 then over both (call D read 239.4-252.1 Triton tasks a minute over both GPUs; Ray on
# 4 x H200 in call B read 188.6 on four and 189.4 on one, a host-wide ceiling).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD KERNELBENCH_ROOT=$PWD/.gpu/kernelbench TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
mkdir -p /tmp/deb && for f in .gpu/deb/*.deb; do dpkg -x "$f" /tmp/deb; done
export PATH=/tmp/deb/usr/bin:$PATH LD_LIBRARY_PATH=/tmp/deb/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
mkdir -p $OUT/raw
nvidia-smi -L > $OUT/raw/device.txt 2>&1
for gpus in 1 2; do
    timeout 115 python3 tests/bench/bench_batch.py --kinds triton --triton-n 192 --gpus $gpus --budget-s 90 \
        --cache-dir /tmp/krl-e-cache --out $OUT/raw/gpus$gpus.jsonl > $OUT/raw/gpus$gpus.log 2>&1
done
tar -czf $OUT/raw.tgz -C $OUT raw
for f in $OUT/raw/gpus*.jsonl; do
python3 - "$f" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if "phase_mean_s" not in r:
        print(sys.argv[1].rsplit("/", 1)[1], r.get("skipped")); continue
    p = r["phase_mean_s"]
    print(sys.argv[1].rsplit("/", 1)[1], r["gpus"], "done", r["n_done"], "wall", r["wall_s"], r["evals_per_min"], "/min",
          r["verdicts"], "idle", r.get("gpu_idle_share"), "start", r.get("pool_start_s"), "speedup median", r.get("speedup_median"))
    print("   ", {k: p.get(k) for k in ("total", "timing", "timing_held", "device_wait", "kernel_checks", "correctness", "cpu_judge", "cpu_runner", "queue")})
    print("    D", r.get("host_cpu_busy_share"), r.get("host_blocked_mean"), r.get("host_blocked_in"), r.get("host_blocked_by"))
PY
done
