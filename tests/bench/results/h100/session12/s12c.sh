. .gpu/env.sh
# Session 12, call C: the device gates (default on) -- identical torch code at 1 and 8 slots, Triton at 8, the GPU
# tests; then the ungated baseline at one slot on the same machine.
timeout 60 python3 tests/bench/bench_slot.py --n 12 --slots 1 --kinds torch > $OUT/slot.txt 2>&1
timeout 75 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch >> $OUT/slot.txt 2>&1
timeout 90 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton >> $OUT/slot.txt 2>&1
timeout -s INT 250 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=240 -rfE --tb=short \
    tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_slot_sol_floor.py \
    tests/evaluator/test_attack_corpus.py > $OUT/gpu_tests.txt 2>&1
KRL_TIMING_GATE=0 timeout 55 python3 tests/bench/bench_slot.py --n 12 --slots 1 --kinds torch >> $OUT/slot.txt 2>&1
python3 .gpu/summary.py $OUT/slot.txt
grep -E "passed|failed|FAILED|ERROR|assert" $OUT/gpu_tests.txt | tail -15
grep -v "^{" $OUT/slot.txt | grep -v Warning | tail -20 | cut -c1-300
