"""Probe (GPU): can a process queue a batch behind a gate another process opens (cuStreamWaitValue32 on a shared page it
maps read-only), with values read from a shift the opener writes? How many launches fit ahead of a shut gate, and what
does the host's launch speed cost a batch of tiny calls without one? Usage: python tests/bench/probe_gate.py"""
# Behind evaluator/slot/device_gate.py (session 12, one H100: 100 calls of two launches queued in 2.5 ms and ran in
# 0.52 ms once opened against 2.6 ms issued; 800 calls blocked the launching thread until the gate opened).
import ctypes, json, mmap, os, threading, time

PAGE = "/dev/shm/krl_gate_probe"
out = {}


def child(report):
    import torch
    torch.cuda.init()
    torch.ones(1, device="cuda")
    fd = os.open(PAGE, os.O_RDONLY)
    page = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ)
    import numpy as np  # the address of a read-only mapping
    arr = np.frombuffer(page, dtype=np.uint32)
    address = arr.ctypes.data
    rt = torch.cuda.cudart()
    res = {}
    for name, flags in (("ro_mapped", 0x08 | 0x02), ("mapped", 0x02), ("ro", 0x08)):
        try:
            err = rt.cudaHostRegister(address, 4096, flags)
        except Exception as e:  # noqa
            err = repr(e)
        res[name] = str(err)
        if str(err).endswith("Success") or err == 0 or "cudaSuccess" in str(err):
            break
    out_child = {"register": res}
    lib = ctypes.CDLL("libcuda.so.1")
    dptr = ctypes.c_uint64()
    r = lib.cuMemHostGetDevicePointer_v2(ctypes.byref(dptr), ctypes.c_void_p(address), 0)
    out_child["devptr_rc"] = r
    attr = ctypes.c_int()
    # CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR = 93? report a few
    for a in (92, 93, 113, 114):
        lib.cuDeviceGetAttribute(ctypes.byref(attr), a, 0)
        out_child[f"attr{a}"] = attr.value
    stream = torch.cuda.current_stream().cuda_stream
    wait = getattr(lib, "cuStreamWaitValue32_v2", None) or lib.cuStreamWaitValue32
    seed_host = torch.frombuffer(page, dtype=torch.float32, count=1, offset=8)
    out_child["seed_pinned"] = bool(seed_host.is_pinned())
    x = torch.randn(1 << 10, device="cuda")
    seed_dev = torch.zeros(1, device="cuda")
    results = {}
    for calls in (100, 800, 3000):
        for trial in range(3):
            k = calls * 10 + trial + 1
            torch.cuda.synchronize()
            os.write(report, (json.dumps({"queuing": k}) + "\n").encode())
            t0 = time.perf_counter()
            rc = wait(ctypes.c_void_p(stream), ctypes.c_uint64(dptr.value), ctypes.c_uint32(k), ctypes.c_uint(0), )
            seed_dev.copy_(seed_host, non_blocking=True)

            for _ in range(calls):
                torch.relu(x * seed_dev)
            queued = time.perf_counter() - t0
            os.write(report, (json.dumps({"queued": k}) + "\n").encode())
            torch.cuda.synchronize()
            done = time.perf_counter()
            results[f"{calls}/{trial}"] = {"rc": rc, "queue_s": round(queued, 6), "done_at": done,
                                           "seed": float(seed_dev.item())}
            # ungated: host-launched batch timed with sync
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            for _ in range(calls):
                torch.relu(x * seed_dev)
            torch.cuda.synchronize()
            results[f"{calls}/{trial}"]["plain_s"] = round(time.perf_counter() - t1, 6)
    out_child["results"] = results
    os.write(report, (json.dumps({"child": out_child}) + "\n").encode())
    os._exit(0)


def main():
    fd = os.open(PAGE, os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, 4096)
    page = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    page[:4096] = bytes(4096)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            child(w)
        except Exception as e:  # noqa
            os.write(w, (json.dumps({"child_error": repr(e)}) + "\n").encode())
            os._exit(1)
    os.close(w)
    reader = os.fdopen(r)
    import struct
    opens = {}
    forced = {}

    def open_gate(k):
        if k in opens:
            return
        page[8:12] = struct.pack("f", k / 7.0)
        page[0:4] = struct.pack("I", k)
        opens[k] = time.perf_counter()

    for line in reader:
        msg = json.loads(line)
        if "queuing" in msg:
            k = msg["queuing"]
            timer = threading.Timer(2.0, lambda k=k: (forced.__setitem__(k, True), open_gate(k)))
            timer.start()
        elif "queued" in msg:
            timer.cancel()
            time.sleep(0.05)  # the gate stays shut a while: the batch must not run before it opens
            open_gate(msg["queued"])
        else:
            if "child" in msg:
                for key, v in msg["child"]["results"].items():
                    calls, trial = key.split("/")
                    k = int(calls) * 10 + int(trial) + 1
                    v["gated_s"] = round(v.pop("done_at") - opens[k], 6)
                    v["seed_ok"] = abs(v["seed"] - k / 7.0) < 1e-3
                    v["forced"] = forced.get(k, False)
            out.update(msg)
    os.waitpid(pid, 0)
    print(json.dumps(out, indent=1))


main()
