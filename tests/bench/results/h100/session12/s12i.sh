. .gpu/env.sh
# Session 12, call I: agreement with KernelBench's own evaluator with the gates in (issue 24), then the kb GPU tests.
KERNELBENCH_ROOT=$PWD/.gpu/kernelbench bash tests/bench/gpu_check.sh kb
