"""The code hashed into each kind of cache key is the import closure of the modules that make its entries
(core.base.config.key_modules), not a hand-kept list: a module that a results module imports changes the results
key, a module outside the closure changes no key.

The planted edits are made in a copy of core/ (core.base.config reads its modules from `config._CORE`): the
repository is never written.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from core.base import config as C

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_structure as S  # noqa: E402  (its own reading of the import graph, with ast)


def _clear():
    for f in (C.imported_modules, C.key_modules, C.code_version):
        f.cache_clear()


@pytest.fixture
def core_copy(tmp_path, monkeypatch):
    """A copy of core/ that core.base.config's walk and hash read instead of the repository's."""
    dst = tmp_path / "core"
    shutil.copytree(ROOT / "core", dst, ignore=shutil.ignore_patterns("__pycache__", "data"))
    monkeypatch.setattr(C, "_CORE", dst)
    _clear()
    yield dst
    _clear()


def _closure(graph: dict[str, set[str]], kind: str) -> set[str]:
    """The closure of `kind` on test_structure's graph (parent packages added, KEY_CUTS not followed)."""
    cuts = C.KEY_CUTS.get(kind, {})
    seen: set[str] = set()
    todo = list(C.KEY_ENTRIES[kind])
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        parents = {".".join(m.split(".")[:i]) for i in range(1, m.count(".") + 1)}
        todo.extend(d for d in graph[m] | parents if (m, d) not in cuts)
    return seen


def test_the_closures_hold_the_modules_that_make_each_entry():
    # the two misses of the hand-kept lists: massive_activations of results.json, the token windows
    assert "core.stats.chain_summary" in C.key_modules("results")
    assert "core.compute.prepare" in C.key_modules("stats")
    # an import for type checking counts: core.compute.pipeline names core.compute.distributed's Group (the torchrun
    # ranks' reduction) only in its annotations; core.compute.ablation through forward_run (the norm parameters); both
    # make statistics
    assert {"core.compute.extract", "core.compute.distributed", "core.compute.ablation", "core.inputs.modalities.run"} <= set(
        C.key_modules("stats")
    )
    # the forward passes of a miss: core.compute.pipeline imports them only inside a function (no torch on a cache hit)
    assert "core.compute.forward_run" in C.key_modules("stats")
    assert "core.compute.lens" in C.key_modules("lens") and "core.compute.lens" not in C.key_modules("stats")
    assert "core.studies.attention.stats" in C.key_modules("attention")
    assert "core.studies.chain.hooks" in C.key_modules("chain")
    # nothing above core's run floor: the views, the exports, the job queue and the UI never make an entry
    for kind in C.KEY_ENTRIES:
        mods = C.key_modules(kind)
        assert list(mods) == sorted(set(mods))
        assert not [
            m for m in mods if m.startswith(("core.views", "core.entry.jobs", "core.views.export", "core.views.report", "ui"))
        ]


def test_the_closures_equal_the_import_graph_of_test_structure():
    """Two readings of the imports (core.base.config's and tests/unit/test_structure.py's) give the same closures."""
    graph = {m: {d for d in ds if d.startswith("core")} for m, ds in S._graph().items() if m.startswith("core")}
    for kind in C.KEY_ENTRIES:
        assert set(C.key_modules(kind)) == _closure(graph, kind), kind


def test_every_cut_is_an_import_the_walk_meets_and_says_why():
    graph = S._graph()
    for kind, cuts in C.KEY_CUTS.items():
        reach = _closure(graph, kind)
        for (src, dst), why in cuts.items():
            assert src in reach and dst in graph[src], f"{kind}: {src} -> {dst} is no import any more: drop the cut"
            assert len(why) > 40, (kind, src, dst)


def test_a_module_planted_under_a_results_module_changes_the_results_key(core_copy):
    before = {k: C.key_code(k) for k in ("stats", "results", "lens")}
    (core_copy / "planted.py").write_text("SCALE = 1.0\n")
    summary = core_copy / "stats" / "chain_summary.py"
    # imported inside a function, as a lazy import would be
    summary.write_text(summary.read_text() + "\n\ndef _planted_scale():\n    from ..planted import SCALE\n\n"
                                             "    return SCALE\n")
    _clear()
    assert "core.planted" in C.key_modules("results")
    planted = C.key_code("results")
    assert planted != before["results"]
    assert C.key_code("stats") == before["stats"] and C.key_code("lens") == before["lens"]
    # an edit of the planted module alone (not of the module importing it) changes the key again
    (core_copy / "planted.py").write_text("SCALE = 2.0\n")
    _clear()
    assert C.key_code("results") not in (planted, before["results"])


@pytest.mark.parametrize("module", ["prepare", "forward_run"])  # the windows; the forward passes of a miss
def test_an_edit_to_prepare_or_the_forward_run_changes_the_statistics_key(core_copy, module):
    before = C.key_code("stats"), C.key_code("results")
    source = core_copy / "compute" / f"{module}.py"
    source.write_text(source.read_text() + "\n# a change to how statistics are computed\n")
    _clear()
    assert C.key_code("stats") != before[0]
    assert C.key_code("results") == before[1]  # results embed the statistics' key, not its code


def test_a_module_outside_the_closures_changes_no_key(core_copy):
    before = {k: C.key_code(k) for k in C.KEY_ENTRIES}
    outside = [m for m in ("core.views.report", "core.views.export", "core.views.layers")
               if not any(m in C.key_modules(k) for k in C.KEY_ENTRIES)]
    assert outside == ["core.views.report", "core.views.export", "core.views.layers"]
    for m in outside:
        p = core_copy.joinpath(*m.split(".")[1:]).with_suffix(".py")
        p.write_text(p.read_text() + "\n# an edit of a view\n")
    (core_copy / "unimported.py").write_text("X = 1\n")
    _clear()
    assert {k: C.key_code(k) for k in C.KEY_ENTRIES} == before


def test_a_cut_edge_keeps_the_statistics_key_when_only_results_code_changes(core_copy):
    before = C.key_code("stats"), C.key_code("results")
    analysis = core_copy / "stats" / "assemble.py"
    analysis.write_text(analysis.read_text() + "\n# a change to how results are built\n")
    _clear()
    assert C.key_code("stats") == before[0]  # no forward pass repeats for a new statistic
    assert C.key_code("results") != before[1]


def test_the_code_version_does_not_depend_on_the_order_of_its_modules():
    a = C.code_version(("core.base.config", "core.stats.kernels", "core.base.spec"))
    assert a == C.code_version(("core.base.spec", "core.base.config", "core.stats.kernels", "core.base.config"))
    assert a != C.code_version(("core.base.config", "core.stats.kernels"))
    with pytest.raises(ValueError, match="unknown cache key kind"):
        C.cache_identity("nonsense")
