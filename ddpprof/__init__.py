"""ddpprof: record PyTorch data-parallel training under torch.profiler and measure its overlap."""

__version__ = "0.1.0"
