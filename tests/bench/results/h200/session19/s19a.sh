. .gpu/env.sh
# Session 19, call A (one H200): session 18's unmeasured code (groups made ahead, the projection's scale, the settle in
# every held window on the lock's contended flag): the slot's GPU tests, the Triton rate at 8 slots, identical torch code,
# 256 MiB ReLUs with the judges' profile.
mkdir -p $OUT/raw
nvidia-smi -L > $OUT/raw/device.txt; nproc >> $OUT/raw/device.txt
timeout -s INT 215 python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=170 -rfE --tb=short \
    tests/evaluator/test_kernelbench_events_gpu.py tests/evaluator/test_fidelity_gpu.py tests/evaluator/test_attack_corpus.py \
    tests/evaluator/test_device_gate.py tests/evaluator/test_slot_sol_floor.py > $OUT/raw/gpu_tests.txt 2>&1
slot() { name=$1; limit=$2; vars=$3; shift 3; timeout $limit env $vars python3 tests/bench/bench_slot.py "$@" > $OUT/raw/$name.txt 2>&1 ; }
slot triton_default 80 X=1 --slots 8 --n 64 --kinds triton
slot torch_default 75 X=1 --slots 8 --n 32 --kinds torch
slot torch_big 110 X=1 --slots 8 --n 16 --kinds torch --sizes 67108864 --profile
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt
grep -E "PASSED|FAILED|XFAIL|XPASS|ERROR|^E  " $OUT/raw/gpu_tests.txt | cut -c1-200 | grep -v PASSED | tail -14
echo "passed: $(grep -c PASSED $OUT/raw/gpu_tests.txt)"; tail -1 $OUT/raw/gpu_tests.txt
for f in triton_default torch_default torch_big; do
echo "== $f"; tail -2 $OUT/raw/$f.txt | grep -v "^{" | cut -c1-200
grep "^{" $OUT/raw/$f.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],'med',d.get('speedup_median'),'w5',sum(abs(x-1)<=.05 for x in s),'idle',d.get('gpu_idle_share'),'cpu',d.get('host_cpu_busy_share'))
    print({k: v for k, v in p.items()})
"
done
grep -A30 "by own time" $OUT/raw/torch_big.txt | cut -c1-160 | head -32
