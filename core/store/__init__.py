"""The registry's rooms, one job each: rows (stored records and JSON columns), schema (named migrations), runs,
metrics and trajectories. core/registry.py puts them together behind the one `Registry` class."""
