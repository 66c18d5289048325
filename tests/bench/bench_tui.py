"""TUI benchmark: a generated workspace (1,000 runs; one run with 200,000 metric rows and 20,000 turns), then
time to first paint of the runs table, opening that run's curves, opening a trajectory, and the app's CPU use
idle and with one live run writing a step per second. Prints figures; asserts nothing about speed."""

from __future__ import annotations

import asyncio
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from core.registry import Registry  # noqa: E402
from tests.app.fixtures import populate_big  # noqa: E402

SIZE = (160, 48)

WRITER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from core.registry import Registry
    from tests.app.fixtures import _trajectories, _metric_value, METRIC_KEYS
    import random
    reg = Registry.for_workspace({ws!r})
    run = reg.get_run("live-run")
    rng = random.Random(1)
    step = 0
    while True:
        reg.write_step(run["id"], step, {{k: _metric_value(k, step, 3) for k in METRIC_KEYS}},
                       _trajectories(rng, step, 2, 2, 3))
        reg.heartbeat(run["id"])
        step += 1
        time.sleep(1.0)
""")


async def wait_until(pilot, condition, timeout_s: float = 60.0) -> float:
    start = time.perf_counter()
    while not condition():
        if time.perf_counter() - start > timeout_s:
            raise TimeoutError("condition not met")
        await pilot.pause(0.005)
    return time.perf_counter() - start


def cpu_s() -> float:
    usage = os.times()
    return usage.user + usage.system


async def measure(ws: Path, big_id: int, trajectory_id: int) -> dict[str, float]:
    from app.screens.run_detail import RunDetailScreen
    from app.screens.trajectory import TrajectoryScreen
    from app.tui import KrlApp
    from app.widgets.curves_panel import CurvesPanel
    from app.widgets.run_table import RunTable

    figures: dict[str, float] = {}
    started, started_cpu = time.perf_counter(), cpu_s()
    app = KrlApp(workspace=ws, live=True, refresh_s=1.0, reconcile=True, remember_theme=False, theme="krl-dark")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.screen.query(RunTable) and app.screen.query_one(RunTable).row_count > 0)
        await pilot.pause()  # the frame that shows it
        figures["first_paint_runs_table_ms"] = (time.perf_counter() - started) * 1000
        figures["first_paint_runs_table_cpu_ms"] = (cpu_s() - started_cpu) * 1000
        figures["runs_in_table"] = app.screen.query_one(RunTable).row_count

        # Filter as you type over 1,000 rows.
        t0 = time.perf_counter()
        app.screen.filter_text = "sweep-09"
        app.screen._render_table()
        await pilot.pause()
        figures["filter_1000_rows_ms"] = (time.perf_counter() - t0) * 1000
        app.screen.filter_text = ""
        app.screen._render_table()

        # Idle CPU: nothing is running, the runs screen refreshes every second.
        await pilot.pause(2.0)
        c0, w0 = cpu_s(), time.perf_counter()
        await pilot.pause(10.0)
        figures["idle_cpu_pct_runs_screen"] = 100 * (cpu_s() - c0) / (time.perf_counter() - w0)

        # Open the big run's curves.
        t0, c0 = time.perf_counter(), cpu_s()
        app.open_run_detail(big_id)

        def curves_ready() -> bool:
            screen = app.screen
            if not isinstance(screen, RunDetailScreen) or screen.run is None:
                return False
            panel = screen.query_one(CurvesPanel)
            return bool(panel.selected) and all(k in panel._series for k in panel.selected[:4])

        await wait_until(pilot, curves_ready)
        await pilot.pause()
        figures["open_curves_ms"] = (time.perf_counter() - t0) * 1000
        figures["open_curves_cpu_ms"] = (cpu_s() - c0) * 1000
        panel = app.screen.query_one(CurvesPanel)
        figures["curves_shown"] = len(panel.selected)
        figures["points_per_curve"] = max(len(s.steps) for per_run in panel._series.values() for s in per_run.values())

        await pilot.pause(2.0)
        c0, w0 = cpu_s(), time.perf_counter()
        await pilot.pause(10.0)
        figures["idle_cpu_pct_curves_screen"] = 100 * (cpu_s() - c0) / (time.perf_counter() - w0)

        # Open a trajectory.
        t0, c0 = time.perf_counter(), cpu_s()
        app.open_trajectory(trajectory_id)
        await wait_until(pilot, lambda: isinstance(app.screen, TrajectoryScreen) and app.screen.detail is not None)
        await pilot.pause()
        figures["open_trajectory_ms"] = (time.perf_counter() - t0) * 1000
        figures["open_trajectory_cpu_ms"] = (cpu_s() - c0) * 1000
        app.pop_screen()
        app.pop_screen()
        await pilot.pause(0.5)

        # One live run writing a step per second (another process): runs screen, then its curves.
        reg = Registry.for_workspace(ws)
        reg.create_run("live-run", status="running")
        reg.close()
        writer = subprocess.Popen([sys.executable, "-c", WRITER.format(root=str(ROOT), ws=str(ws))])
        try:
            await pilot.pause(3.0)
            c0, w0 = cpu_s(), time.perf_counter()
            await pilot.pause(10.0)
            figures["live_cpu_pct_runs_screen"] = 100 * (cpu_s() - c0) / (time.perf_counter() - w0)
            app.open_run_detail("live-run")
            await pilot.pause(3.0)
            c0, w0 = cpu_s(), time.perf_counter()
            await pilot.pause(10.0)
            figures["live_cpu_pct_curves_screen"] = 100 * (cpu_s() - c0) / (time.perf_counter() - w0)
        finally:
            writer.terminate()
            writer.wait()
    return figures


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        os.environ["KRL_CONFIG_DIR"] = str(Path(tmp) / "config")  # no remembered choices or alert rules of the user
        t0 = time.perf_counter()
        reg = Registry.for_workspace(ws)
        big_id = populate_big(reg)
        reg.update_run(big_id, status="finished")  # nothing active for the idle figures
        rows = reg.conn.execute("SELECT COUNT(*) FROM metrics WHERE run_id = ?", (big_id,)).fetchone()[0]
        turns = reg.conn.execute("SELECT COUNT(*) FROM turns u JOIN trajectories t ON t.id = u.trajectory_id "
                                 "WHERE t.run_id = ?", (big_id,)).fetchone()[0]
        runs = len(reg.list_runs())
        trajectory_id = reg.trajectories(big_id, order="step", limit=1)[0]["id"]
        reg.close()
        print(f"workspace: {runs} runs, big run {rows} metric rows, {turns} turns "
              f"(generated in {time.perf_counter() - t0:.1f} s)")
        figures = asyncio.run(measure(ws, big_id, trajectory_id))
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"terminal {SIZE[0]}x{SIZE[1]} (headless Textual driver)")
    print(f"  load average at the end: {os.getloadavg()[0]:.1f} (wall-clock figures inflate under load; "
          "*_cpu_ms is this process's CPU time for the same span)")
    for key, value in figures.items():
        print(f"  {key:32s} {value:10.1f}")


if __name__ == "__main__":
    main()
