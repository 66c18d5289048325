# Session 22, call E (nvidia-h200-x2, the device time left): Ray on 2 GPUs with 6 slots an actor (12 on the host)
# against "auto" (4 an actor, 8 on the host) again: call D read 267.0 a minute with "auto", 199.0 on one GPU x 8.
# Carries .gpu/deb, .whl/ray and .whl/raydeps only (the tree's 64 MiB).
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 PYTHONPATH=/tmp/site:$PWD
mkdir -p /tmp/deb && for f in .gpu/deb/*.deb; do dpkg -x "$f" /tmp/deb; done
export PATH=/tmp/deb/usr/bin:$PATH LD_LIBRARY_PATH=/tmp/deb/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
mkdir -p $OUT/raw
{ nvidia-smi -L; nproc; } > $OUT/raw/device.txt 2>&1
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/ray/*.whl > $OUT/raw/install.txt 2>&1
timeout 150 python3 tests/bench/bench_batch.py --ray --ray-gpus 2 --slots 6 --kinds triton --triton-n 192 \
    --budget-s 135 --out $OUT/raw/ray.jsonl > $OUT/raw/ray2_s6.log 2>&1
timeout 150 python3 tests/bench/bench_batch.py --ray --ray-gpus 2 --kinds triton --triton-n 192 \
    --budget-s 135 --out $OUT/raw/ray.jsonl > $OUT/raw/ray2_auto.log 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"; tail -3 $OUT/raw/install.txt
python3 - $OUT/raw/ray.jsonl <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        if "phase_mean_s" not in r:
            print(r); continue
        p = r["phase_mean_s"]
        print(r["gpus"], "GPUs", "slots", r.get("slots_per_gpu"), "done", r["n_done"], "wall", r["wall_s"], r["evals_per_min"], "/min", r["verdicts"],
              "idle", r["gpu_idle_share"], "start", r.get("ray_start_s"), "D", r.get("host_blocked_mean"),
              {k: p.get(k) for k in ("total", "timing", "timing_held", "device_wait", "kernel_checks")})
PY
grep -h -E "Traceback|Error" $OUT/raw/ray2_s6.log $OUT/raw/ray2_auto.log | tail -4
