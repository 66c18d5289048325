"""The trusted side's judging: comparisons, timing conventions and scores that decide or stamp a verdict."""
