"""Rendering: rich tables, output files (JSON, CSV, Markdown), Plotly charts."""
