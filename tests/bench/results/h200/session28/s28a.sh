. .gpu/env.sh
# Session 28, call A (one H200): session 27's last changes ran on no GPU (the projections' float64 sums on a GPU and
# 1e-6 slack, integer outputs projected, NaN as 0; judge.compare's NaN pattern; the nudge of 0.25; the outputs folder
# through a handle; loads_untrusted; the build cache's 0711; replay fingerprints of correct outputs only). Every GPU
# test, then Triton and identical torch code at 8 slots (does any honest task now fail a projection?).
mkdir -p $OUT/raw
OUT=$OUT/raw timeout 320 bash tests/bench/gpu_check.sh tests > $OUT/raw/check.txt 2>&1
timeout 100 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton > $OUT/raw/slot.txt 2>&1
timeout 80 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch >> $OUT/raw/slot.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
grep -E "passed|failed|FAILED|ERROR|XFAIL|^E  " $OUT/raw/gpu_tests.txt | tail -30 | cut -c1-300
python3 - $OUT/raw/slot.txt <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line); s = r.get("speedups") or []
        print(r["kind"], r["slots"], "rate", r.get("evals_per_min"), "verdicts", r.get("verdicts"),
              "within5", sum(abs(x - 1) <= 0.05 for x in s), "of", len(s), "errors", r.get("errors") or r.get("error_kinds"))
    elif "Wrong" in line or "Traceback" in line or "Error" in line:
        print(line.rstrip()[:300])
PY
