. .gpu/env.sh
# Session 12, call B (4 x H100): context churn on one GPU and on all four, plain and profiled.
timeout 200 python3 tests/bench/bench_context_churn.py --gpus 1,4 --lanes 8 --seconds 12 > $OUT/churn.txt 2>&1
grep "^{" $OUT/churn.txt
