. .gpu/env.sh
# Session 17, call B: the big-tensor path made lighter (trials overlapped, large files written straight from the
# device into fallocated huge-page tmpfs, outputs read into a pinned buffer): 256 MiB ReLUs with the judges' profile
# (as call A), then the 48-kernel CUDA batch cold and warm.
mkdir -p $OUT/raw
timeout 100 env X=1 python3 tests/bench/bench_slot.py --slots 8 --n 16 --kinds torch --sizes 67108864 --profile > $OUT/raw/torch_big.txt 2>&1
LOCAL_BUDGET_S=330 bash tests/bench/gpu_batch.sh local
cp $OUT/batch_local.log $OUT/raw/ 2>/dev/null
tar -czf $OUT/raw.tgz -C $OUT raw
echo "== torch_big"
grep "^{" $OUT/raw/torch_big.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],'med',d.get('speedup_median'),'idle',d.get('gpu_idle_share'),'cpu',d.get('host_cpu_busy_share'))
    print({k: p.get(k) for k in ('total','correctness','trials_judge_inputs','trials_runner','trials_judge_compare','kernel_checks','timing','timing_setup','timing_rounds','timing_hooks','timing_kept','timing_held','recheck','cpu_judge','cpu_runner')})
"
grep -A32 "by own time" $OUT/raw/torch_big.txt | cut -c1-150 | tail -26
echo "== batch"; tail -3 $OUT/batch_local.log | cut -c1-300
python3 - $OUT/batch_local.jsonl <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    print({k: d.get(k) for k in ("pass", "items", "wall_s", "wall_cached_s", "evals_per_min", "verdicts", "gpu_idle_share", "host_cpu_busy_share")})
    items = d.get("per_item") or []
    b = [i for i in items if i["problem"].startswith("builtin")]
    keys = ("total", "correctness", "trials_judge_inputs", "trials_runner", "trials_judge_compare", "kernel_checks", "timing", "timing_held", "recheck", "cpu_judge")
    for grp, name in ((b, "builtin"), ([i for i in items if not i["problem"].startswith("builtin")], "kb")):
        print(name, len(grp), {k: round(sum(i["phases"].get(k, 0) for i in grp), 1) for k in keys})
PY
