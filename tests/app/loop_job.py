"""`python -m tests.app.loop_job RUN_ID --workspace W`: core.train's job, as procman starts it for `krl runs
resume`, against the Tinker SDK autospecs (tests/core/tinker_sdk_fakes.py) instead of the service."""

from __future__ import annotations

import sys

import pytest


def main() -> int:
    from tests.core.tinker_sdk_fakes import NO_KERNEL_RESPONSE, FakeTinker

    with pytest.MonkeyPatch.context() as patch:
        FakeTinker(responses=[NO_KERNEL_RESPONSE, "sorry, no kernel"]).install(patch)
        from core.train import main as train_main

        return train_main()


if __name__ == "__main__":
    sys.exit(main())
