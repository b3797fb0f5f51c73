"""docs/examples/job.ipynb runs from top to bottom (the Python API's example notebook)."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).parent.parent


def test_the_example_notebook_runs():
    notebook = nbformat.read(ROOT / "docs" / "examples" / "job.ipynb", as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    # the diff's verdict, printed by the notebook
    assert any("ms per step" in o.get("text", "") for o in outputs if o.output_type == "stream")
