. .gpu/env.sh
# Session 29, call D (one H200): after call C, the skip attacks made GPU-aware and outputs up to 4 MiB picked in every
# batch: every GPU test again (call C's gpu_side_stream_early_start read 1.37x against a 1.25 bound), then identical
# torch code at 8 slots with and without the device digests.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
timeout -s INT 300 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=280 -rfE --tb=short \
    tests/evaluator/test_output_digest.py tests/evaluator/test_slot_projection_attacks.py \
    tests/evaluator/test_device_gate.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_slot_sol_floor.py \
    tests/evaluator/test_attack_corpus.py tests/evaluator/test_triton_launchers.py > $OUT/raw/gpu_tests.txt 2>&1
for setting in 1 0; do
    KRL_WORKER_GPU_DIGESTS=$setting timeout 55 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch \
        >> $OUT/raw/slot.txt 2>&1
done
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
grep -E "passed|failed|FAILED|ERROR|XFAIL|^E  " $OUT/raw/gpu_tests.txt | tail -30 | cut -c1-300
grep -o '"kind": "[a-z]*"\|"evals_per_min": [0-9.]*\|"speedup_median": [0-9.]*' $OUT/raw/slot.txt | paste - - - | head
