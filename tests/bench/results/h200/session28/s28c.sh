. .gpu/env.sh
# Session 28, call C (one H200): the red team's fixes on a GPU. Each runner now has a network namespace of its own
# (does CUDA still work in it?), projections allow the trials' near misses on their share of the elements only (no
# floor on every element), CPU-mode hand-overs digest their outputs (the GPU's do not: the order says so). Which device
# opens a runner can still make: a second CUDA context of its own with the runner excepted, and with every process
# refused after CUPTI was attached once and detached ("gpu+warm"); then every GPU test, Triton and identical torch code.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
for mode in runner gpu+warm; do timeout 60 python3 tests/bench/probe_device_opens.py $mode; done > $OUT/raw/opens.txt 2>&1
OUT=$OUT/raw timeout 320 bash tests/bench/gpu_check.sh tests > $OUT/raw/check.txt 2>&1
timeout 90 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton > $OUT/raw/slot.txt 2>&1
timeout 75 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch >> $OUT/raw/slot.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
grep "^{" $OUT/raw/opens.txt
grep -E "passed|failed|FAILED|ERROR|XFAIL|^E  " $OUT/raw/gpu_tests.txt | tail -30 | cut -c1-300
python3 - $OUT/raw/slot.txt <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line); s = r.get("speedups") or []
        print(r["kind"], r["slots"], "rate", r.get("evals_per_min"), "verdicts", r.get("verdicts"),
              "within5", sum(abs(x - 1) <= 0.05 for x in s), "of", len(s), "errors", r.get("errors"))
PY
