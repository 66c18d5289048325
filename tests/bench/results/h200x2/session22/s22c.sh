# Carries .gpu/deb, .whl/ray and .whl/raydeps only (with .gpu whole the tree passed the device tool's 64 MiB): the
# Triton batch needs no KernelBench checkout and the evaluator none of the TUI's wheels.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
mkdir -p /tmp/deb && for f in .gpu/deb/*.deb; do dpkg -x "$f" /tmp/deb; done
export PATH=/tmp/deb/usr/bin:$PATH LD_LIBRARY_PATH=/tmp/deb/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
# Session 22, call C (nvidia-h200-x2): "auto" slots (session 21: 8 a host, shared among its GPUs), never run as the
# default: one local pool over both GPUs with no --slots (4 a GPU expected; session 21 measured 256.1 a minute with
# --slots 4), then Triton through Ray on 1 then 2 GPUs (scale/cluster.actor_slots: each actor 8 / the host's 2 GPUs).
mkdir -p $OUT/raw/ray
{ nvidia-smi -L; nproc; git log -1 --format=%h; } > $OUT/raw/device.txt 2>&1
timeout 118 python3 tests/bench/bench_batch.py --kinds triton --triton-n 384 --gpus 2 --budget-s 100 \
    --cache-dir /tmp/krl-c-cache --out $OUT/raw/local_auto.jsonl > /dev/null 2>$OUT/raw/local_auto.err
left=$(( 560 - SECONDS ))
OUT=$OUT/raw/ray RAY_BUDGET_S=$(( left - 90 )) timeout $left bash -c \
    'sed "s/--ray-gpus 1,4 --kinds triton/--ray-gpus 1,2 --kinds triton/" tests/bench/gpu_batch.sh > /tmp/gpu_batch2.sh;
     bash /tmp/gpu_batch2.sh rayt' > $OUT/raw/ray/summary.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
python3 - "$OUT/raw/local_auto.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if "phase_mean_s" not in r:
        print(r); continue
    p = r["phase_mean_s"]
    print("local auto", r["gpus"], "slots", r.get("slots_per_gpu"), "done", r["n_done"], "wall", r["wall_s"], r["evals_per_min"],
          "/min", r["verdicts"], "speedup median", r.get("speedup_median"), "D", r.get("host_blocked_mean"))
    print("   ", {k: p.get(k) for k in ("total", "timing", "timing_held", "device_wait", "kernel_checks")})
PY
tail -2 $OUT/raw/local_auto.err | cut -c1-200
grep -v '^    phases' $OUT/raw/ray/summary.txt | cut -c1-500 | tail -14
