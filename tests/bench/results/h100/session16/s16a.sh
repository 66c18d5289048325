. .gpu/env.sh
# Session 16, call A: session 15's last code (trial means without spiked calls, the judge's own reference, the
# runner-first reference off by default) through the GPU tests it touched, and the live agreement run against
# KernelBench's own evaluator at 2 slots (its pass in the same call).
mkdir -p $OUT/raw
timeout -s INT 200 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=180 -rfE --tb=short \
    tests/evaluator/test_kernelbench_events_gpu.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_attack_corpus.py \
    tests/evaluator/test_device_gate.py tests/evaluator/test_slot_sol_floor.py > $OUT/raw/gpu_tests.txt 2>&1
timeout 330 python3 tests/bench/bench_kernelbench_agreement.py --only 0,3,8,10-25,27,30-36 --out "$OUT/raw/kb.json" \
    --budget-s 300 --kb-repeats 1 --slots 2 > "$OUT/raw/kb.txt" 2>&1
cp $OUT/raw/kb.json $OUT/kb.json 2>/dev/null
tar -czf $OUT/raw.tgz -C $OUT raw
grep -E "PASSED|FAILED|XFAIL|XPASS|ERROR|^E  " $OUT/raw/gpu_tests.txt | cut -c1-200 | grep -v PASSED | tail -14
echo "passed: $(grep -c PASSED $OUT/raw/gpu_tests.txt)"; tail -2 $OUT/raw/gpu_tests.txt
tail -12 $OUT/raw/kb.txt | cut -c1-400
