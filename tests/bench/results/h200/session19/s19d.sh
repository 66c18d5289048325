. .gpu/env.sh
# Session 19, call D (one H200): timing under load with the judge-driven slot (never measured with it: session 13's
# loaded passes did not finish in a call). 11 honest kernels, each timed 3 times one at a time through the real pool,
# quiet, beside 16 g++ compiles of torch/extension.h at nice 10, and quiet again; the pool's CPU reservation off (the
# default). Target: >= 95% of kernels within ±5% of their quiet speedup.
mkdir -p $OUT/raw
nvidia-smi -L > $OUT/raw/device.txt
timeout -s INT 500 python3 tests/bench/bench_timing_under_load.py --passes quiet_off,load_off,quiet_off_2 --repeats 3 \
    --load 16 --json $OUT/raw/load.jsonl > $OUT/raw/load.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
grep -v "^  " $OUT/raw/load.txt | tail -40 | cut -c1-250
grep "^  " $OUT/raw/load.txt | head -20 | cut -c1-300
