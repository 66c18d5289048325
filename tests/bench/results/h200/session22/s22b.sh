. .gpu/env.sh
# Session 22, call B (one H200), on d33313f's code (never run on a GPU: session 21's review mends, runner_cpu_weight):
# the reference-time probe (why our KernelBench-convention reference reads ~1.2x KernelBench's on two level-2 GEMM
# problems: KernelBench's own timer against ours, same input or staged sets, outputs dropped or kept, warm or cold
# cache, with the device allocations inside the timed calls); the slot's GPU tests; the live agreement with
# KernelBench's own evaluator at 2 slots.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; git log -1 --format=%h; } > $OUT/raw/device.txt 2>&1
timeout 110 python3 tests/bench/probe_reference_kb.py > $OUT/raw/probe.txt 2>&1
timeout -s INT 215 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=170 -rfE --tb=short \
    tests/evaluator/test_kernelbench_events_gpu.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_attack_corpus.py \
    tests/evaluator/test_device_gate.py tests/evaluator/test_slot_sol_floor.py > $OUT/raw/gpu_tests.txt 2>&1
left=$(( 575 - SECONDS ))
timeout $left python3 tests/bench/bench_kernelbench_agreement.py --only 0,3,8,10-25,27,30-36 --out "$OUT/raw/kb.json" \
    --budget-s $(( left - 17 )) --kb-repeats 2 --slots 2 > "$OUT/raw/kb.txt" 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
cut -c1-400 $OUT/raw/probe.txt | tail -8
grep -E "PASSED|FAILED|XFAIL|XPASS|ERROR|^E  " $OUT/raw/gpu_tests.txt | cut -c1-200 | grep -v PASSED | tail -14
echo "passed: $(grep -c PASSED $OUT/raw/gpu_tests.txt)"; tail -1 $OUT/raw/gpu_tests.txt
tail -36 $OUT/raw/kb.txt | cut -c1-250
