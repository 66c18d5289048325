. .gpu/env.sh
# Session 21, call A (one H200): the judge and the runner poll for each other's messages in the timed windows
# (slot/answer_spin.py). The Triton rate at 8 slots with it (and the judge's allocator figures, never run on a GPU),
# then timing under load with and without polling: 11 honest kernels, each timed twice one at a time through the real
# pool, quiet and beside 16 g++ compiles of torch/extension.h at nice 10.
mkdir -p $OUT/raw
nvidia-smi -L > $OUT/raw/device.txt
uname -r >> $OUT/raw/device.txt
timeout 75 python3 tests/bench/bench_slot.py --slots 8 --n 64 --kinds triton > $OUT/raw/triton_spin.txt 2>&1
timeout -s INT 470 python3 tests/bench/bench_timing_under_load.py \
    --passes quiet_off,load_off,load_off_nospin,quiet_off_nospin --repeats 2 --load 16 \
    --json $OUT/raw/load.jsonl > $OUT/raw/load.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
tail -2 $OUT/raw/triton_spin.txt | grep -v "^{" | cut -c1-200
grep "^{" $OUT/raw/triton_spin.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],'med',d.get('speedup_median'),'w5',sum(abs(x-1)<=.05 for x in s),'idle',d.get('gpu_idle_share'))
    print({k: v for k, v in p.items() if k.startswith(('total','timing','held','device_wait','round_trip','judge_','cpu_'))})
"
grep -v "^  " $OUT/raw/load.txt | tail -30 | cut -c1-250
grep "^  " $OUT/raw/load.txt | head -8 | cut -c1-300
