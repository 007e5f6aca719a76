"""Non-finite and degenerate hidden states, and a GPU out of memory, on a tiny real model.

A wrapper edits the hidden states the model returns: NaN at padded or excluded positions must
never reach the sums; NaN/inf at an analysed position stops the run with a message naming the
layer, dtype and token; exactly-zero hidden states count the same way (cosine 0) in the streaming
statistics and in the sample metrics; a batch that runs out of memory is halved.
"""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from foundation_helpers import make_documents

from core.compute.extract import SUM_KEYS, NonFiniteHiddenState, extract_stats
from core.inputs.corpora import tokenize_budget
from core.inputs.models import load_model
from core.stats import kernels as M


class Edited:
    """The model, with `edit(layer, h, input_ids, attention_mask) -> h` applied to each hidden state."""

    def __init__(self, base, edit, oom_above: int | None = None):
        self.base, self.edit, self.config, self.oom_above = base, edit, base.config, oom_above
        self.batch_sizes = []

    def __call__(self, input_ids, attention_mask, output_hidden_states=True):
        self.batch_sizes.append(int(input_ids.shape[0]))
        if self.oom_above is not None and input_ids.shape[0] > self.oom_above:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        out = self.base(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        return SimpleNamespace(hidden_states=tuple(self.edit(l, h.clone(), input_ids, attention_mask)
                                                   for l, h in enumerate(out.hidden_states)))


@pytest.fixture(scope="module")
def tiny(tiny_bert_dir):
    lm = load_model(str(tiny_bert_dir))
    w = tokenize_budget(make_documents([3, 50, 12, 7, 33, 21, 9], seed=4), lm.tokenizer, 10_000, 20, seed=0)
    return lm, w, int(lm.tokenizer.pad_token_id)


def _run(model, w, pad, **kw):
    return extract_stats(model, w, batch_size=kw.pop("batch_size", 4), sample_size=10_000, pad_id=pad, **kw)


def test_nan_at_padded_and_excluded_positions_never_reaches_the_sums(tiny):
    lm, w, pad = tiny
    clean, t = _run(lm.base, w, pad)
    assert t["padding_fraction"] > 0
    special = set(lm.tokenizer.all_special_ids)

    def poison(layer, h, ids, att):
        bad = (att == 0) | torch.isin(ids, torch.as_tensor(sorted(special)))  # padding, [CLS], [SEP]
        return torch.where(bad[..., None], torch.full_like(h, float("nan")), h)

    dirty, _ = _run(Edited(lm.base, poison), w, pad)
    for k in SUM_KEYS + ("max_abs", "sample"):
        assert np.isfinite(dirty[k]).all(), k
        np.testing.assert_allclose(dirty[k], clean[k], rtol=1e-12, atol=1e-12, err_msg=k)


@pytest.mark.parametrize("value,dtype", [(float("nan"), "float32"), (float("inf"), "bfloat16")])
def test_non_finite_value_at_an_analysed_position_is_reported(tiny, value, dtype):
    lm, w, pad = tiny

    def overflow(layer, h, ids, att):
        if layer == 2:
            h[0, 3, 5] = value  # position 3 of the first window of every batch: an analysed token
        return h

    with pytest.raises(NonFiniteHiddenState) as e:
        _run(Edited(lm.base, overflow), w, pad, dtype=dtype)
    msg = str(e.value)
    kind = "NaN" if value != value else "inf"
    assert f"layer 2 is {kind}" in msg and "token id" in msg and "position 3" in msg
    if dtype == "float32":  # issue 37 item 11: a float32 run (an audio run's NaN) was told to use float32
        assert "in float32, which is full precision" in msg and "--dtype" not in msg and "Check the model" in msg
    else:
        assert f"in {dtype}: the activations overflow" in msg and "--dtype float32" in msg


def test_zero_hidden_states_count_the_same_in_streaming_and_sample_metrics(tiny):
    lm, w, pad = tiny

    def zero(layer, h, ids, att):
        if layer == 1:
            h[:, 2] = 0.0  # position 2 of every window: exactly zero (as a zero embedding row would be)
        return h

    a, _ = _run(Edited(lm.base, zero), w, pad)
    N = int(a["n"])
    assert a["sample"].shape[1] == N  # the sample is the whole corpus
    X = a["sample"][1].astype(np.float64)
    n_zero = int((np.linalg.norm(X, axis=1) == 0).sum())
    assert n_zero >= 5
    U = X / np.where(np.linalg.norm(X, axis=1) > 0, np.linalg.norm(X, axis=1), 1.0)[:, None]
    naive = (U @ U.T)[~np.eye(N, dtype=bool)].mean()  # cos(0, x) = 0, every pair counted
    S = a["group_sum_u"][1].sum(0)
    assert a["sum_u_sq"][1].sum() == pytest.approx(N - n_zero)
    assert M.mean_cosine(S, N, a["sum_u_sq"][1].sum()) == pytest.approx(naive, abs=1e-6)
    assert M.sample_mean_cosine(X) == pytest.approx(naive, abs=1e-6)
    assert a["sum_norm"][1] == pytest.approx(np.linalg.norm(X, axis=1).sum(), rel=1e-6)  # counted in the norms


def test_out_of_memory_halves_the_batch(tiny):
    lm, w, pad = tiny
    small, _ = _run(lm.base, w, pad, batch_size=2)
    model = Edited(lm.base, lambda layer, h, ids, att: h, oom_above=2)
    big, timing = _run(model, w, pad, batch_size=8)
    assert timing["oom_splits"] >= 2 and max(model.batch_sizes) == 8 and 2 in model.batch_sizes
    for k in SUM_KEYS + ("max_abs", "sample"):
        np.testing.assert_allclose(big[k], small[k], rtol=1e-6, atol=1e-6, err_msg=k)
    with pytest.raises(torch.OutOfMemoryError):  # even one window does not fit: reported by the pipeline
        _run(Edited(lm.base, lambda layer, h, ids, att: h, oom_above=0), w, pad)
