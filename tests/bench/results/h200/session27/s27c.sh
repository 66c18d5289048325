. .gpu/env.sh
# Session 27, call C (one H200): each task's cgroup refusing new opens of the GPU's device nodes
# (isolation/device_access.py, KRL_WORKER_GPU_OPENS_DENIED, on by default from this session) against a child that keeps
# a spin running through the reference's windows (attacks/gpu_child_spins_through_reference_windows.py), denial off
# then on, with the freezer on and the probe off; then every GPU test on the new defaults (the red team's fixes too:
# setsid, the log descriptions, the logs' tmpfs, dumpable refused); then Triton at 8 slots in the time left.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; stat -fc %T /sys/fs/cgroup; ls -l /dev/nvidia* /dev/nvidia-caps 2>&1; } \
    > $OUT/raw/device.txt 2>&1
for denied in 0 1; do
    KRL_WORKER_GPU_OPENS_DENIED=$denied timeout 110 python3 tests/bench/bench_spin_attacks.py --repeats 1 --probe 0 \
        >> $OUT/raw/spin.txt 2>&1
done
timeout -s INT 290 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=270 -rfE --tb=short \
    tests/evaluator/test_device_gate.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_slot_sol_floor.py \
    tests/evaluator/test_attack_corpus.py tests/evaluator/test_triton_launchers.py > $OUT/raw/gpu_tests.txt 2>&1
left=$(( 560 - SECONDS )); (( left > 45 )) && timeout $left python3 tests/bench/bench_slot.py --n 48 --slots 8 \
    --kinds triton >> $OUT/raw/slot.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
grep "^{" $OUT/raw/spin.txt | cut -c1-300
grep -v "^{" $OUT/raw/spin.txt | tail -5 | cut -c1-300
grep -E "passed|failed|FAILED|ERROR|XFAIL" $OUT/raw/gpu_tests.txt | tail -30 | cut -c1-300
grep "^{" $OUT/raw/slot.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],d['verdicts'],'w5',sum(abs(x-1)<=.05 for x in s),'of',len(s),'median',d.get('speedup_median'),{k:p.get(k) for k in sorted(p) if k.startswith(('timing_freeze','timing_held','total','device_wait','task_setup'))}, d['errors'][:1])
"
