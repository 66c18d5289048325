"""The runner's side of the judge's protocol (docs/slot.md): read one order, do it, write one answer. The runner never
asks for anything; everything here is within the candidate's reach, so the judge treats every answer as evidence."""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Optional

MAX_INPUT_FILE_BYTES = 1 << 36  # written by the judge; bounded only against a corrupted file


@contextlib.contextmanager
def file_size_cap_lifted():
    """An output may be larger than the output-flood cap: lift the soft cap to the hard one for this write only."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


class Exchange:
    """The folders the judge writes inputs to (read-only here) and reads outputs from."""

    def __init__(self, inputs_dir: str, outputs_dir: str, on_gpu: bool = False):
        self.inputs_dir, self.outputs_dir = inputs_dir, outputs_dir
        # On a GPU, values go to the device at once: inputs are read through a private mapping of the judge's file
        # (tensorwire.map_values) and outputs built in one reused buffer, neither copied into fresh pages. CPU mode
        # copies into fresh buffers, as the judge's own sets are: its timed sets are made from them.
        self.on_gpu = on_gpu
        if on_gpu:
            from evaluator.judging.tensorwire import ReusedBuffer

            self.scratch = ReusedBuffer()
        else:
            self.scratch = None

    def inputs(self, name: str) -> list:
        from evaluator.judging import tensorwire

        path = os.path.join(self.inputs_dir, _plain(name) + ".krlt")
        read = tensorwire.map_values if self.on_gpu else tensorwire.read_values
        return list(read(path, MAX_INPUT_FILE_BYTES))

    def hand(self, name: str, output: Any) -> None:
        from evaluator.judging import tensorwire

        with file_size_cap_lifted():
            tensorwire.write_values(os.path.join(self.outputs_dir, _plain(name) + ".krlt"), output, self.scratch)


def _plain(name: Any) -> str:
    text = str(name)
    if not text.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"an unusable set name {text[:40]!r}")
    return text


def serve_orders(read_message, write_message, session: Any, exchange: Exchange,
                 on_finish: Optional[Callable[[], None]] = None) -> None:
    """Answer the judge's orders until it says finish (or closes the pipe). A candidate fault answers 'failed' and
    ends the loop: the judge decides what it means. `on_finish` runs before the evidence goes (the benchmarks' runner
    profile)."""
    from evaluator.contract.framing import pack_digests, pack_floats

    while True:
        order = read_message()
        if not order:
            return
        kind = order.get("type")
        try:
            if kind == "trial" or kind == "recheck":
                name = order["name"]
                values = exchange.inputs(name)
                output = session.trial(values) if kind == "trial" else session.recheck(values)
                exchange.hand(name, output)
                answer = {"type": "output", "name": name}
            elif kind == "checks":
                session.kernel_checks(exchange.inputs(order["name"]), exchange.inputs(order["other"]))
                answer = {"type": "checked"}
            elif kind == "stage":
                bases = [exchange.inputs(name) for name in order["sets"]]
                session.stage(bases, int(order["count"]))
                answer = {"type": "staged"}
                if "gate" in order:  # the judge's device gate, a page in its inputs folder (slot/device_gate.py)
                    answer["gate"] = session.attach_gate(os.path.join(exchange.inputs_dir, _plain(order["gate"])))
            elif kind == "queue":  # a batch queued behind the gate, answered before it runs; "drain" waits for it
                session.queue(int(order["calls"]), int(order["salt"]), int(order["count"]))
                answer = {"type": "queued"}
            elif kind == "drain":
                if order.get("armed"):  # said before the wait, so the judge opens the gate on a runner already waiting
                    write_message({"type": "draining"})
                session.drain()
                answer = {"type": "ran"}
            elif kind == "run":
                answer = {"type": "ran"}
                if order.get("eager"):  # KernelBench's convention: the runner's own event time per call, as evidence
                    answer["events_ms"] = session.run_eager(int(order["calls"]), int(order["salt"]))
                else:
                    session.run(int(order["calls"]), int(order["salt"]))
            elif kind == "hand":  # the projection of every output (seed), or kept outputs (kept), or both
                answer = {"type": "handed"}
                if "seed" in order:
                    answer["projections"] = pack_floats(session.projections(int(order["seed"]),
                                                                            float(order.get("scale", 1.0))))
                if order.get("digest"):  # what the picked outputs handed over later must be
                    answer["digests"] = pack_digests(session.digests(int(order["seed"])))
                for name in order.get("kept", ()):
                    exchange.hand(_plain(name), session.kept_output(_plain(name)))
            elif kind == "keep":  # picked outputs of the last batch, kept by name until the judge asks for them
                session.keep({_plain(name): int(call) for name, call in order["calls"].items()})
                answer = {"type": "kept"}
            elif kind == "finish":
                session.finish()
                if on_finish is not None:
                    on_finish()
                write_message({"type": "evidence", **session.evidence()})
                read_message()  # wait to be killed: the judge counts and kills what the candidate left in this tree
                return
            else:
                return  # not an order of this protocol: stop answering; the judge's deadline ends the task
        except BaseException as exc:  # noqa: BLE001 - a candidate can raise anything, SystemExit included
            if isinstance(exc, KeyboardInterrupt):
                raise
            write_message(session.failure(exc))
            return
        write_message(answer)
