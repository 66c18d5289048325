"""Turns candidate kernel source into an EvalResult: isolated workers, checks, timing.
Knows nothing of runs or training; imports nothing from core/."""
