"""The host line of the System tab: CPU, RAM and each GPU's utilisation and memory of the machine the TUI runs on,
as bars, refreshed by the screen's sampler (the run's own system/* curves sit below it)."""

from __future__ import annotations

from typing import Optional

from rich.text import Text
from textual.widgets import Static

from app.widgets.format import theme_colour
from core.system_metrics import HostSample

BAR_CELLS = 12


def bar(percent: float, cells: int = BAR_CELLS) -> str:
    filled = max(0, min(cells, round(percent / 100 * cells)))
    return "█" * filled + "░" * (cells - filled)


def host_text(sample: Optional[HostSample], host: str, colour: str = "", warn: str = "") -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"host {host} (live)  ", style="bold")
    if sample is None:
        text.append("sampling…", style="dim")
        return text

    def gauge(label: str, percent: float, detail: str) -> None:
        text.append(f"{label} ")
        text.append(bar(percent), style=warn if percent >= 90 else colour)
        text.append(f" {percent:3.0f}% {detail}  ")

    gauge("CPU", sample.cpu_percent, "")
    ram_percent = 100 * sample.ram_used_gb / sample.ram_total_gb if sample.ram_total_gb else 0.0
    gauge("RAM", ram_percent, f"{sample.ram_used_gb:.1f}/{sample.ram_total_gb:.1f} GiB")
    if not sample.gpus:
        text.append("no GPU visible through NVML", style="dim")
    for gpu in sample.gpus:
        text.append("\n")
        gauge(f"GPU{gpu.index} {gpu.name[:20]} util", gpu.util_percent, "")
        mem = 100 * gpu.mem_used_gb / gpu.mem_total_gb if gpu.mem_total_gb else 0.0
        gauge("mem", mem, f"{gpu.mem_used_gb:.1f}/{gpu.mem_total_gb:.1f} GiB")
    return text


class HostPanel(Static):
    """Shows the latest HostSample."""

    DEFAULT_CSS = "HostPanel { height: auto; padding: 0 1; background: $surface; }"

    def show(self, sample: Optional[HostSample], host: str) -> None:
        self.update(host_text(sample, host, theme_colour(self.app, "success"), theme_colour(self.app, "error")))
