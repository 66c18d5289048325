. .gpu/env.sh
# Session 26, call B (one H200): where honest windows' gaps come from (call A: 39 of 48 honest Triton tasks at 8 slots
# had windows the probe read as gapped). A batch with the probe beside 1 and 7 streams waiting at shut device gates,
# 7 idle contexts, 2 processes churning contexts, a spinner; then one slot of Triton and torch with the probe (no other
# slot's gated batches, spares still warming); then the probe's GPU test.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
timeout 170 python3 tests/bench/probe_time_slices.py --reps 20 --neighbours gatex1,gatex7,idlex7,churnx2,spinner \
    --spin-cycles 400000 > $OUT/raw/slices.txt 2>&1
timeout 75 python3 tests/bench/bench_slot.py --n 16 --slots 1 --kinds triton > $OUT/raw/slot.txt 2>&1
timeout 60 python3 tests/bench/bench_slot.py --n 12 --slots 1 --kinds torch >> $OUT/raw/slot.txt 2>&1
KRL_WORKER_TIMING_GAP_PROBE=0 timeout 90 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton \
    >> $OUT/raw/slot.txt 2>&1
timeout -s INT 60 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=50 -rfE --tb=short \
    tests/evaluator/test_gap_probe.py > $OUT/raw/probe_tests.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
grep "^{" $OUT/raw/slices.txt; tail -3 $OUT/raw/slices.txt | cut -c1-300
grep "^{" $OUT/raw/slot.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],'probe',d.get('gap_probe'),d['evals_per_min'],d['correct'],'/',d['n'],d['verdicts'],'w5',sum(abs(x-1)<=.05 for x in s),'gapped tasks',d.get('gapped_tasks'),'largest gap ms',d.get('gap_largest_ms'),{k:p.get(k) for k in sorted(p) if k.startswith(('timing_gapped','timing_gap_largest','total'))})
"
grep -E "passed|failed|^E " $OUT/raw/probe_tests.txt | tail -4 | cut -c1-300
