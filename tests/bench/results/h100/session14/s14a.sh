. .gpu/env.sh
# Session 14, call A: the 48-kernel CUDA batch, cold then warm, through one pool on one H100, now with the exchange
# folders on the judge host's tmpfs (session 13's run was before it), gates on (the default).
df -T /tmp /dev/shm > $OUT/fs.txt 2>&1
LOCAL_BUDGET_S=500 bash tests/bench/gpu_batch.sh local
tail -4 $OUT/batch_local.log
python3 - $OUT/batch_local.jsonl <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    print({k: d.get(k) for k in ("pass", "items", "returned", "wall_s", "wall_cached_s", "evals_per_min", "verdicts", "retried_alone")})
PY
