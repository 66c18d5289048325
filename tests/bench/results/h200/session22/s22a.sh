. .gpu/env.sh
# Session 22, call A (one H200): the runners' parent CPU group (session 21's guess, docs/known-gaps.md "Timing under
# load"): gpu_check.sh cgroup (timing under load with the judges' trace on five kernels, identical torch code at 8
# slots; the group as the host made it, then KRL_RUNNERS_CPU_WEIGHT=10000), then Triton at 8 slots both ways while
# time is left.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; stat -fc %T /sys/fs/cgroup; cat /proc/self/cgroup; nproc; } > $OUT/raw/device.txt 2>&1
OUT=$OUT/raw bash tests/bench/gpu_check.sh cgroup > $OUT/raw/check.txt 2>&1
for weight in "" 10000; do
    if (( SECONDS < 440 )); then
        KRL_RUNNERS_CPU_WEIGHT=$weight timeout 70 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton \
            > $OUT/raw/triton$weight.txt 2>&1
    fi
done
find /sys/fs/cgroup -maxdepth 3 -name 'krl-tasks' -exec sh -c 'echo {}; cat {}/cpu.weight {}/cgroup.subtree_control' \; \
    >> $OUT/raw/device.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"
cat $OUT/raw/check.txt | cut -c1-300
for f in $OUT/raw/triton*.txt; do echo "== $f"; grep "^{" $f | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],'cpu_weight',p.get('runner_cpu_weight'),'held',p.get('timing_held'),'wait',p.get('device_wait'))
"; done
