. .gpu/env.sh
# Session 12, call G: other slots' GPU steps kept out of timings (shared steps: all but the first trial and the kernel
# checks; the warm rounds now one of them) against the default, same machine; the fidelity GPU tests with them.
S=trials,recheck,warm_rounds,timing_inputs,timing_checks
timeout 80 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton > $OUT/slot.txt 2>&1
KRL_WORKER_DEVICE_SHARED_STEPS=$S timeout 80 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton >> $OUT/slot.txt 2>&1
KRL_WORKER_DEVICE_SHARED_STEPS=$S timeout 60 python3 tests/bench/bench_slot.py --n 24 --slots 8 --kinds torch >> $OUT/slot.txt 2>&1
KRL_WORKER_DEVICE_SHARED_STEPS=$S timeout -s INT 200 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=190 \
    -rfE --tb=short tests/evaluator/test_fidelity_gpu.py > $OUT/gpu_tests.txt 2>&1
grep -E "PASSED|FAILED|XFAIL|XPASS|ERROR|^E  " $OUT/gpu_tests.txt | cut -c1-250 | tail -14
python3 .gpu/summary.py $OUT/slot.txt
