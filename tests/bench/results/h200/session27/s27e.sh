. .gpu/env.sh
# Session 27, call E (one H200): with every NVIDIA node or all of major 195 refused, the runner's first profiler
# session in a task recorded nothing (calls C, D; CUPTI attaches in the task, not in the warm-up). Now only the GPUs'
# own nodes are refused (/dev/nvidiaN). Which refusal lets a warmed process profile for the first time and still stops
# a child's context (probe_device_opens.py: none, gpu, 195, all); the fidelity tests with the refusal off (is the
# refusal the cause?), then every GPU test on the new default.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
timeout 150 python3 tests/bench/probe_device_opens.py > $OUT/raw/opens.txt 2>&1
KRL_WORKER_GPU_OPENS_DENIED=0 timeout -s INT 150 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=140 -rfE \
    --tb=short tests/evaluator/test_fidelity_gpu.py > $OUT/raw/fidelity_off.txt 2>&1
timeout -s INT 280 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=270 -rfE --tb=short \
    tests/evaluator/test_device_gate.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_slot_sol_floor.py \
    tests/evaluator/test_attack_corpus.py tests/evaluator/test_triton_launchers.py > $OUT/raw/gpu_tests.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
grep "^{" $OUT/raw/opens.txt
grep -E "passed|failed|FAILED|^E  " $OUT/raw/fidelity_off.txt | tail -6 | cut -c1-300
grep -E "passed|failed|FAILED|ERROR|XFAIL|^E  " $OUT/raw/gpu_tests.txt | tail -30 | cut -c1-300
