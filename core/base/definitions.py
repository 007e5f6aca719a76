"""The shape of a metric's texts (`Definition`: one-line definition, formula, how to read high and
low values, the paper) and the reader of docs/metrics.md's sections.

The texts themselves live in the statistic registry (core.stats.registry: one entry per statistic,
`DEFINITIONS` derived from it). The exact definitions (estimators, edge cases) are in
docs/metrics.md; the short texts follow it and the app links there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DOCS_PATH = "docs/metrics.md"
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Definition:
    short: str  # one line of plain text: the exact definition, for hovers and tables
    formula: str  # LaTeX (st.latex)
    high: str
    low: str
    paper: str


def docs_section(metric: str) -> str | None:
    """The section of docs/metrics.md about `metric` (by its key in a heading), if the file has one."""
    path = ROOT / DOCS_PATH
    try:
        text = path.read_text("utf-8")
    except OSError:
        return None
    lines, out, inside, level = text.splitlines(), [], False, 0
    for line in lines:
        if line.startswith("#"):
            lvl = len(line) - len(line.lstrip("#"))
            if inside and lvl <= level:
                break
            if not inside and f"`{metric}`" in line:
                inside, level = True, lvl
        if inside:
            out.append(line)
    return "\n".join(out).strip() or None
