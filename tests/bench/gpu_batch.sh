#!/usr/bin/env bash
# The 48-kernel CUDA batch and the Ray scaling (issue 23), each part sized for one 10-minute call of the device tool.
# Run from the repository root with $OUT set (the device tool sets it), carrying .gpu (KernelBench files, bubblewrap
# .debs) and, for the Ray parts, .whl (`make wheels`). One part per call:
#   gpu_batch.sh local   nvidia-h100-x1, ~4-9 min: one pool on the GPU, the 48 CUDA kernels cold (empty build cache)
#                        then warm (same pool, cache kept)
#   gpu_batch.sh local16 nvidia-h100-x4 (when no x1 call is spent), ~4-9 min: the same on GPU 0, pinned to 16 cores
#                        with 8 compile workers, as a one-H100 machine has (an approximation of it: say so)
#   gpu_batch.sh ray1    nvidia-h100-x4, ~5-8 min: Ray on 1 GPU: a cold pass fills /tmp/krl-batch-cache, then a fresh
#                        Ray instance times the CUDA batch (warm) and 48 Triton evaluations
#   gpu_batch.sh ray24   nvidia-h100-x4, next call on the same machine, ~4-8 min: the same on 2 and 4 GPUs (the batch
#                        sent N times on N GPUs), then the scaling efficiency against ray1's rates (kept in /tmp)
#   gpu_batch.sh ray14   nvidia-h100-x4, ~7-9 min, one call where device time is short: the first 24 items of each
#                        batch, a cold pass on 4 GPUs filling the cache, then Ray on 1 and on 4 GPUs (CUDA warm, Triton)
#   gpu_batch.sh rayt    nvidia-h100-x4, ~4-8 min, one call: Triton alone through Ray on 1 then 4 GPUs, and the scaling
#   gpu_batch.sh plumb   any machine, < 1 min: the request list and a torch batch through the local pool
# Results: $OUT/batch_<part>.jsonl (one JSON line per pass), $OUT/batch_<part>.log; a summary is printed at the end.
set -u
PARTS=" ${*:-local} "
OUT=${OUT:-/tmp/gpu_batch}; mkdir -p "$OUT"
KEEP=/tmp/krl-batch-results; mkdir -p "$KEEP"  # survives between calls while the machine stays warm
CACHE=/tmp/krl-batch-cache
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} MAX_JOBS=16
export KERNELBENCH_ROOT=${KERNELBENCH_ROOT:-$PWD/.gpu/kernelbench}
if ! command -v bwrap >/dev/null && ls .gpu/deb/*.deb >/dev/null 2>&1; then
    mkdir -p /tmp/deb && for f in .gpu/deb/*.deb; do dpkg -x "$f" /tmp/deb; done
    export PATH=/tmp/deb/usr/bin:$PATH LD_LIBRARY_PATH=/tmp/deb/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
{ nvidia-smi -L; nproc; } > "$OUT/device.txt" 2>&1

install_ray() {  # Ray's wheels (offline), then any of Ray's own dependencies this machine lacks, from .whl/raydeps
    export PYTHONPATH=/tmp/site:$PWD  # an earlier call on this machine may have installed it there already
    python3 -c "import ray" 2>/dev/null && { echo "ray already importable" >> "$OUT/install.txt"; return 0; }
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/ray/*.whl >> "$OUT/install.txt" 2>&1
    python3 - >> "$OUT/install.txt" 2>&1 <<'EOF'
import glob, importlib.util, subprocess, sys
wheels = {"click": "click", "filelock": "filelock", "msgpack": "msgpack", "packaging": "packaging",
          "google.protobuf": "protobuf", "yaml": "pyyaml", "requests": "requests", "urllib3": "urllib3",
          "idna": "idna", "charset_normalizer": "charset_normalizer", "certifi": "certifi", "attr": "attrs",
          "typing_extensions": "typing_extensions"}
def missing(name):
    try:
        return importlib.util.find_spec(name) is None
    except ModuleNotFoundError:
        return True
wanted = [w for m, w in wheels.items() if missing(m)]
files = [f for w in wanted for f in glob.glob(f".whl/raydeps/{w}-*.whl")]
print("missing for Ray:", wanted or "nothing", "| installing:", files)
if files:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", "/tmp/site",
                    *files], check=False)
EOF
    python3 -c "import ray; print('ray', ray.__version__)" >> "$OUT/install.txt" 2>&1
}

if [[ $PARTS == *" plumb "* ]]; then
    timeout 60 python3 tests/bench/bench_batch.py --dry-run --kinds cuda,triton > "$OUT/batch_plumb.log" 2>&1
    timeout 120 python3 tests/bench/bench_batch.py --kinds torch --budget-s 90 --out "$OUT/batch_plumb.jsonl" \
        >> "$OUT/batch_plumb.log" 2>&1
fi
if [[ $PARTS == *" local "* ]]; then  # every visible GPU (one on nvidia-h100-x1), default slots and compile workers
    timeout $((${LOCAL_BUDGET_S:-500} + 60)) python3 tests/bench/bench_batch.py --kinds cuda --passes cold,warm \
        --budget-s "${LOCAL_BUDGET_S:-500}" \
        --out "$OUT/batch_local.jsonl" > "$OUT/batch_local.log" 2>&1
fi
if [[ $PARTS == *" local16 "* ]]; then  # a one-H100 machine's shape on a bigger host: GPU 0, 16 cores, 8 builders
    PIN=""; command -v taskset >/dev/null && PIN="taskset -c 0-15" || echo "local16: no taskset, not pinned"
    CUDA_VISIBLE_DEVICES=0 timeout 560 $PIN python3 tests/bench/bench_batch.py --kinds cuda \
        --passes cold,warm --compile-workers 8 --budget-s 500 --out "$OUT/batch_local16.jsonl" \
        > "$OUT/batch_local16.log" 2>&1
fi
if [[ $PARTS == *" ray1 "* || $PARTS == *" ray24 "* || $PARTS == *" ray14 "* || $PARTS == *" rayt "* ]]; then
    install_ray
fi
if [[ $PARTS == *" ray1 "* ]]; then
    timeout 540 python3 tests/bench/bench_batch.py --ray --ray-gpus 1 --kinds cuda,triton --cache-dir "$CACHE" \
        --budget-s 480 --out "$OUT/batch_ray1.jsonl" > "$OUT/batch_ray1.log" 2>&1
    cp "$OUT/batch_ray1.jsonl" "$KEEP/" 2>/dev/null
fi
if [[ $PARTS == *" ray14 "* ]]; then
    timeout 560 python3 tests/bench/bench_batch.py --ray --ray-gpus 1,4 --kinds cuda,triton --limit 24 \
        --cache-dir "$CACHE" --budget-s 520 --out "$OUT/batch_ray14.jsonl" > "$OUT/batch_ray14.log" 2>&1
fi
if [[ $PARTS == *" rayt "* ]]; then  # Triton alone (no build cache to fill first) on 1 then 4 GPUs: the scaling figure
    timeout $((${RAY_BUDGET_S:-500} + 60)) python3 tests/bench/bench_batch.py --ray --ray-gpus 1,4 --kinds triton \
        --budget-s "${RAY_BUDGET_S:-500}" --out "$OUT/batch_rayt.jsonl" > "$OUT/batch_rayt.log" 2>&1
fi
if [[ $PARTS == *" ray24 "* ]]; then
    [ -d "$CACHE/cuda" ] || echo "ray24: no build cache from ray1 on this machine: a cold pass on 4 GPUs comes first"
    timeout 540 python3 tests/bench/bench_batch.py --ray --ray-gpus 2,4 --kinds cuda,triton --cache-dir "$CACHE" \
        --budget-s 480 --out "$OUT/batch_ray24.jsonl" > "$OUT/batch_ray24.log" 2>&1
    cp "$OUT/batch_ray24.jsonl" "$KEEP/" 2>/dev/null
fi

cat "$OUT/device.txt"
[ -f "$OUT/install.txt" ] && tail -3 "$OUT/install.txt"
for f in "$OUT"/batch_*.jsonl; do
    [ -f "$f" ] || continue
    echo "== $(basename "$f")"
    python3 - "$f" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if "scaling" in r:
        print(f"scaling {r['scaling']:6} {r['gpus']} GPUs: {r['evals_per_min']}/min, 1 GPU "
              f"{r['one_gpu_evals_per_min']}/min -> efficiency {r['efficiency']}")
        continue
    if "skipped" in r:
        print(f"{r.get('mode')} {r.get('kind', '')} {r.get('pass', '')} gpus={r.get('gpus')}: skipped ({r['skipped']})")
        continue
    print(f"{r['mode']:5} {r['kind']:6} {r['pass']:4} gpus={r['gpus']} copies={r.get('copies', 1)} "
          f"done={r['n_done']}/{r['items'] * r.get('copies', 1)} (distinct {r['distinct_pairs']}, missing "
          f"{r['missing']}, evaluator errors {r['evaluator_errors']}) wall={r['wall_s']}s "
          f"{r['evals_per_min']}/min idle={r['gpu_idle_share']} cache_before={r['cache_entries_before']} "
          f"hits={r['build_cache_hits']} start={r.get('pool_start_s', r.get('ray_start_s'))}s {r['verdicts']} "
          f"speedup median {r['speedup_median']} {r['gpu_name']}")
    print("    phases: " + ", ".join(f"{k} {v}" for k, v in r["phase_mean_s"].items()))
    if "host_cpu_busy_share" in r:
        print(f"    host: CPUs busy {r['host_cpu_busy_share']}, load {r.get('host_load_mean')}, in D "
              f"{r.get('host_blocked_mean')} on average, waiting in {r.get('host_blocked_in')}, by {r.get('host_blocked_by')}")
    if r["error_sample"] or r["evaluator_error_sample"] or r["notes"]:
        print("    " + " | ".join(r["error_sample"][:3] + r["evaluator_error_sample"] + r["notes"])[:600])
EOF
done
if ls "$KEEP"/*.jsonl >/dev/null 2>&1 && [[ $PARTS == *" ray24 "* ]]; then
    echo "== scaling over this machine's ray1 + ray24 results"
    python3 tests/bench/bench_batch.py --summarize "$KEEP"/*.jsonl
fi
for f in "$OUT"/batch_*.log; do
    [ -f "$f" ] && grep -E "Traceback|Error|error:" "$f" | grep -v '^{' | tail -5 | sed "s|^|$(basename "$f"): |"
done
exit 0
