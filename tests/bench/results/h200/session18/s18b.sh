. .gpu/env.sh
# Session 18, call B (one H200): the 48-kernel CUDA batch cold and warm on session 17's code (its warm pass was never
# measured on the overlapped trials and the direct file path), with the budget session 16 used.
nvidia-smi -L > $OUT/device.txt; nproc >> $OUT/device.txt
LOCAL_BUDGET_S=470 bash tests/bench/gpu_batch.sh local
cat $OUT/device.txt
echo "== batch"
python3 - $OUT/batch_local.jsonl <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    print({k: d.get(k) for k in ("pass", "items", "n_done", "missing", "wall_s", "wall_cached_s", "evals_per_min", "verdicts", "gpu_idle_share", "host_cpu_busy_share")})
    items = d.get("per_item") or []
    b = [i for i in items if i["problem"].startswith("builtin")]
    keys = ("total", "correctness", "trials_judge_inputs", "trials_runner", "trials_judge_compare", "kernel_checks", "timing", "timing_held", "recheck", "cpu_judge", "cpu_runner")
    for grp, name in ((b, "builtin"), ([i for i in items if not i["problem"].startswith("builtin")], "kb")):
        print(name, len(grp), {k: round(sum(i["phases"].get(k, 0) for i in grp), 1) for k in keys})
PY
tail -5 $OUT/batch_local.log | cut -c1-300
