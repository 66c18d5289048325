# Session 20, call B (nvidia-h200-x4), on the code where a slot's runners hold only their own GPU's node (the default
# since call A: 32 sandboxed CUDA starts over 4 GPUs took 4.4-4.8 s each with it against 6.4-7.9 s with every node):
# is the driver's lock one per host or one per GPU (32 starts all on GPU 0 against spread over 4)? The multi-GPU tests
# with the new one (a candidate that finds another GPU's node fails it). Triton through Ray on 1 then 4 GPUs.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD KERNELBENCH_ROOT=$PWD/.gpu/kernelbench TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
mkdir -p /tmp/deb && for f in .gpu/deb/*.deb; do dpkg -x "$f" /tmp/deb; done
export PATH=/tmp/deb/usr/bin:$PATH LD_LIBRARY_PATH=/tmp/deb/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
mkdir -p $OUT/raw/ray
nvidia-smi -L > $OUT/raw/device.txt 2>&1
timeout 100 python3 tests/bench/probe_gpu_nodes.py --together 32 > $OUT/raw/probe.txt 2>&1
timeout -s INT 130 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=120 -rfE --tb=short \
    tests/evaluator/test_multi_gpu.py > $OUT/raw/multi_gpu_tests.txt 2>&1
OUT=$OUT/raw/ray RAY_BUDGET_S=200 timeout 275 bash tests/bench/gpu_batch.sh rayt > $OUT/raw/ray/summary.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cut -c1-400 $OUT/raw/probe.txt
grep -E "PASSED|FAILED|SKIPPED|ERROR|^E  " $OUT/raw/multi_gpu_tests.txt | cut -c1-200 | tail -12; tail -1 $OUT/raw/multi_gpu_tests.txt
grep -v '^    phases' $OUT/raw/ray/summary.txt | cut -c1-500 | tail -12
