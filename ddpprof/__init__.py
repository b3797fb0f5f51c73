"""ddpprof: record PyTorch data-parallel training under torch.profiler and measure its overlap."""

__version__ = "0.1.0"


def analyze(path, keep_last_step: bool = False):
    """``ddpprof.analyze(path) -> pandas.DataFrame``: see :func:`ddpprof.analysis.analyze`."""
    from .analysis import analyze as _analyze

    return _analyze(path, keep_last_step=keep_last_step)
