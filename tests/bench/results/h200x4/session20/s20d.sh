# Session 20, call D (nvidia-h200-x2: the x4 kind was no longer lent; the device time left): does the judge keeping
# up to 512 MiB of cached blocks between tasks (the new default; KRL_WORKER_JUDGE_CACHE_MIB=0 frees and remakes them each task, as before) lift the
# host-wide ceiling (call B: 188.6 Triton tasks a minute on 4 GPUs through Ray, 189.4 on one)? One local pool over
# the 2 GPUs a pass (no Ray start), the same build cache, 0 / 512 / 0; the host sampler now names who waits in D
# and in which driver call.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD KERNELBENCH_ROOT=$PWD/.gpu/kernelbench TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
mkdir -p /tmp/deb && for f in .gpu/deb/*.deb; do dpkg -x "$f" /tmp/deb; done
export PATH=/tmp/deb/usr/bin:$PATH LD_LIBRARY_PATH=/tmp/deb/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
mkdir -p $OUT/raw
nvidia-smi -L > $OUT/raw/device.txt 2>&1
n=0
for keep in 0 512 0; do
    n=$((n + 1))
    KRL_WORKER_JUDGE_CACHE_MIB=$keep timeout 120 python3 tests/bench/bench_batch.py --kinds triton --triton-n 192 \
        --gpus 2 --budget-s 95 --cache-dir /tmp/krl-d-cache --out $OUT/raw/keep${keep}_$n.jsonl \
        > $OUT/raw/keep${keep}_$n.log 2>&1
done
tar -czf $OUT/raw.tgz -C $OUT raw
for f in $OUT/raw/keep*.jsonl; do
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
          r["verdicts"], "idle", r.get("gpu_idle_share"), "start", r.get("pool_start_s"))
    print("   ", {k: p.get(k) for k in ("total", "timing", "kernel_checks", "correctness", "cpu_runner_warm", "queue")})
    print("    D", r.get("host_blocked_mean"), r.get("host_blocked_in"), r.get("host_blocked_by"))
PY
done
