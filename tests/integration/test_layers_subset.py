"""--layers: statistics for a subset of layers equal the full run's at those layers, at a fraction of the memory."""

import pytest

from core.base.errors import InputError
from core.base.spec import RunSpec
from core.compute.pipeline import _spec_key, analyze, get_stats, run_key

SAMPLE_KEYS = ("n_sample", "sample_mean_cosine", "pc1_variance_ratio", "effective_rank", "isoscore",
               "partition_isotropy")


@pytest.fixture(scope="module")
def runs(tiny_llama_dir, varied_txt, tmp_path_factory):
    cache = tmp_path_factory.mktemp("layers")
    full = RunSpec(model=str(tiny_llama_dir), corpus=str(varied_txt), max_seq_len=24, batch_size=4, sample=60,
                   device="cpu")
    sub = full.replace(layers=[2, 0])
    return cache, full, sub, analyze(full, cache_dir=cache), analyze(sub, cache_dir=cache)


def test_kept_layers_equal_the_full_run_at_those_layers(runs):
    _, _, sub, full_res, sub_res = runs
    assert sub.layers == (0, 2)  # sorted, unique
    assert [r["layer"] for r in sub_res["layers"]] == [0, 2]
    assert sub_res["manifest"]["layers"]["kept"] == [0, 2] and sub_res["manifest"]["layers"]["model_layers"] == 3
    by_layer = {r["layer"]: r for r in full_res["layers"]}
    for row in sub_res["layers"]:
        ref = by_layer[row["layer"]]
        for k in ("mean_cosine", "cross_sequence_cosine", "intra_sentence_similarity", "self_similarity", "mean_norm",
                  "mean_cosine_ci", "outlier_dims", "cosine_contribution", *SAMPLE_KEYS):
            assert row[k] == ref[k], (row["layer"], k)
    assert {m["layer"] for m in sub_res["outliers"]["massive_activations"]} == {0, 2}
    assert [l["layer"] for l in sub_res["frequency"]["layers"]] == [0, 2]
    assert all(a["layer"] in (0, 2) for a in sub_res["outliers"]["agreement"])


def test_memory_scales_with_the_layers_kept_and_the_key_includes_them(runs):
    cache, full, sub, _, _ = runs
    a, b = get_stats(full, cache).arrays, get_stats(sub, cache).arrays
    for k in ("sample", "group_sum_u", "id_sum_u", "sum_abs"):
        assert b[k].nbytes * 3 == a[k].nbytes * 2, k  # 2 of 3 layers
    assert run_key(sub, cache) != run_key(full, cache)
    assert "layers" not in _spec_key(full, cache)[1]["spec"]  # all layers: the key runs had before the option


def test_a_layer_beyond_the_model_is_refused(runs):
    cache, full, _, _, _ = runs
    with pytest.raises(InputError, match=r"--layers 7 is beyond .* \(0\.\.2; 0 = embeddings\)"):
        get_stats(full.replace(layers=(1, 7)), cache)
    with pytest.raises(InputError, match="non-negative"):
        full.replace(layers=(-1,))


def test_the_dashboard_link_of_a_results_json_opens_the_same_run(runs, tmp_path, monkeypatch):
    import os
    from urllib.parse import parse_qs, urlparse

    from core.entry.cli import dashboard_link
    from core.studies.selection import from_query_params

    cache, full, sub, full_res, sub_res = runs
    # The dashboard names files and model folders under its data directory (ANISO_DATA_DIR) only.
    monkeypatch.setenv("ANISO_DATA_DIR", os.path.commonpath([full.model, full.corpus]))
    url = dashboard_link(full_res, port=8577)
    assert "data%3A" in url and str(full.corpus) not in url
    assert url.startswith("http://127.0.0.1:8577/?")
    sel, problems = from_query_params(parse_qs(urlparse(url).query))
    assert problems == []
    assert run_key(sel.spec(sel.models[0]), cache) == full_res["manifest"]["cache_key"]
    with pytest.raises(InputError, match="--layers"):
        dashboard_link(sub_res)
