. .gpu/env.sh
# Session 29, call B (one H200): the hand-overs' digests made on the device (slot/output_digest.py). Every GPU test
# (the projection attacks on a GPU, the kernel against its NumPy mirror), the binding on and off against attacks that
# compute only the picked calls (probe_gpu_digests.py), then what the digests cost: Triton and identical torch code at
# 8 slots with them and without (KRL_WORKER_GPU_DIGESTS=0), in turn.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; git log --oneline -1; } > $OUT/raw/device.txt 2>&1
timeout -s INT 300 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=280 -rfE --tb=short \
    tests/evaluator/test_output_digest.py tests/evaluator/test_slot_projection_attacks.py \
    tests/evaluator/test_device_gate.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_slot_sol_floor.py \
    tests/evaluator/test_attack_corpus.py tests/evaluator/test_triton_launchers.py > $OUT/raw/gpu_tests.txt 2>&1
timeout 100 python3 tests/bench/probe_gpu_digests.py > $OUT/raw/probe.txt 2>&1
for setting in 1 0 1 0; do
    KRL_WORKER_GPU_DIGESTS=$setting timeout 50 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton \
        >> $OUT/raw/slot.txt 2>&1
    KRL_WORKER_GPU_DIGESTS=$setting timeout 35 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch \
        >> $OUT/raw/slot.txt 2>&1
    [ $SECONDS -gt 540 ] && break
done
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
grep -E "passed|failed|FAILED|ERROR|XFAIL|^E  " $OUT/raw/gpu_tests.txt | tail -30 | cut -c1-300
cut -c1-220 $OUT/raw/probe.txt | tail -12
grep -o '"kind": "[a-z]*"\|"evals_per_min": [0-9.]*\|"speedup_median": [0-9.]*' $OUT/raw/slot.txt | paste - - - | head
