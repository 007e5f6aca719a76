"""core.stats.sums: the streaming sums' declaration, and the merge, reduction and layout check that read it."""

from __future__ import annotations

import numpy as np
import pytest

from core.stats import sums as Z

DIMS = {"L": 3, "d": 4, "G": 5, "I": 2, "F": 10}


def _arrays(rng: np.random.Generator) -> dict:
    """Every non-transient declared sum at its declared shape, plus a non-sum array (the sample)."""
    out = {s.name: rng.normal(size=Z.shape_of(s, DIMS)) for s in Z.SUMS if not s.transient}
    out["sample"] = rng.normal(size=(3, 7, 4))
    return out


def test_merge_follows_each_declared_rule():
    rng = np.random.default_rng(0)
    a, b = _arrays(rng), _arrays(rng)
    m = Z.merge(a, b)
    b_wins = b["max_abs"] > a["max_abs"]
    assert b_wins.any() and (~b_wins).any()
    for s in Z.SUMS:
        if s.transient:
            assert s.name not in m
        elif s.merge == "sum":
            np.testing.assert_array_equal(m[s.name], a[s.name] + b[s.name])
        elif s.merge == "max":
            np.testing.assert_array_equal(m[s.name], np.maximum(a[s.name], b[s.name]))
        else:  # where the max sits: the side holding the larger max, elementwise
            np.testing.assert_array_equal(m[s.name], np.where(b_wins, b[s.name], a[s.name]))
    np.testing.assert_array_equal(m["sample"], a["sample"])  # not a sum: each shard keeps its own


def test_key_lists_and_reduction_come_from_the_declaration():
    assert "max_abs" in Z.MAX_KEYS and "sum_x" in Z.SUM_KEYS and "n" in Z.SUM_KEYS
    assert set(Z.ARGMAX_KEYS) == {"max_abs_token_id", "max_abs_position"}
    assert not set(Z.SUM_KEYS) & set(Z.MAX_KEYS)
    assert Z.reduce_op("max_abs") == "max" and Z.reduce_op("sum_abs") == "sum"
    assert Z.reduce_op("sample") == "sum"  # each row comes from one rank, zeros elsewhere
    assert {s.name for s in Z.ADDED} <= {s.name for s in Z.FORWARD}
    assert Z.shape_of(Z.Sum("pair", ("L", 2)), DIMS) == (3, 2)  # a fixed size beside the symbols


def test_check_layout_names_a_missing_or_misshapen_sum():
    arrays = _arrays(np.random.default_rng(1))
    Z.check_layout(arrays, DIMS)
    with pytest.raises(ValueError, match="sum_x .* != \\(3, 4\\)"):
        Z.check_layout({**arrays, "sum_x": np.zeros((3, 5))}, DIMS)
    gone = dict(arrays)
    del gone["group_n"]
    with pytest.raises(ValueError, match="group_n missing"):
        Z.check_layout(gone, DIMS)
    del gone["max_abs_position"]
    with pytest.raises(ValueError, match="group_n missing$"):  # the final argmax arrays are not asked for
        Z.check_layout(gone, DIMS, positions=False)


def test_a_declaration_that_cannot_be_merged_or_added_is_refused():
    with pytest.raises(ValueError, match="names the maximum"):
        Z.Sum("where", ("L", "d"), merge="argmax")
    with pytest.raises(ValueError, match="only a per-layer forward sum"):
        Z.Sum("count_add", (), "count", add=lambda t: t.x.sum())
    with pytest.raises(ValueError, match="unknown"):
        Z.Sum("odd", ("L",), merge="mean")
