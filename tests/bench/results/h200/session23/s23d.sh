. .gpu/env.sh
# Session 23, call D (one H200): every GPU step outside timing now holds the device shared by default (call C: beside
# bandwidth hogs 14 of 16 honest speedups within ±5% of quiet against 0 of 16 with none shared; identical torch code
# 31 of 32 against 17 of 32; about half the rate), and the first correctness trial (the candidate's first call, with
# Triton's JIT) runs unheld. Triton and identical torch code at 8 slots, the hog bench with the default, GPU tests.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
timeout 110 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton > $OUT/raw/triton.txt 2>&1
timeout 90 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch > $OUT/raw/torch.txt 2>&1
timeout 150 python3 tests/bench/bench_device_share.py --n 16 --slots 8 --passes 1 > $OUT/raw/share.txt 2>&1
left=$(( 535 - SECONDS ))
(( left > 40 )) && timeout -s INT $left python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=150 -rfE --tb=short \
    tests/evaluator/test_device_gate.py tests/evaluator/test_triton_launchers.py tests/evaluator/test_fidelity_gpu.py \
    tests/evaluator/test_attack_corpus.py > $OUT/raw/gpu_tests.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
grep -E "PASSED|FAILED|XFAIL|XPASS|ERROR|^E  |passed|failed" $OUT/raw/gpu_tests.txt | cut -c1-200 | tail -30
cut -c1-900 $OUT/raw/share.txt | grep -v "^  "
for f in $OUT/raw/triton.txt $OUT/raw/torch.txt; do echo "== $f"; grep "^{" $f | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],d['verdicts'],'shared',d.get('device_shared_steps'),'w5',sum(abs(x-1)<=.05 for x in s),'med',d.get('speedup_median'),'idle',d.get('gpu_idle_share'),'cpu',d.get('host_cpu_busy_share'),{k:p.get(k) for k in ['total','timing','timing_held','device_wait','device_shared_wait','device_shared_hold','device_shared_overrun','correctness','kernel_checks','held_rounds','held_kb_rounds','held_settle']})
"; grep -v "^{\|^  [0-9]" $f | head -4 | cut -c1-300; done
