. .gpu/env.sh
# Session 17, call C: the large-file path on this host (probe), the slot's GPU tests on the overlapped trials and the
# new file path, then the 48-kernel CUDA batch cold and warm with the budget session 16 used (call B's 330 s cut the
# cold pass short, and the warm pass waited for its builds).
timeout 60 python3 tests/bench/probe_tensor_files.py > $OUT/probe_files.txt 2>&1
timeout -s INT 200 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=170 -rfE --tb=short \
    tests/evaluator/test_kernelbench_events_gpu.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_attack_corpus.py \
    tests/evaluator/test_device_gate.py tests/evaluator/test_slot_sol_floor.py > $OUT/gpu_tests.txt 2>&1
LOCAL_BUDGET_S=460 bash tests/bench/gpu_batch.sh local
cat $OUT/probe_files.txt
grep -E "PASSED|FAILED|XFAIL|XPASS|ERROR|^E  " $OUT/gpu_tests.txt | cut -c1-200 | grep -v PASSED | tail -14
echo "passed: $(grep -c PASSED $OUT/gpu_tests.txt)"; tail -1 $OUT/gpu_tests.txt
echo "== batch"
python3 - $OUT/batch_local.jsonl <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    print({k: d.get(k) for k in ("pass", "items", "n_done", "missing", "wall_s", "wall_cached_s", "evals_per_min", "verdicts", "gpu_idle_share", "host_cpu_busy_share")})
    items = d.get("per_item") or []
    b = [i for i in items if i["problem"].startswith("builtin")]
    keys = ("total", "correctness", "trials_judge_inputs", "trials_runner", "trials_judge_compare", "kernel_checks", "timing", "timing_held", "recheck", "cpu_judge", "cpu_runner")
    for grp, name in ((b, "builtin"), ([i for i in items if not i["problem"].startswith("builtin")], "kb")):
        print(name, len(grp), {k: round(sum(i["phases"].get(k, 0) for i in grp), 1) for k in keys})
PY
