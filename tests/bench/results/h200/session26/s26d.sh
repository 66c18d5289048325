. .gpu/env.sh
# Session 26, call D (one H200): the gap probe off by default now (call A-C: honest windows gapped, cause unknown).
# First one guess at the cause: a batch after the device idled 2, 20 and 200 ms (its clocks falling meanwhile), matrix
# products and small ReLU calls, probed; then every GPU test on the final default (gpu_check.sh tests).
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
timeout 100 python3 tests/bench/probe_time_slices.py --reps 20 --neighbours "" --pauses-ms 2,20,200 \
    > $OUT/raw/slices.txt 2>&1
OUT=$OUT/raw bash tests/bench/gpu_check.sh tests > $OUT/raw/check.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
grep "^{" $OUT/raw/slices.txt; grep -v "^{" $OUT/raw/slices.txt | tail -5 | cut -c1-300
tail -20 $OUT/raw/check.txt
grep -E "^FAILED|^ERROR|^E  " $OUT/raw/gpu_tests.txt | head -20 | cut -c1-300
