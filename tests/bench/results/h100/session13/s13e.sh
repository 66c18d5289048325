. .gpu/env.sh
# Session 13, call E: agreement with KernelBench's own evaluator (27 pairs), ours at 1 slot a GPU and then at 2 (the
# bench's default): do the neighbours' GPU work in the single-call event windows make the difference?
df -T /tmp /dev/shm > $OUT/fs.txt 2>&1
timeout 545 python3 tests/bench/bench_kernelbench_agreement.py --only 0,3,8,10-25,27,30-36 --out "$OUT/kb.json" \
    --budget-s 500 --kb-repeats 2 --ours-slots 1,2 > "$OUT/kb.txt" 2>&1
cat $OUT/fs.txt
python3 - $OUT/kb.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["summary"]
for slots, s in (d.get("by_slots") or {str(d.get("slots")): d}).items():
    print(slots, "slots:", {k: s.get(k) for k in ("both_correct", "within_10pct", "median_ratio", "verdict_agreement",
                                                   "spike_free_diagnostic", "against_kernelbench_mean", "kernelbench_self")})
print(d.get("timings"))
PY
