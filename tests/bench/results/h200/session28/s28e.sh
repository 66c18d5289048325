. .gpu/env.sh
# Session 28, call E (one H200): every GPU test on the final tree (the judge's fixes: Python numbers projected and
# digested by value, a comparison that cannot take a value is a wrong output, the launcher list's type; the tick
# attacks checked at 1.25x where a child gets no context).
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
timeout -s INT 280 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=270 -rfE --tb=short \
    tests/evaluator/test_device_gate.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_slot_sol_floor.py \
    tests/evaluator/test_attack_corpus.py tests/evaluator/test_triton_launchers.py > $OUT/raw/gpu_tests.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
grep -E "passed|failed|FAILED|ERROR|XFAIL|^E  " $OUT/raw/gpu_tests.txt | tail -30 | cut -c1-300
