. .gpu/env.sh
# Session 26, call E (one H200, the last device time): the agreement with KernelBench's own evaluator on the final
# default (last measured in session 22: 22 of 27), then the runner-events GPU tests in the time left.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
timeout 330 python3 tests/bench/bench_kernelbench_agreement.py --only 0,3,8,10-25,27,30-36 --out $OUT/raw/kb.json \
    --budget-s 300 --kb-repeats 2 > $OUT/raw/kb.txt 2>&1
left=$(( 500 - SECONDS )); (( left > 60 )) && timeout -s INT $left python3 -m pytest -v -p no:cacheprovider -m gpu \
    --timeout=$(( left - 10 )) -rfE --tb=short tests/evaluator/test_kernelbench_events_gpu.py > $OUT/raw/kb_tests.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
grep -E "^both correct|^diagnostic|^against|^KernelBench against|within" $OUT/raw/kb.txt | head -12
tail -45 $OUT/raw/kb.txt | cut -c1-220
grep -E "passed|failed|FAILED|ERROR" $OUT/raw/kb_tests.txt | tail -6
