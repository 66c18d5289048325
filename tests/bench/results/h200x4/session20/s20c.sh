. .gpu/env.sh
# Session 20, call C (nvidia-h200-x4), on the code where a slot's runners hold only their own GPU's node and each
# side's quietest KernelBench round is stamped: the new multi-GPU test (a candidate that finds another GPU's node fails
# it; call B's test run ended before it); then on GPU 0 alone the slot's GPU tests and the live agreement with
# KernelBench's own evaluator at 2 slots, with the judge's clock readings after each of KernelBench's rounds
# (KRL_WORKER_KB_CLOCKS=1, set by the bench; never run before) and KernelBench's own SM clock per pair: do the tasks
# where both evaluators read a small problem 2-5x slow come with a low clock?
mkdir -p $OUT/raw
nvidia-smi -L > $OUT/raw/device.txt
timeout -s INT 130 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=125 -rfE --tb=short \
    tests/evaluator/test_multi_gpu.py -k sees_no_gpu > $OUT/raw/multi_gpu_tests.txt 2>&1
export CUDA_VISIBLE_DEVICES=0
timeout -s INT 215 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=170 -rfE --tb=short \
    tests/evaluator/test_kernelbench_events_gpu.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_attack_corpus.py \
    tests/evaluator/test_device_gate.py tests/evaluator/test_slot_sol_floor.py > $OUT/raw/gpu_tests.txt 2>&1
timeout 185 python3 tests/bench/bench_kernelbench_agreement.py --only 0,3,8,10-25,27,30-36 --out "$OUT/raw/kb.json" \
    --budget-s 168 --kb-repeats 2 --slots 2 > "$OUT/raw/kb.txt" 2>&1
cp $OUT/raw/kb.json $OUT/kb.json 2>/dev/null
tar -czf $OUT/raw.tgz -C $OUT raw
grep -E "PASSED|FAILED|XFAIL|XPASS|ERROR|^E  " $OUT/raw/gpu_tests.txt | cut -c1-200 | grep -v PASSED | tail -14
echo "passed: $(grep -c PASSED $OUT/raw/gpu_tests.txt)"; tail -1 $OUT/raw/gpu_tests.txt
grep -E "PASSED|FAILED|SKIPPED|ERROR|^E  " $OUT/raw/multi_gpu_tests.txt | cut -c1-200 | tail -6
tail -36 $OUT/raw/kb.txt | cut -c1-250
