# Session 20, call A (nvidia-h200-x4): does a sandbox that holds only its own GPU's /dev/nvidiaN still run CUDA (under
# each spelling of CUDA_VISIBLE_DEVICES), and do 32 sandboxed processes over 4 GPUs start CUDA faster with only their
# own node (session 15: 52.6 processes in D in the driver's locks on 4 GPUs)? Then Triton through Ray on 1 and 4 GPUs,
# never measured with the judge-driven slot: every node bound (KRL_WORKER_GPU_NODES=all, as before), then 4 GPUs with
# each slot's own node (the new default).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD KERNELBENCH_ROOT=$PWD/.gpu/kernelbench TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
mkdir -p /tmp/deb && for f in .gpu/deb/*.deb; do dpkg -x "$f" /tmp/deb; done
export PATH=/tmp/deb/usr/bin:$PATH LD_LIBRARY_PATH=/tmp/deb/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
mkdir -p $OUT/raw/all $OUT/raw/own
{ nvidia-smi -L; nproc; ls -la /dev/nvidia*; grep -H -E 'UUID|Minor|Bus Location' /proc/driver/nvidia/gpus/*/information; } \
    > $OUT/raw/device.txt 2>&1
timeout 100 python3 tests/bench/probe_gpu_nodes.py --together 32 > $OUT/raw/probe.txt 2>&1
OUT=$OUT/raw/all KRL_WORKER_GPU_NODES=all RAY_BUDGET_S=80 timeout 280 bash tests/bench/gpu_batch.sh rayt \
    > $OUT/raw/all/summary.txt 2>&1
PYTHONPATH=/tmp/site:$PWD timeout 170 python3 tests/bench/bench_batch.py --ray --ray-gpus 4 --kinds triton \
    --budget-s 80 --out $OUT/raw/own/batch_rayt.jsonl > $OUT/raw/own/batch_rayt.log 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt | head -30
cat $OUT/raw/probe.txt | cut -c1-600
grep -v '^    phases' $OUT/raw/all/summary.txt | cut -c1-500 | tail -12
tail -5 $OUT/raw/own/batch_rayt.log | cut -c1-1500
