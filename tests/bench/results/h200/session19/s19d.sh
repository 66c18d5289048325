. .gpu/env.sh
# Session 19, call D (one H200, the rest of the device time), on call C's code: the live agreement with KernelBench's
# own evaluator at 2 slots with two KernelBench passes (its own run-to-run noise: call C's KernelBench read 29_Matmul_Mish
# 0.119 ms where call B's read 0.078), then timing under load with the judge-driven slot, never measured with it: 11
# honest kernels, each timed twice one at a time through the real pool, quiet, beside 16 g++ compiles of
# torch/extension.h at nice 10, and quiet again (the pool's CPU reservation off, the default).
mkdir -p $OUT/raw
nvidia-smi -L > $OUT/raw/device.txt
timeout 230 python3 tests/bench/bench_kernelbench_agreement.py --only 0,3,8,10-25,27,30-36 --out "$OUT/raw/kb.json" \
    --budget-s 200 --kb-repeats 2 --slots 2 > "$OUT/raw/kb.txt" 2>&1
cp $OUT/raw/kb.json $OUT/kb.json 2>/dev/null
timeout -s INT 320 python3 tests/bench/bench_timing_under_load.py --passes quiet_off,load_off,quiet_off_2 --repeats 2 \
    --load 16 --json $OUT/raw/load.jsonl > $OUT/raw/load.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
tail -8 $OUT/raw/kb.txt | cut -c1-250
grep -v "^  " $OUT/raw/load.txt | tail -24 | cut -c1-250
grep "^  " $OUT/raw/load.txt | head -12 | cut -c1-300
