"""The notebooks run top to bottom on the embedded defaults (a fresh kernel each), and show
what they say they show."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import SHARED_DATA

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def run(name: str) -> str:
    """Execute a notebook; return all the text it printed."""
    book = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(
        book, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    ).execute()  # raises CellExecutionError on the first failing cell
    return "\n".join(
        str(out.get("text", "")) + str(out.get("data", {}).get("text/plain", ""))
        for cell in book.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
    )


@pytest.mark.timeout(600)
def test_langchain_quickstart() -> None:
    text = run("langchain_quickstart.ipynb")
    assert " exact " in text and " semantic " in text and "model calls: 6" in text


@pytest.mark.timeout(600)
def test_llama_index_query_engine() -> None:
    text = run("llama_index_query_engine.ipynb")
    assert "LLM cache" in text and "response: exact" in text
    assert "within 30 days" in text  # the answer after the index changed


@pytest.mark.timeout(600)
def test_threshold_calibration() -> None:
    if not (SHARED_DATA / "qqp").exists():
        pytest.skip(f"labelled pairs not found under {SHARED_DATA}")
    text = run("threshold_calibration.ipynb")
    assert "lowest threshold with precision >= 0.95" in text and "<Figure" in text
