"""The dependency graph of a training step across ranks (``model``), built from the ranks'
traces (``build``), its replay and critical path (``path``), and replays with edits
(``whatif``). See ``docs/critical-path.md``."""
