. .gpu/env.sh
# Session 29, call C (one H200): the session's final evaluator. Every GPU test (the digest kernel on the device, the
# projection attacks with picks in every blind batch and a retried round checked, the static custom-kernel rule reduced
# to "no kernel defined", swapped writes, the page-cache syscalls refused); the binding on and off against the
# attacks that compute only the picked calls (probe_gpu_digests.py); then Triton at 8 slots with and without digests.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
timeout -s INT 320 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=300 -rfE --tb=short \
    tests/evaluator/test_output_digest.py tests/evaluator/test_slot_projection_attacks.py \
    tests/evaluator/test_device_gate.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_slot_sol_floor.py \
    tests/evaluator/test_attack_corpus.py tests/evaluator/test_triton_launchers.py > $OUT/raw/gpu_tests.txt 2>&1
timeout 110 python3 tests/bench/probe_gpu_digests.py > $OUT/raw/probe.txt 2>&1
for setting in 1 0; do
    KRL_WORKER_GPU_DIGESTS=$setting timeout 75 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton \
        >> $OUT/raw/slot.txt 2>&1
done
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
grep -E "passed|failed|FAILED|ERROR|XFAIL|^E  " $OUT/raw/gpu_tests.txt | tail -30 | cut -c1-300
cut -c1-260 $OUT/raw/probe.txt | tail -12
grep -o '"kind": "[a-z]*"\|"evals_per_min": [0-9.]*\|"speedup_median": [0-9.]*' $OUT/raw/slot.txt | paste - - - | head
