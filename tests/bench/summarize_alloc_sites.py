"""Where the judges' device allocations were made, over every task of a run with KRL_WORKER_ALLOC_HISTORY=FOLDER
(evaluator/slot/allocation_sites.py): per task on average, each action, then the busiest call sites.

Usage: python tests/bench/summarize_alloc_sites.py FOLDER [--top 25]"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from evaluator.slot.allocation_sites import ACTIONS  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    lines = [json.loads(line) for path in sorted(Path(args.folder).glob("judge-*.jsonl")) for line in open(path)
             if line.strip()]
    if not lines:
        print(f"no judge-*.jsonl lines under {args.folder}: was KRL_WORKER_ALLOC_HISTORY set, and CUDA there?",
              file=sys.stderr)
        return 2
    tasks = len(lines)
    print(f"{tasks} tasks from {len({p for p in Path(args.folder).glob('judge-*.jsonl')})} judges; a task on average: "
          + ", ".join(f"{action} {sum(line[action] for line in lines) / tasks:.1f}" for action in ACTIONS))
    counts: Counter = Counter()
    mib: Counter = Counter()
    for line in lines:
        for site, count, size in line["sites"]:
            counts[site] += count
            mib[site] += size
    print(f"{'a task':>7} {'MiB':>8}  site (the evaluator's innermost frames, innermost first)")
    for site, count in counts.most_common(args.top):
        print(f"{count / tasks:7.1f} {mib[site] / tasks:8.1f}  {site}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
