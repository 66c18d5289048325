. .gpu/env.sh
# Session 21, call D (nvidia-h200-x2, the device time left): slots a GPU on a 2-GPU host, 4 against 8 (call C on
# 4 x H200: 4 x 2 slots 267 Triton tasks a minute, 4 x 4 218-222, call B's 4 x 8 137-160; session 20's 2 x 8 234-252).
mkdir -p $OUT/raw
nvidia-smi -L > $OUT/raw/device.txt 2>&1
batch() { name=$1; slots=$2
    timeout 118 python3 tests/bench/bench_batch.py --kinds triton --triton-n 384 --gpus 2 --slots $slots --budget-s 100 \
        --cache-dir /tmp/krl-d-cache --out $OUT/raw/$name.jsonl > /dev/null 2>$OUT/raw/$name.err ; }
batch gpus2_s4 4
batch gpus2_s8 8
tar -czf $OUT/raw.tgz -C $OUT raw
for f in gpus2_s4 gpus2_s8; do
python3 - "$OUT/raw/$f.jsonl" <<'PY'
import json, sys
try:
    lines = open(sys.argv[1]).readlines()
except OSError:
    lines = []
for line in lines:
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if "phase_mean_s" not in r:
        print(sys.argv[1].rsplit("/", 1)[1], r.get("skipped")); continue
    p = r["phase_mean_s"]
    print(sys.argv[1].rsplit("/", 1)[1], r["gpus"], "done", r["n_done"], "start", r.get("pool_start_s"), "wall",
          r["wall_s"], r["evals_per_min"], "/min", r["verdicts"], "idle", r.get("gpu_idle_share"),
          "speedup median", r.get("speedup_median"))
    print("   ", {k: p.get(k) for k in ("total", "timing", "timing_held", "device_wait", "kernel_checks", "correctness",
                                       "cpu_judge", "cpu_runner", "judge_cuda_mallocs_timing")})
    print("    D", r.get("host_cpu_busy_share"), r.get("host_blocked_mean"))
PY
tail -2 $OUT/raw/$f.err | cut -c1-200
done
