"""Loading Chrome traces from torch.profiler / Kineto, and classifying their events."""
