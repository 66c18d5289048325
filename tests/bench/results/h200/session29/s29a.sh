. .gpu/env.sh
# Session 29, call A (one H200): session 28's last changes on a GPU (integers compared exactly, float64 in float64, the
# /proc masks, memfd_secret refused, the static rules' new indirections), every GPU test, the projection attacks on a
# GPU (before the device digests), then Triton and identical torch code at 8 slots.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; git log --oneline -1; } > $OUT/raw/device.txt 2>&1
timeout -s INT 330 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=300 -rfE --tb=short \
    tests/evaluator/test_device_gate.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_slot_sol_floor.py \
    tests/evaluator/test_attack_corpus.py tests/evaluator/test_triton_launchers.py \
    tests/evaluator/test_slot_projection_attacks.py > $OUT/raw/gpu_tests.txt 2>&1
timeout 90 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton > $OUT/raw/slot.txt 2>&1
timeout 70 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch >> $OUT/raw/slot.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
grep -E "passed|failed|FAILED|ERROR|XFAIL|^E  " $OUT/raw/gpu_tests.txt | tail -30 | cut -c1-300
grep -E "a minute|within|median" $OUT/raw/slot.txt | tail -12 | cut -c1-250
