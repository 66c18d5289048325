. .gpu/env.sh
# Session 13, call B: (1) does a context made and ended in another process move a timing it does not take part in
# (bench_context_churn --victim: a long-lived process timing 200-kernel batches, alone, then beside 4 lanes of runner-like
# children, plain and profiled); (2) honest Triton speedups beside bandwidth hogs at 8 slots, shared steps off (the
# default) and on, against their quiet value; (3) timing under 16 compiles through the pool.
timeout 70 python3 tests/bench/bench_context_churn.py --gpus 1 --lanes 4 --seconds 8 --profile 0,1 --victim > $OUT/churn.txt 2>&1
timeout 260 python3 tests/bench/bench_device_share.py --n 16 --slots 8 --passes 0,1 > $OUT/share.txt 2>&1
timeout 200 python3 tests/bench/bench_timing_under_load.py --via pool --repeats 2 --load 16 --passes quiet_off,load_off \
    --json $OUT/load.jsonl > $OUT/load.txt 2>&1
grep "^{" $OUT/churn.txt | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); v=d.get('victim',{})
    print(d['lanes_per_gpu'], d['profiled'], d['children_per_s'], 'ev', v.get('events_ms'), 'host', v.get('host_ms'))
"
tail -5 $OUT/share.txt | cut -c1-600
tail -12 $OUT/load.txt
