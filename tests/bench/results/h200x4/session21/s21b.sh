. .gpu/env.sh
# Session 21, call B (nvidia-h200-x4): a timing's staged sets and outputs carved from one device allocation on each side
# (judging/timing.reserve_device_slab; a judge made ~230 cudaMallocs and as many frees a small Triton task in call A).
# One local pool over the 4 GPUs without the slab, then with it, then over GPU 0 with it (the one-GPU rate), the
# 192-task Triton batch each; then the slab's GPU test and the slot's fidelity tests on GPU 0.
mkdir -p $OUT/raw
nvidia-smi -L > $OUT/raw/device.txt 2>&1
batch() { name=$1; gpus=$2; slab=$3
    timeout 118 env KRL_WORKER_DEVICE_SLAB=$slab python3 tests/bench/bench_batch.py --kinds triton --triton-n 192 \
        --gpus $gpus --budget-s 90 --cache-dir /tmp/krl-b-cache --out $OUT/raw/$name.jsonl > $OUT/raw/$name.log 2>&1 ; }
batch gpus4_noslab 4 0
batch gpus4_slab 4 1
batch gpus1_slab 1 1
CUDA_VISIBLE_DEVICES=0 timeout -s INT 130 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=120 -rfE --tb=short \
    tests/evaluator/test_device_memory.py tests/evaluator/test_fidelity_gpu.py > $OUT/raw/gpu_tests.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
grep -E "PASSED|FAILED|XFAIL|XPASS|ERROR|^E  " $OUT/raw/gpu_tests.txt | cut -c1-200 | grep -v PASSED | tail -10
echo "passed: $(grep -c PASSED $OUT/raw/gpu_tests.txt)"; tail -1 $OUT/raw/gpu_tests.txt
for f in gpus4_noslab gpus4_slab gpus1_slab; do
python3 - "$OUT/raw/$f.jsonl" <<'PY'
import json, sys
try:
    lines = open(sys.argv[1]).readlines()
except OSError:
    lines = []
for line in lines:
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if "phase_mean_s" not in r:
        print(sys.argv[1].rsplit("/", 1)[1], r.get("skipped")); continue
    p = r["phase_mean_s"]
    print(sys.argv[1].rsplit("/", 1)[1], r["gpus"], "done", r["n_done"], "wall", r["wall_s"], r["evals_per_min"], "/min",
          r["verdicts"], "idle", r.get("gpu_idle_share"), "speedup median", r.get("speedup_median"))
    print("   ", {k: p.get(k) for k in ("total", "timing", "timing_held", "device_wait", "kernel_checks", "correctness",
                                       "cpu_judge", "cpu_runner", "judge_cuda_mallocs", "judge_cuda_frees",
                                       "judge_reserved_peak_mib")})
    print("    D", r.get("host_cpu_busy_share"), r.get("host_blocked_mean"), r.get("host_blocked_in"), r.get("host_blocked_by"))
PY
tail -3 $OUT/raw/$f.log | cut -c1-200
done
