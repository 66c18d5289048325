. .gpu/env.sh
# Session 12, call F: the GPU tests again (gate test's bounds, fidelity through the slot with compile workers, TMPDIR
# kept in runners); gated batches of 2.5 ms; the timed pair on one CPU now that its setting reaches the judge; one slot.
timeout -s INT 270 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=260 -rfE --tb=short \
    tests/evaluator/test_device_gate.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_slot_sol_floor.py \
    tests/evaluator/test_attack_corpus.py > $OUT/gpu_tests.txt 2>&1
KRL_WORKER_TIMING_BATCH_MS=2.5 timeout 80 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton > $OUT/slot.txt 2>&1
KRL_WORKER_TIMING_BATCH_MS=2.5 timeout 60 python3 tests/bench/bench_slot.py --n 24 --slots 8 --kinds torch >> $OUT/slot.txt 2>&1
KRL_WORKER_TIMING_SAME_CPU=1 timeout 60 python3 tests/bench/bench_slot.py --n 24 --slots 8 --kinds torch >> $OUT/slot.txt 2>&1
timeout 55 python3 tests/bench/bench_slot.py --n 12 --slots 1 --kinds torch >> $OUT/slot.txt 2>&1
grep -E "PASSED|FAILED|XFAIL|XPASS|ERROR|^E  " $OUT/gpu_tests.txt | cut -c1-250 | tail -32
python3 .gpu/summary.py $OUT/slot.txt
