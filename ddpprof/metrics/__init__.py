"""Interval arithmetic and the metric definitions: pure functions on numpy arrays, no I/O."""
