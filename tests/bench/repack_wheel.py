"""Rewrite a wheel without some of its folders (Ray's Java-only `ray/jars/`), so it fits the 64 MiB that travels to
the offline GPU machine; RECORD is rewritten to match, so pip installs the result as usual.

Usage: python tests/bench/repack_wheel.py WHEEL PREFIX [PREFIX ...]   (the wheel is replaced in place)"""

from __future__ import annotations

import os
import sys
import zipfile


def repack(wheel: str, prefixes: list[str]) -> tuple[int, int]:
    """Drop every member under one of `prefixes`; returns (bytes before, bytes after)."""
    before = os.path.getsize(wheel)
    temporary = wheel + ".partial"
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            if any(info.filename.startswith(prefix) for prefix in prefixes):
                continue
            data = source.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                kept = [line for line in data.decode().splitlines()
                        if not any(line.startswith(prefix) for prefix in prefixes)]
                data = ("\n".join(kept) + "\n").encode()
            target.writestr(info, data)
    os.replace(temporary, wheel)
    return before, os.path.getsize(wheel)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-1])
        return 2
    before, after = repack(argv[0], argv[1:])
    print(f"{os.path.basename(argv[0])}: {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
