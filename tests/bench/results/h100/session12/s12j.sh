. .gpu/env.sh
# Session 12, call J: the final code's GPU tests (gates, fidelity through the slot, SOL floor, attack corpus); CUDA
# context churn on one GPU with 1, 2 and 4 lanes (does making fewer at once make more a second?).
timeout -s INT 280 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=270 -rfE --tb=short \
    tests/evaluator/test_device_gate.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_slot_sol_floor.py \
    tests/evaluator/test_attack_corpus.py > $OUT/gpu_tests.txt 2>&1
for lanes in 1 2 4; do
    timeout 40 python3 tests/bench/bench_context_churn.py --gpus 1 --lanes $lanes --seconds 10 --profile 0 >> $OUT/churn.txt 2>&1
done
grep -E "PASSED|FAILED|XFAIL|XPASS|ERROR|^E  " $OUT/gpu_tests.txt | cut -c1-250 | tail -24
grep "^{" $OUT/churn.txt
