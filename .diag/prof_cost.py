import time, torch
t=time.monotonic(); torch.zeros(1, device="cuda"); torch.cuda.synchronize(); print("cuda init", round(time.monotonic()-t,2))
from torch.profiler import profile, ProfilerActivity
x = torch.randn(1<<20, device="cuda")
for acts in ([ProfilerActivity.CUDA], [ProfilerActivity.CUDA], [ProfilerActivity.CPU, ProfilerActivity.CUDA]):
    t=time.monotonic()
    with profile(activities=acts) as p:
        torch.relu(x); torch.cuda.synchronize()
    t1=time.monotonic()
    ev=list(p.events())
    print(acts, "session", round(t1-t,2), "events()", round(time.monotonic()-t1,2), len(ev))
