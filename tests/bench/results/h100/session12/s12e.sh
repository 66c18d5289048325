. .gpu/env.sh
# Session 12, call E: the gates with their keeper -- the GPU tests (gate tests, fidelity now through the slot, SOL
# floor, attack corpus), then Triton and identical torch code at 8 slots with gates and without, same machine.
timeout -s INT 270 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=260 -rfE --tb=short \
    tests/evaluator/test_device_gate.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_slot_sol_floor.py \
    tests/evaluator/test_attack_corpus.py > $OUT/gpu_tests.txt 2>&1
timeout 80 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton > $OUT/slot.txt 2>&1
KRL_WORKER_TIMING_GATE=0 timeout 80 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton >> $OUT/slot.txt 2>&1
timeout 60 python3 tests/bench/bench_slot.py --n 24 --slots 8 --kinds torch >> $OUT/slot.txt 2>&1
KRL_WORKER_TIMING_GATE=0 timeout 60 python3 tests/bench/bench_slot.py --n 24 --slots 8 --kinds torch >> $OUT/slot.txt 2>&1
grep -E "PASSED|FAILED|ERROR|^E  " $OUT/gpu_tests.txt | cut -c1-250 | tail -30
python3 .gpu/summary.py $OUT/slot.txt
