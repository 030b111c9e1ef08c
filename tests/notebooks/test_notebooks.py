"""Every lab in notebooks/ executes headless, top to bottom, against a real broker.

Notebooks are committed as jupytext ``py:percent`` files; here each one is converted
to ``.ipynb`` in a temporary directory and run by nbclient in a fresh kernel (the
same machinery nbmake uses). A failing cell fails the test with its traceback; the
executed notebook is kept next to it for a look.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.py"))
CELL_TIMEOUT_S = 120


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS, "notebooks/ holds no py:percent labs"


@pytest.mark.parametrize("source", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes_headless(source: Path, tmp_path: Path) -> None:
    ipynb = tmp_path / f"{source.stem}.ipynb"
    subprocess.run(
        [sys.executable, "-m", "jupytext", "--quiet", "--to", "ipynb", "--output", str(ipynb),
         str(source)],
        check=True, timeout=60,
    )
    notebook = nbformat.read(ipynb, as_version=4)
    client = NotebookClient(
        notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
        resources={"metadata": {"path": str(ROOT)}},
    )
    try:
        client.execute()
    except CellExecutionError as error:
        executed = tmp_path / f"{source.stem}.executed.ipynb"
        nbformat.write(notebook, executed)
        pytest.fail(f"{source.name} failed (executed copy: {executed}):\n{error}")
    outputs = [o for cell in notebook.cells for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    # the kernel's inline backend renders figures headless: a lab that plots shows them
    if "plt.show()" in source.read_text():
        assert any("image/png" in o.get("data", {}) for o in outputs), "no figure was rendered"
