"""A run folder: its manifest (``run.json``), its config, its files, and the traces a path
holds."""
