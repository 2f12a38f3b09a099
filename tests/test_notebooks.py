"""The notebooks under ``notebooks/`` run top to bottom, and are committed as sources only.

Each notebook is executed by nbclient in a fresh ``python3`` kernel (ipykernel, installed by the
dev extra) with ``FUNRL_NOTEBOOK_BUDGET=ci``, the small budget every notebook reads in its first
code cell; a cell that raises fails its test with the cell's source and traceback.
"""

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
EXPECTED = [
    "01_quickstart", "02_vmap_ensembles", "03_property_testing", "04_custom_env", "05_buffers_offline", "06_mujoco",
]  # fmt: skip
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 300  # a hung cell fails instead of stalling CI
ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # ipykernel colours its tracebacks


def _read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def test_the_issue_notebooks_are_there() -> None:
    names = [p.stem for p in NOTEBOOKS]
    missing = [name for name in EXPECTED if name not in names]
    assert not missing, f"notebooks/: missing {missing}; found {names}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs(path: Path) -> None:
    nb = _read(path)
    nbformat.validate(nb)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        assert cell.outputs == [], f"{path.name}: code cell {index} holds outputs; strip them before committing"
        assert cell.execution_count is None, f"{path.name}: code cell {index} holds an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_states_its_runtime_and_reads_the_budget_first(path: Path) -> None:
    nb = _read(path)
    intro = nb.cells[0]
    assert intro.cell_type == "markdown" and "2-core CPU" in intro.source, (
        f"{path.name}: the first cell must state the full-budget runtime on a 2-core CPU"
    )
    assert "RUNTIME_" not in intro.source, f"{path.name}: the runtime is still a placeholder"
    first_code = next(cell for cell in nb.cells if cell.cell_type == "code")
    assert 'os.environ.get("FUNRL_NOTEBOOK_BUDGET", "full")' in first_code.source, (
        f"{path.name}: the first code cell must pick its budget from FUNRL_NOTEBOOK_BUDGET"
    )


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_top_to_bottom(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The kernel inherits this environment: the small budget, and one thread, as the suite uses.
    monkeypatch.setenv("FUNRL_NOTEBOOK_BUDGET", "ci")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = _read(path)
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(tmp_path)}},  # the kernel's working directory
    )
    failure = None
    try:
        client.execute()
    except CellExecutionError as err:
        failure = ANSI_COLOUR.sub("", str(err))
    if failure is not None:  # outside the except: the report once, not chained to the original
        pytest.fail(f"{path.name}: a cell failed under FUNRL_NOTEBOOK_BUDGET=ci\n{failure}", pytrace=False)
