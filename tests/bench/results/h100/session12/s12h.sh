. .gpu/env.sh
# Session 12, call H: the judge's clock stops before it decodes an answer (the projections' decoding was charged to
# the candidate): identical torch code at 1 and 8 slots, Triton at 8.
timeout 55 python3 tests/bench/bench_slot.py --n 12 --slots 1 --kinds torch > $OUT/slot.txt 2>&1
timeout 60 python3 tests/bench/bench_slot.py --n 24 --slots 8 --kinds torch >> $OUT/slot.txt 2>&1
timeout 80 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton >> $OUT/slot.txt 2>&1
python3 .gpu/summary.py $OUT/slot.txt
python3 - $OUT/slot.txt <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][0]
for t in r["orders"]["rounds_sample"]:
    for row in t[-6:]:
        print(row, "batch diff", round(row[3] - row[1], 3), "hand diff", round(row[4] - row[2], 3))
print(r["orders"].get("round_ratios"))
PY
