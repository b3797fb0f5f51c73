"""What torchrun runs: the models, their data, and the profiled training loop."""
