. .gpu/env.sh
# Session 28, call D (one H200): the agreement with KernelBench's own evaluator on session 28's tree (not measured since
# session 26; the timing nudge became 0.25 in session 27), then the runner-events GPU tests.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
OUT=$OUT/raw timeout 540 bash tests/bench/gpu_check.sh kb > $OUT/raw/check.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
tail -25 $OUT/raw/kb.txt | cut -c1-250
grep -E "passed|failed|FAILED|ERROR|XFAIL|^E  " $OUT/raw/kb_tests.txt | tail -10 | cut -c1-250
