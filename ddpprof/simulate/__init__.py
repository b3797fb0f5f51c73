"""``ddpprof simulate``: a recorded run's steps replayed as dependency graphs across its ranks
(``ddpprof.graph``), edited: another bucket cap, another world size, faster work or network,
a rank delayed. Definitions in ``docs/simulate.md``.

The run is analyzed as ``analyze`` does (each trace read once): that gives each analyzed
step's graph across the ranks and the run's overlap tax (``metrics.tax``). Each step is
replayed (``steps``) with the cost model (``sources``) at the step's cost level, under the
tax, for the run's own configuration (no edit: the recorded step exactly) and for every
(world size, cap) asked; each figure is the median over the steps. ``output`` writes it out;
``advice`` answers ``ddpprof.advice``.

**Profiler overhead**, the same on both sides: the graphs are profiled steps, so a replay
predicts a profiled step; it is divided by the run's measured ``profiler_overhead_ratio``
(median profiled step over median unprofiled step, which also carries any change of the
machine's load between them, so a ratio below 1 is kept) and compared with the run's median
unprofiled step.

**What a cap applies to**: the variants whose gradients go in buckets (the registry's
``gradient_sync`` ``buckets`` and ``sharded_buckets``); for the others, world sizes only.

The modules are imported where they are used, not here: ``analyze`` imports ``advice``
alone, without the graph machinery a replay needs (about 20 ms of every analyze).
"""
