. .gpu/env.sh
# Session 27, call D (one H200): call C's refusal of every NVIDIA node left the runner's profiler session in a task
# without kernels (test_lazy_kernel... own_kernel_time_fraction None). Which nodes a warmed process opens later, with
# no refusal, the new default (major 195: nvidiactl and the GPUs' nodes) and all (probe_device_opens.py); then every
# GPU test on the new default; then the attacks beside the reference.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; stat -fc %T /sys/fs/cgroup; } > $OUT/raw/device.txt 2>&1
timeout 150 python3 tests/bench/probe_device_opens.py > $OUT/raw/opens.txt 2>&1
timeout -s INT 290 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=270 -rfE --tb=short \
    tests/evaluator/test_device_gate.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_slot_sol_floor.py \
    tests/evaluator/test_attack_corpus.py tests/evaluator/test_triton_launchers.py > $OUT/raw/gpu_tests.txt 2>&1
left=$(( 540 - SECONDS )); (( left > 60 )) && timeout $left python3 tests/bench/bench_spin_attacks.py --repeats 1 \
    --probe 0 > $OUT/raw/spin.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
cut -c1-600 $OUT/raw/opens.txt | tail -12
grep -E "passed|failed|FAILED|ERROR|XFAIL|^E  " $OUT/raw/gpu_tests.txt | tail -30 | cut -c1-300
grep "^{" $OUT/raw/spin.txt | cut -c1-260
