. .gpu/env.sh
# Session 28, call B (one H200): a task's group now refuses new opens of the GPU's own node to every process but its
# runner by default (isolation/device_access.py: the device program reads the opener's thread group). Which modes let
# a warmed process profile for the first time and stop a child's CUDA (probe_device_opens.py: none, runner; "gpu", the runner refused too, was session 27 call E); the
# fidelity tests with the refusal off ("0": the new child probe should fail) and on (every test should pass, the
# lazy kernel's own-kernel share included); then every GPU test, and Triton at 8 slots.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; ls -l /proc/self/ns/pid; } > $OUT/raw/device.txt 2>&1
for mode in none runner; do timeout 60 python3 tests/bench/probe_device_opens.py $mode; done > $OUT/raw/opens.txt 2>&1
KRL_WORKER_GPU_OPENS_DENIED=0 timeout -s INT 150 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=140 -rfE \
    --tb=short tests/evaluator/test_fidelity_gpu.py > $OUT/raw/fidelity_off.txt 2>&1
OUT=$OUT/raw timeout 320 bash tests/bench/gpu_check.sh tests > $OUT/raw/check.txt 2>&1
timeout 90 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton > $OUT/raw/slot.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
grep "^{" $OUT/raw/opens.txt
grep -E "passed|failed|FAILED|^E  " $OUT/raw/fidelity_off.txt | tail -6 | cut -c1-300
grep -E "passed|failed|FAILED|ERROR|XFAIL|^E  " $OUT/raw/gpu_tests.txt | tail -30 | cut -c1-300
python3 - $OUT/raw/slot.txt <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line); s = r.get("speedups") or []
        print(r["kind"], r["slots"], "rate", r.get("evals_per_min"), "verdicts", r.get("verdicts"),
              "within5", sum(abs(x - 1) <= 0.05 for x in s), "of", len(s), "errors", r.get("errors"))
PY
