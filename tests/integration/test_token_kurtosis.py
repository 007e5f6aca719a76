"""token_kurtosis: the mean over tokens of each hidden state's kurtosis across its dimensions (Elhage et al. 2023).

Its kernel (core.stats.kernels.token_kurtosis_sums) against a literal per-token computation on synthetic arrays, the
declared streaming sum (core.stats.sums) on numpy as the extraction runs it on torch, and the streamed value of a run
of a tiny random BERT against the one-shot value on its hidden states computed here, window by window.
"""

import numpy as np
import pytest
import torch

from core.base.spec import RunSpec
from core.compute.extract import analysed_masks, merge_stats
from core.compute.pipeline import get_stats
from core.inputs.corpora import load_documents, tokenize_budget
from core.inputs.models import load_model
from core.stats import kernels as M
from core.stats.assemble import build_results
from core.stats.sums import BY_NAME, SUM_KEYS, Tokens

pytestmark = pytest.mark.fast

SEQ = 24
SEED = 3


def naive_kurtosis(X: np.ndarray) -> list[float]:
    """Pearson's kurtosis of each row, literally (None for a row whose values are all equal)."""
    out = []
    for x in X:
        c = [v - sum(x) / len(x) for v in x]
        m2 = sum(v * v for v in c) / len(x)
        m4 = sum(v ** 4 for v in c) / len(x)
        out.append(None if len(set(x.tolist())) == 1 else m4 / m2 ** 2)
    return out


def _planted(rng, n=60, d=15):
    X = rng.normal(size=(n, d))
    X[::3, 5] += 40.0  # an outlier dimension on a third of the tokens: their kurtosis is far above 3
    X[7] = 0.0  # a zero state (a padded position reads the same): no kurtosis
    X[11] = 0.1  # a constant state: no kurtosis either (its centred values are rounding residue, not 0)
    return X


def test_kernel_matches_the_literal_definition():
    X = _planted(np.random.default_rng(0))
    ref = naive_kurtosis(X)
    assert ref[7] is None and ref[11] is None
    assert ((X[11] - X[11].mean()) ** 2).mean() > 0  # the constant row's residue: what the kernel's tolerance drops
    counted = [k for k in ref if k is not None]
    s, n = M.token_kurtosis_sums(X)
    assert n == len(counted) == len(X) - 2
    assert s / n == pytest.approx(np.mean(counted), rel=1e-12)
    assert max(counted) > 10 and min(counted) < 4  # the planted tokens stand out of the Gaussian ones (~3)
    assert M.mean_token_kurtosis(0.0, 0) != M.mean_token_kurtosis(0.0, 0)  # no token: NaN
    # a Gaussian vector scores about 3 (3 (d - 1) / (d + 1) in expectation); one dimension holding it all, d - 2 + ...
    G = np.random.default_rng(1).normal(size=(4000, 64))
    assert M.mean_token_kurtosis(*M.token_kurtosis_sums(G)) == pytest.approx(3 * 63 / 65, rel=0.02)
    assert M.mean_token_kurtosis(*M.token_kurtosis_sums(np.eye(64)[:3])) == pytest.approx((64**2 - 3 * 64 + 3) / 63)


def test_the_declared_sum_streams_and_reads_a_layers_real_width():
    rng = np.random.default_rng(2)
    X = _planted(rng)
    add = BY_NAME["sum_token_kurtosis"].add
    assert "sum_token_kurtosis" in SUM_KEYS  # added up over chunks, shards and ranks
    whole = add(Tokens(X, np.linalg.norm(X, axis=1), np.ones(len(X), bool), X.shape[1]))
    chunks = sum(add(Tokens(X[i:i + 7], None, None, X.shape[1])) for i in range(0, len(X), 7))
    np.testing.assert_allclose(chunks, whole, rtol=1e-12)
    np.testing.assert_allclose(whole, M.token_kurtosis_sums(X), rtol=0)
    # a CNN stage narrower than d: the zero padding beyond its width is not part of a token's values
    padded = np.concatenate([X, np.zeros((len(X), 9))], axis=1)
    np.testing.assert_allclose(add(Tokens(padded, None, None, X.shape[1])), whole, rtol=1e-12)
    # the same function on torch tensors (the extraction's), batch x positions x d
    xt = torch.as_tensor(padded.reshape(6, 10, -1))
    got = add(Tokens(xt, None, None, X.shape[1], torch))
    assert got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), whole, rtol=1e-12)


def _hidden_states(model_dir, corpus):
    """Per layer, the (N, d) float64 hidden states of the analysed tokens, one window at a time (no padding)."""
    lm = load_model(str(model_dir))
    windows = tokenize_budget(load_documents(str(corpus)), lm.tokenizer, 100_000, SEQ, SEED, str(corpus))
    masks = analysed_masks(windows, "exclude")
    per_window = []
    with torch.inference_mode():
        for ids, m in zip(windows.ids, masks):
            t = torch.as_tensor(ids)[None]
            out = lm.base(input_ids=t, attention_mask=torch.ones_like(t), output_hidden_states=True)
            per_window.append([h[0].float().numpy()[m] for h in out.hidden_states])
    return [np.concatenate([w[l] for w in per_window]).astype(np.float64) for l in range(len(per_window[0]))]


def test_streamed_value_equals_the_one_shot_value(cache_dir, tiny_bert_dir, varied_txt):
    spec = RunSpec(model=str(tiny_bert_dir), corpus=str(varied_txt), max_tokens=100_000, max_seq_len=SEQ,
                   batch_size=4, device="cpu", dtype="float32", special_tokens="exclude", sample=100_000, seed=SEED)
    stats = get_stats(spec, cache_dir)  # batches of 4 padded windows, in chunks: what a run streams
    rows = build_results(stats)["layers"]
    X = _hidden_states(tiny_bert_dir, varied_txt)
    assert len(rows) == len(X) and stats.n_tokens == len(X[0])
    for l, Xl in enumerate(X):
        ref = [k for k in naive_kurtosis(Xl) if k is not None]
        assert len(ref) == len(Xl)  # no constant hidden state in this model
        assert rows[l]["token_kurtosis"] == pytest.approx(np.mean(ref), rel=1e-6), l
    # two shards' sums merge into the whole run's (the rule a torchrun reduction applies: addition)
    a = stats.arrays["sum_token_kurtosis"]
    half = {"sum_token_kurtosis": a / 2, "max_abs": stats.arrays["max_abs"]}
    np.testing.assert_allclose(merge_stats(half, half)["sum_token_kurtosis"], a, rtol=1e-15)
