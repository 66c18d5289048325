. .gpu/env.sh
# Session 21, call C (nvidia-h200-x4): fewer slots a GPU on a 4-GPU host (one local pool over the 4 GPUs; call B's
# 8 slots a GPU read 137-160 Triton tasks a minute against 192 on one GPU, session 20's 2 x 8 slots 234-252), with and
# without the device slab, and where the judge's device allocations are made (judge_cuda_mallocs_timing).
mkdir -p $OUT/raw
nvidia-smi -L > $OUT/raw/device.txt 2>&1
batch() { name=$1; slots=$2; slab=$3
    timeout 160 env KRL_WORKER_DEVICE_SLAB=$slab python3 tests/bench/bench_batch.py --kinds triton --triton-n 384 \
        --gpus 4 --slots $slots --budget-s 130 --cache-dir /tmp/krl-c-cache --out $OUT/raw/$name.jsonl \
        > $OUT/raw/$name.log 2>&1 ; }
batch gpus4_s4_slab 4 1
batch gpus4_s4_noslab 4 0
batch gpus4_s2_slab 2 1
tar -czf $OUT/raw.tgz -C $OUT raw
for f in gpus4_s4_slab gpus4_s4_noslab gpus4_s2_slab; do
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
                                       "cpu_judge", "cpu_runner", "judge_cuda_mallocs", "judge_cuda_mallocs_timing",
                                       "judge_cuda_frees", "judge_reserved_peak_mib")})
    print("    D", r.get("host_cpu_busy_share"), r.get("host_blocked_mean"), r.get("host_blocked_by"))
PY
done
