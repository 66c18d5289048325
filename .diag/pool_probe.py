"""Diagnostic: evaluations through the real pool on the GPU, one at a time, with wall time and phases."""
import os, sys, time, json
sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "tests/bench"))
import bench_timing_under_load as b
from evaluator.pool import Pool, PoolConfig
only = sys.argv[1].split(",")
pool = Pool(PoolConfig(devices=["cuda:0"], compile_workers=1, cache_dir="/tmp/probe-cache"))
try:
    for rep in range(int(sys.argv[2])):
        for k in [k for k in b.kernels() if k["name"] in only]:
            t = time.monotonic()
            r = pool.submit(b.make_request(k, f"p{rep}")).result(timeout=600)
            print(f"{k['name']:20s} rep{rep} {time.monotonic()-t:6.1f}s {r.verdict.value} att={r.attempts} sp={r.speedup} "
                  f"phases={ {a: round(v, 2) for a, v in r.phase_times_s.items()} } {r.error_message[:300]}", flush=True)
finally:
    pool.close()
