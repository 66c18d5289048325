. .gpu/env.sh
# Session 16, call D: the 48-kernel CUDA batch, cold then warm, through one pool on one H100, on this session's code
# (one queue per context, the runner-first reference off, the lighter harness, KernelBench's harness from the rounds).
LOCAL_BUDGET_S=480 bash tests/bench/gpu_batch.sh local
tail -4 $OUT/batch_local.log
python3 - $OUT/batch_local.jsonl <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    print({k: d.get(k) for k in ("pass", "items", "returned", "wall_s", "wall_cached_s", "evals_per_min", "verdicts", "retried_alone")})
    print({k: v for k, v in (d.get("phase_mean_s") or {}).items() if k in ("total", "compile", "correctness", "kernel_checks", "timing", "timing_held", "device_wait", "queue")})
PY
