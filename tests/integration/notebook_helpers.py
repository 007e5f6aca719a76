"""docs/notebook.ipynb: execute it (nbclient + ipykernel), read its outputs, and tell whether the committed one is
stale. `python tests/integration/notebook_helpers.py` runs it in place at its own parameters (the full budget, the
repository's cache) and records which sources it ran: do that after changing the notebook or what it shows.

Stale means: a code cell changed since the notebook was last run (its recorded sources hash), a cell holds an error,
a figure or the table is missing, or the table lacks a column the statistic registry now has.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "notebook.ipynb"
META_KEY = "aniso"  # notebook metadata: {"sources_sha256": ...} of the run whose outputs it holds
PLOTLY = "application/vnd.plotly.v1+json"


def read(path: Path = NOTEBOOK):
    import nbformat

    return nbformat.read(str(path), as_version=4)


def sources_sha(nb) -> str:
    """sha256 of the code cells' sources, in order: what the outputs were computed from."""
    h = hashlib.sha256()
    for c in nb.cells:
        if c.cell_type == "code":
            h.update(c.source.encode() + b"\0")
    return h.hexdigest()


def parameters_cell(nb) -> int:
    return next(i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", []))


def with_parameters(nb, params: dict):
    """A copy whose parameters cell is followed by one setting `params` (papermill's injected-parameters cell)."""
    import nbformat

    nb = copy.deepcopy(nb)
    cell = nbformat.v4.new_code_cell("\n".join(f"{k} = {v!r}" for k, v in params.items()),
                                     metadata={"tags": ["injected-parameters"]})
    nb.cells.insert(parameters_cell(nb) + 1, cell)
    return nb


def execute(nb, env: dict[str, str] | None = None, timeout: int | None = 600):
    """Run every cell in a fresh ipykernel (this interpreter), in docs/, with `env` added to this environment and
    the repository importable (`import aniso`)."""
    from nbclient import NotebookClient

    full = {**os.environ, **(env or {})}
    full["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [full.get("PYTHONPATH", "")] if p])
    client = NotebookClient(nb, kernel_name="python3", timeout=timeout, resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute(env=full)
    return nb


def outputs(nb) -> list[list[dict]]:
    """Per code cell, its outputs."""
    return [list(c.get("outputs", [])) for c in nb.cells if c.cell_type == "code"]


def errors(nb) -> list[str]:
    return [f"{o.get('ename')}: {o.get('evalue')}" for outs in outputs(nb) for o in outs if o.get("output_type") == "error"]


def figures(nb) -> list[dict]:
    """Every Plotly figure the notebook shows (its JSON)."""
    out = []
    for outs in outputs(nb):
        for o in outs:
            data = o.get("data", {})
            if PLOTLY in data:
                fig = data[PLOTLY]
                out.append(json.loads(fig) if isinstance(fig, str) else fig)
    return out


def kinds(nb) -> list[list[str]]:
    """Per code cell, what it shows: "figure", "table" (an HTML DataFrame), "text" or "stream", in order."""
    got = []
    for outs in outputs(nb):
        k = []
        for o in outs:
            data = o.get("data", {})
            k.append("figure" if PLOTLY in data else "table" if "<table" in str(data.get("text/html", ""))
                     else "stream" if o.get("output_type") == "stream" else "text")
        got.append(k)
    return got


def table_html(nb, source: str = "run.layers") -> str:
    """The HTML table shown by the code cell whose source is `source`."""
    for c in nb.cells:
        if c.cell_type == "code" and c.source.strip() == source:
            return "".join(str(o.get("data", {}).get("text/html", "")) for o in c.get("outputs", []))
    raise AssertionError(f"no cell {source!r} in the notebook")


def write_in_place() -> None:
    """Execute the notebook at its own parameters and save it with its outputs and the sources hash."""
    import nbformat

    nb = execute(read(), timeout=None)  # the full budget: SmolLM2 takes minutes on 2 cores
    nb.metadata[META_KEY] = {"sources_sha256": sources_sha(nb)}
    bad = errors(nb)
    if bad:
        raise SystemExit(f"the notebook failed: {bad}")
    nbformat.write(nb, str(NOTEBOOK))
    print(f"{NOTEBOOK}: {len(figures(nb))} figures, written", file=sys.stderr)


if __name__ == "__main__":
    write_in_place()
