. .gpu/env.sh
# Session 14, call B: KernelBench's reference timed in each task's runner before its candidate loads
# (slot/reference_first.py, 39111d9): the KernelBench-convention GPU tests and the attack corpus (a profile without the
# candidate's own kernels is now retaken: 76_Gemm_Add_ReLU was called custom_kernel_not_launched once in call A, and
# kernels that never launch must still be caught), then agreement with KernelBench's own evaluator on session 13's 27
# pairs, ours at 1 slot and at 2; the bench also prints what the judge's own reference would have given on the same
# run (judge_reference_diagnostic).
timeout -s INT 250 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=240 -rfE --tb=short \
    tests/evaluator/test_kernelbench_events_gpu.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_attack_corpus.py \
    > $OUT/gpu_tests.txt 2>&1
timeout 320 python3 tests/bench/bench_kernelbench_agreement.py --only 0,3,8,10-25,27,30-36 --out "$OUT/kb.json" \
    --budget-s 290 --kb-repeats 2 --ours-slots 1,2 > "$OUT/kb.txt" 2>&1
grep -E "PASSED|FAILED|XFAIL|XPASS|ERROR|^E  " $OUT/gpu_tests.txt | cut -c1-250 | tail -24
tail -8 $OUT/kb.txt
python3 - $OUT/kb.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["summary"]
for slots, s in (d.get("by_slots") or {str(d.get("slots")): d}).items():
    print(slots, "slots:", {k: s.get(k) for k in ("both_correct", "within_10pct", "median_ratio", "verdict_agreement",
                                                   "judge_reference_diagnostic", "spike_free_diagnostic",
                                                   "against_kernelbench_mean", "kernelbench_self")})
print(d.get("timings"))
PY
