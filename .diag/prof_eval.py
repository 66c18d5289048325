"""cProfile of in-process evaluations (no judge host): where the timing phase goes."""
import cProfile, os, pstats, sys, time
sys.path.insert(0, os.getcwd()); sys.path.insert(0, os.path.join(os.getcwd(), "tests/bench"))
import bench_timing_under_load as b
from evaluator import worker
ctx = worker.prepare_worker("cuda:0", work_dir="/tmp/prof-work", cache_dir="/tmp/prof-cache")
os.makedirs("/tmp/prof-work", exist_ok=True)
ks = [k for k in b.kernels() if k["name"] in sys.argv[1].split(",")]
for k in ks:  # warm
    r = worker.evaluate_in_process(b.make_request(k, "w"), ctx)
    print(k["name"], r.verdict.value, {a: round(v, 2) for a, v in r.phase_times_s.items()}, flush=True)
pr = cProfile.Profile(); pr.enable()
for k in ks:
    r = worker.evaluate_in_process(b.make_request(k, "p"), ctx)
    print(k["name"], r.verdict.value, {a: round(v, 2) for a, v in r.phase_times_s.items()}, flush=True)
pr.disable()
pstats.Stats(pr).sort_stats("cumulative").print_stats(45)
