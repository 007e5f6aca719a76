"""Every streaming metric against a naive O(N^2) implementation on hidden states computed here.

The run analyses a small file corpus with a tiny random model; the sample is larger than the
corpus, so it must hold EVERY analysed token. The reference runs the model itself, one window at a
time (no padding), with output_hidden_states, and computes each definition of DESIGN.md literally.
"""

import dataclasses

import numpy as np
import pytest
import torch

import core.compute.extract as extract
from core.base.config import CONFIG
from core.base.spec import RunSpec
from core.compute.extract import MAX_KEYS, SUM_KEYS, analysed_masks
from core.compute.pipeline import get_stats
from core.inputs.corpora import load_documents, tokenize_budget
from core.inputs.models import load_model
from core.stats.assemble import build_results, cosine_contributions, frequency_r, mean_abs
from core.stats.batching import document_groups
from core.stats.registry import isotropic_baseline, sample_values

N_FREQ_BINS = CONFIG.freq_bins

SEQ = 24
SEED = 3
TOL = 1e-6


def _spec(model_dir, corpus, policy, **kw):
    base = dict(model=str(model_dir), corpus=str(corpus), max_tokens=100_000, max_seq_len=SEQ, batch_size=4,
                device="cpu", dtype="float32", special_tokens=policy, sample=100_000, seed=SEED)
    return RunSpec(**{**base, **kw})


def _reference(model_dir, corpus, policy):
    """(windows, masks, per-layer list of (N, d) float64 hidden states, window id and position of each token)."""
    lm = load_model(str(model_dir))
    windows = tokenize_budget(load_documents(str(corpus)), lm.tokenizer, 100_000, SEQ, SEED, str(corpus))
    masks = analysed_masks(windows, policy)
    per_window = []
    with torch.inference_mode():
        for ids in windows.ids:
            t = torch.as_tensor(ids)[None]
            out = lm.base(input_ids=t, attention_mask=torch.ones_like(t), output_hidden_states=True)
            per_window.append(np.stack([h[0].float().numpy() for h in out.hidden_states]))  # (L+1, T, d)
    n_layers = per_window[0].shape[0]
    X = [np.concatenate([hw[l][m] for hw, m in zip(per_window, masks)]).astype(np.float64) for l in range(n_layers)]
    win = np.concatenate([np.full(int(m.sum()), i) for i, m in enumerate(masks)])
    pos = np.concatenate([np.flatnonzero(m) for m in masks])
    tok = np.concatenate([w[m] for w, m in zip(windows.ids, masks)])
    return windows, per_window, X, win, pos, tok


def _unit(X):
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def naive_mean_cosine(X, pair_mask=None):
    C = _unit(X) @ _unit(X).T
    keep = ~np.eye(len(X), dtype=bool) if pair_mask is None else pair_mask
    return C[keep].mean()


def naive_layer(X, win, tok, tracked, doc):
    N, d = X.shape
    U = _unit(X)
    C = U @ U.T
    off = ~np.eye(N, dtype=bool)
    out = {"mean_cosine": C[off].mean(),
           "cross_sequence_cosine": C[doc[:, None] != doc[None, :]].mean(),  # different documents
           "mean_norm": np.linalg.norm(X, axis=1).mean(),
           "mean_abs": np.abs(X).mean(0), "mean_x": X.mean(0), "max_abs": np.abs(X).max(0)}
    intra = []
    for w in np.unique(win):
        Xw = X[win == w]
        c = Xw.mean(0)
        intra.append(np.mean([x @ c / (np.linalg.norm(x) * np.linalg.norm(c)) for x in Xw]))
    out["intra_sentence_similarity"] = np.mean(intra)
    # cosine contribution of dimension k: mean over ordered pairs i != j of u_ik u_jk
    out["cc"] = np.array([(np.outer(U[:, k], U[:, k])[off]).mean() for k in range(d)])
    sims = []
    for t in tracked:  # pairs of occurrences that lie in different sequences (windows)
        Ut, wt = U[tok == t], win[tok == t]
        assert len(np.unique(wt)) >= 5
        sims.append((Ut @ Ut.T)[wt[:, None] != wt[None, :]].mean())
    out["self_similarity"] = np.mean(sims) if sims else np.nan
    return out


def _frequency(tok):
    ids, counts = np.unique(tok, return_counts=True)
    return dict(zip(ids.tolist(), counts.tolist()))


def _tracked(tok, win, k=200):
    """The 200 most frequent ids (ties by smaller id) among those in >= 5 distinct windows."""
    freq = _frequency(tok)
    ok = [t for t in freq if len(np.unique(win[tok == t])) >= 5]
    return sorted(ok, key=lambda t: (-freq[t], t))[:k]


FAST = pytest.mark.fast  # the fast tier: the pipeline on a tiny random encoder, causal LM and LLaMA


@pytest.fixture(scope="module", params=[pytest.param(("bert", "exclude"), marks=FAST), ("bert", "include"),
                                        pytest.param(("gpt2", "exclude"), marks=FAST),
                                        pytest.param(("llama", "exclude"), marks=FAST)], ids=lambda p: "-".join(p))
def case(request, cache_dir, varied_txt):
    kind, policy = request.param
    model_dir = request.getfixturevalue(f"tiny_{kind}_dir")
    stats = get_stats(_spec(model_dir, varied_txt, policy), cache_dir)
    windows, per_window, X, win, pos, tok = _reference(model_dir, varied_txt, policy)
    return dict(kind=kind, policy=policy, model_dir=model_dir, stats=stats, results=build_results(stats), windows=windows,
                per_window=per_window, X=X, win=win, pos=pos, tok=tok)


def test_windows_split_and_policy(case):
    w = case["windows"]
    assert len(w.ids) > w.n_documents, "some documents must be longer than the window"
    assert max(len(i) for i in w.ids) == SEQ
    n_special = sum(int(s.sum()) for s in w.special)
    if case["kind"] == "bert":
        assert n_special == 2 * len(w.ids)  # [CLS] ... [SEP] in every window
    expected_n = w.n_tokens_total if case["policy"] == "include" else w.n_tokens_total - n_special
    assert case["stats"].n_tokens == expected_n == len(case["tok"])
    assert case["results"]["manifest"]["tokens"]["analysed"] == expected_n


def test_streaming_metrics_match_naive(case):
    stats, res, X, win, tok = case["stats"], case["results"], case["X"], case["win"], case["tok"]
    doc = case["windows"].doc[win]
    assert len(np.unique(win)) > len(np.unique(doc)), "documents must span several windows"
    freq = _frequency(tok)
    tracked = _tracked(tok, win)
    assert len(tracked) >= 3, "the corpus must repeat tokens for self-similarity"
    assert len(tracked) < len([t for t, c in freq.items() if c >= 5]), "some ids must qualify by count only"
    assert stats.arrays["id_list"].tolist() == tracked
    assert len(res["layers"]) == len(X) == stats.n_layers
    ccs, mabs, fr = cosine_contributions(stats), mean_abs(stats), frequency_r(stats)
    logf = np.log(np.asarray([freq[t] for t in tok], dtype=np.float64))
    for l, Xl in enumerate(X):
        ref = naive_layer(Xl, win, tok, tracked, doc)
        row = res["layers"][l]
        assert row["layer"] == l and row["n_tokens"] == len(Xl)
        for key in ("mean_cosine", "cross_sequence_cosine", "intra_sentence_similarity", "self_similarity",
                    "mean_norm"):
            assert row[key] == pytest.approx(ref[key], abs=TOL, rel=TOL), (l, key)
        # per-dimension cosine contribution: every dim, and they add up to the mean cosine
        np.testing.assert_allclose(ccs[l], ref["cc"], atol=TOL, rtol=0)
        assert ccs[l].sum() == pytest.approx(ref["mean_cosine"], abs=TOL)
        top = row["cosine_contribution"]
        assert top["total"] == pytest.approx(ref["mean_cosine"], abs=TOL)
        np.testing.assert_allclose(top["cc"], ref["cc"][top["dims"]], atol=TOL)
        assert abs(top["cc"][0]) == pytest.approx(np.abs(ref["cc"]).max(), abs=TOL)  # ranked by |CC_d|
        # outlier inputs: mean |x_d|, mean x_d, max |x_d|
        np.testing.assert_allclose(mabs[l], ref["mean_abs"], atol=TOL, rtol=TOL)
        np.testing.assert_allclose(stats.arrays["sum_x"][l] / stats.n_tokens, ref["mean_x"], atol=TOL)
        np.testing.assert_allclose(stats.arrays["max_abs"][l], ref["max_abs"], atol=TOL, rtol=TOL)
        # ... and where each max |x_d| sits (massive activations): its token id and position in its window
        # (ties: the embeddings of one token id repeat, so any token holding the maximum will do)
        for k, (tid, p) in enumerate(zip(stats.arrays["max_abs_token_id"][l], stats.arrays["max_abs_position"][l])):
            holders = np.flatnonzero((tok == tid) & (case["pos"] == p))
            assert len(holders) and np.abs(Xl[holders, k]).max() == pytest.approx(ref["max_abs"][k], rel=TOL), (l, k)
        # Pearson r between log corpus frequency and |x_d|, every dimension
        naive_r = np.array([np.corrcoef(logf, np.abs(Xl[:, k]))[0, 1] for k in range(Xl.shape[1])])
        np.testing.assert_allclose(fr[l], naive_r, atol=TOL)
        # bootstrap CI bracket the estimate's neighbourhood and are built from the right totals
        lo, hi = row["mean_cosine_ci"]
        assert lo <= row["mean_cosine"] <= hi and np.isfinite([lo, hi]).all()
        np.testing.assert_allclose(stats.arrays["group_sum_u"][l].sum(0), _unit(Xl).sum(0), atol=TOL)
        # the groups resampled are whole documents: every window of a document in its document's group
        grp = document_groups(case["windows"].doc, SEED, CONFIG.bootstrap_groups)[win]
        assert all(len(np.unique(grp[doc == k])) == 1 for k in np.unique(doc))
        naive_groups = np.stack([_unit(Xl)[grp == g].sum(0) for g in range(CONFIG.bootstrap_groups)])
        np.testing.assert_allclose(stats.arrays["group_sum_u"][l], naive_groups, atol=TOL)
    assert stats.arrays["group_n"].sum() == len(tok)


def test_frequency_binned_cosine_matches_naive(case):
    res, X, tok = case["results"], case["X"], case["tok"]
    freq = _frequency(tok)
    logf = np.log(np.asarray([freq[t] for t in tok], dtype=np.float64))
    # Deciles, naively: walk the token types from rarest to most frequent (ties by id); a type's
    # bin is the tenth of the corpus in which its first occurrence falls.
    bin_of, seen = {}, 0
    for t, c in sorted(freq.items(), key=lambda kv: (kv[1], kv[0])):
        bin_of[t] = min(int(seen * N_FREQ_BINS // len(tok)), N_FREQ_BINS - 1)
        seen += c
    b = np.asarray([bin_of[t] for t in tok])
    ranges = res["frequency_bins"]["log_freq_range"]
    for k in range(N_FREQ_BINS):
        if (b == k).any():
            assert ranges[k] == [pytest.approx(logf[b == k].min()), pytest.approx(logf[b == k].max())]
    assert res["frequency_bins"]["n_tokens"] == np.bincount(b, minlength=N_FREQ_BINS).tolist()
    for l, Xl in enumerate(X):
        got = np.asarray([np.nan if v is None else v for v in res["layers"][l]["frequency_binned_cosine"]])
        want = np.array([naive_mean_cosine(Xl[b == k]) if (b == k).sum() >= 2 else np.nan
                         for k in range(N_FREQ_BINS)])
        np.testing.assert_allclose(got, want, atol=TOL, equal_nan=True)
        assert np.isfinite(want).sum() >= 2


def test_sample_holds_every_token_at_its_place(case):
    a, X = case["stats"].arrays, case["X"]
    windows, per_window = case["windows"], case["per_window"]
    N = len(case["tok"])
    assert a["sample"].shape[:2] == (len(X), N)
    np.testing.assert_array_equal(a["sample_window"], case["win"])
    np.testing.assert_array_equal(a["sample_position"], case["pos"])
    np.testing.assert_array_equal(a["sample_token_id"], case["tok"])
    np.testing.assert_array_equal(a["sample_doc"], windows.doc[case["win"]])
    freq = _frequency(case["tok"])
    np.testing.assert_array_equal(a["sample_freq"], [freq[t] for t in case["tok"]])
    tok = load_model(str(case["model_dir"])).tokenizer
    assert case["stats"].meta["sample_tokens"] == tok.convert_ids_to_tokens(case["tok"].tolist())
    assert len(case["stats"].meta["sample_context"]) == N
    for k in range(N):
        w, p = int(a["sample_window"][k]), int(a["sample_position"][k])
        assert windows.ids[w][p] == a["sample_token_id"][k]
        np.testing.assert_allclose(a["sample"][:, k], per_window[w][:, p], atol=TOL)
    if case["policy"] == "exclude":
        assert not any(windows.special[w][p] for w, p in zip(a["sample_window"], a["sample_position"]))
    # the sample-based metrics therefore see the whole analysed set
    for l, Xl in enumerate(X):
        row = case["results"]["layers"][l]
        ref = sample_values(Xl)
        assert row["n_sample"] == N
        assert row["sample_mean_cosine"] == pytest.approx(row["mean_cosine"], abs=TOL)
        for key in ("pc1_variance_ratio", "effective_rank", "isoscore"):
            assert row[key] == pytest.approx(ref[key], rel=1e-5, abs=TOL), (l, key)
        # effective rank (Roy & Vetterli) and partition isotropy (Mu & Viswanath), written out here
        sv = np.linalg.svd(Xl - Xl.mean(0), compute_uv=False)
        sv = sv[sv > sv[0] * 1e-7]
        p = sv / sv.sum()
        assert row["effective_rank"] == pytest.approx(np.exp(-(p * np.log(p)).sum()), rel=1e-5), l
        W = Xl / np.linalg.norm(Xl, axis=1).mean()
        _, V = np.linalg.eigh(W.T @ W)
        V = V * np.sign(V[np.abs(V).argmax(0), np.arange(V.shape[1])])
        logz = np.log(np.exp(W @ V).sum(0))
        assert row["partition_isotropy"] == pytest.approx(np.exp(logz.min() - logz.max()), rel=1e-6), l
        # the isotropic baseline of the same K and d, seeded
        iso = isotropic_baseline(N, Xl.shape[1], CONFIG.isotropic_seed)
        assert row["isoscore_isotropic"] == pytest.approx(iso["isoscore"], rel=1e-12)


def test_self_similarity_uses_the_most_frequent_ids(tmp_path, tiny_bert_dir, varied_txt, monkeypatch):
    """With room for only 2 tracked ids, self_similarity is the mean over the 2 most frequent ones."""
    monkeypatch.setattr(extract, "CONFIG", dataclasses.replace(CONFIG, self_sim_ids=2))
    stats = get_stats(_spec(tiny_bert_dir, varied_txt, "exclude"), tmp_path / "cache")  # not the shared cache
    windows, _, X, win, _, tok = _reference(tiny_bert_dir, varied_txt, "exclude")
    top2 = _tracked(tok, win, 2)
    assert stats.arrays["id_list"].tolist() == top2
    rows = build_results(stats)["layers"]
    for l, Xl in enumerate(X):
        ref = naive_layer(Xl, win, tok, top2, windows.doc[win])["self_similarity"]
        assert rows[l]["self_similarity"] == pytest.approx(ref, abs=TOL)


# ----------------------------------------------------------------------------- on a GPU (skipped without one)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@needs_cuda
def test_cuda_float32_matches_cpu(tmp_path, tiny_bert_dir, varied_txt):
    cpu = get_stats(_spec(tiny_bert_dir, varied_txt, "exclude"), tmp_path / "cache")
    gpu = get_stats(_spec(tiny_bert_dir, varied_txt, "exclude", device="cuda"), tmp_path / "cache")
    assert gpu.manifest["device"] == "cuda" and gpu.manifest["dtype"] == "float32" and not gpu.cached
    for k in cpu.arrays:
        if k in SUM_KEYS or k in MAX_KEYS or k == "sample":
            np.testing.assert_allclose(gpu.arrays[k], cpu.arrays[k], rtol=1e-4, atol=1e-4, err_msg=k)
        else:
            np.testing.assert_array_equal(gpu.arrays[k], cpu.arrays[k], err_msg=k)
    a, b = build_results(cpu)["layers"], build_results(gpu)["layers"]
    for ra, rb in zip(a, b):
        for key in ("mean_cosine", "cross_sequence_cosine", "intra_sentence_similarity", "self_similarity"):
            assert rb[key] == pytest.approx(ra[key], abs=1e-4), key


@needs_cuda
def test_auto_on_cuda_is_bfloat16_and_finite(tmp_path, tiny_bert_dir, varied_txt):
    stats = get_stats(_spec(tiny_bert_dir, varied_txt, "exclude", device="auto", dtype="auto"), tmp_path / "cache")
    assert stats.manifest["device"] == "cuda" and stats.manifest["dtype"] == "bfloat16"
    rows = build_results(stats)["layers"]
    for row in rows:
        for key in ("mean_cosine", "cross_sequence_cosine", "intra_sentence_similarity", "mean_norm"):
            assert row[key] is not None and np.isfinite(row[key]), key


@pytest.mark.fast
@pytest.mark.parametrize("shape,levels", [((5, 7, 3), 3), ((1, 9, 4), 2), ((6, 1, 5), 4), ((4, 16, 8), 0)])
def test_max_with_position_is_max_over_positions_with_the_first_index(shape, levels):
    """The streamed max |x_d| and the flat position b*T + t holding it (massive activations) equal the
    naive max over the (B*T, d) rows, the first row on ties (integer levels make ties common)."""
    g = torch.Generator().manual_seed(sum(shape) + levels)
    ax = (torch.randint(0, levels, shape, generator=g) if levels else torch.rand(shape, generator=g)).double()
    top, at = extract._max_with_position(ax)
    flat = ax.reshape(-1, shape[-1]).numpy()
    np.testing.assert_array_equal(top.numpy(), flat.max(0))
    np.testing.assert_array_equal(at.numpy(), flat.argmax(0))  # numpy: the first occurrence
