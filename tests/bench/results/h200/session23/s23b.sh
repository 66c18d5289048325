. .gpu/env.sh
# Session 23, call B (one H200): Triton's per-signature launchers built by the judge into the trusted level (call A's
# runner profile: gcc ~0.3 s of every Triton task), the zygote's host questions, Gluon imported by spares. Triton at 8
# slots twice (call A: 188.6 a minute), one profiled, at 1 slot; CUDA and identical torch code at 8; then the GPU tests.
mkdir -p $OUT/raw
{ nvidia-smi -L; uname -r; nproc; } > $OUT/raw/device.txt 2>&1
timeout 80 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton --keep $OUT/raw/plain > $OUT/raw/triton.txt 2>&1
timeout 80 python3 tests/bench/bench_slot.py --n 48 --slots 8 --kinds triton >> $OUT/raw/triton.txt 2>&1
timeout 100 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds triton --profile --keep $OUT/raw/prof \
    > $OUT/raw/triton_prof.txt 2>&1
timeout 60 python3 tests/bench/bench_slot.py --n 12 --slots 1 --kinds triton > $OUT/raw/triton1.txt 2>&1
timeout 70 python3 tests/bench/bench_slot.py --n 32 --slots 8 --kinds torch > $OUT/raw/torch.txt 2>&1
timeout 100 python3 tests/bench/bench_slot.py --n 16 --slots 8 --kinds cuda > $OUT/raw/cuda.txt 2>&1
left=$(( 560 - SECONDS ))
timeout -s INT $left python3 -m pytest -v -p no:cacheprovider -m gpu --timeout=120 -rfE --tb=short \
    tests/evaluator/test_triton_launchers.py tests/evaluator/test_attack_corpus.py tests/evaluator/test_device_gate.py \
    > $OUT/raw/gpu_tests.txt 2>&1
ls -la $OUT/raw/plain/ > $OUT/raw/plain_ls.txt 2>&1
tar -czf $OUT/raw.tgz -C $OUT raw
cat $OUT/raw/device.txt; echo "elapsed $SECONDS s"; tail -3 /tmp/site-install.log
grep -E "PASSED|FAILED|XFAIL|XPASS|ERROR|^E  |passed|failed" $OUT/raw/gpu_tests.txt | cut -c1-200 | tail -30
for f in $OUT/raw/triton.txt $OUT/raw/triton_prof.txt $OUT/raw/triton1.txt $OUT/raw/torch.txt $OUT/raw/cuda.txt; do echo "== $f"; grep "^{" $f | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); p=d['phase_mean_s']; s=d.get('speedups') or []
    print(d['kind'],d['slots'],d['evals_per_min'],d['correct'],'/',d['n'],d['verdicts'],'w5',sum(abs(x-1)<=.05 for x in s),'idle',d.get('gpu_idle_share'),'cpu',d.get('host_cpu_busy_share'),{k:p.get(k) for k in ['total','timing','timing_held','device_wait','correctness','kernel_checks','cpu_judge','cpu_runner','cpu_runner_warm','trials_runner']})
"; grep -v "^{\|^  [0-9]" $f | head -4 | cut -c1-300; done
python3 - $OUT/raw/prof <<'PY'
import glob, pstats, sys
files = glob.glob(sys.argv[1] + '/profiles-*/runner-*.prof')
st = pstats.Stats(*files)
builds = sum(v[0] for k, v in st.stats.items() if k[2] == '_build' and 'triton' in k[0])
print('runner profiles', len(files), 'triton _build calls', builds)
st.sort_stats('cumulative').print_stats(18)
PY
