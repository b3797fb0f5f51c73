"""A run folder: its manifest (``run.json``), its config and its files."""
