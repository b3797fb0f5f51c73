"""``ddpprof analyze``: from trace files to per-rank and per-run metrics.

* :mod:`.options`: what the user asked for (one object passed down);
* :mod:`.runs`: finding runs, loading ranks in parallel, deciding ranks and the step filter,
  matching collectives across ranks;
* :mod:`.rank`: one rank's metrics from its trace (pure);
* :mod:`.results`: the typed results; :mod:`.rows`: the flat rows every output derives from.
"""

from ..trace.last_step import LastStep
from .options import AnalysisOptions
from .results import Analysis, RankResult, RunProblem, RunResult
from .rows import RankRow, RunRow, rank_row, run_row, step_rows, to_json_document
from .runs import analyze, analyze_paths, analyze_run

__all__ = ["Analysis", "AnalysisOptions", "LastStep", "RankResult", "RankRow", "RunProblem",
           "RunResult", "RunRow", "analyze", "analyze_paths", "analyze_run", "rank_row",
           "run_row", "step_rows", "to_json_document"]
