. .gpu/env.sh
# Session 26, call A (one H200): the final gap-probe placement of session 25 (queued with the gated batch, behind the
# same gate), which ran on no GPU: the spin attacks and honest matmul with the probe off and on, its GPU test, then
# Triton and identical torch code at 8 slots with the probe off and on in turn (gpu_check.sh probe).
bash tests/bench/gpu_check.sh probe
echo "elapsed $SECONDS s"
