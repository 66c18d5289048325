. .gpu/env.sh
# Session 12, first call: the gate's CUDA primitives; the timed pair on one CPU through the GPU tests; churn on 1 GPU.
timeout 120 python3 .gpu/probe_gate.py > $OUT/probe_gate.txt 2>&1; tail -c 3000 $OUT/probe_gate.txt
KRL_TIMING_SAME_CPU=1 bash tests/bench/gpu_check.sh tests
timeout 100 python3 tests/bench/bench_context_churn.py --gpus 1 --lanes 8 --seconds 15 > $OUT/churn1.txt 2>&1; tail -c 2500 $OUT/churn1.txt
