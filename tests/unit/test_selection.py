"""The selection and its URL round trip (core/selection.py)."""

import pytest

from core.errors import InputError
from core.postprocess import PostProcess
from core.selection import DEFAULT, MAX_MODELS, METRICS, Selection, from_query_params, to_query_params
from core.spec import RunSpec


def _as_url(params: dict) -> dict:
    """What st.query_params.get_all gives back: every value a list of strings."""
    return {k: (v if isinstance(v, list) else [v]) for k, v in params.items()}


def test_default_writes_nothing_and_reads_back():
    assert to_query_params(DEFAULT) == {}
    sel, problems = from_query_params({})
    assert sel == DEFAULT and problems == []


def test_round_trip_of_every_field():
    sel = Selection(models=("minilm-l6", "untrained-bert-base"), corpus="/tmp/x/abc.csv", text_column="body",
                    max_tokens=2000, max_seq_len=128, batch_size=4, device="cpu", dtype="float32",
                    special_tokens="include", sample=500, seed=7, focus="untrained-bert-base",
                    metric="isoscore", x_axis="depth", layer=3, depth=0.25, reference=False, dim=5,
                    post=PostProcess(center=True, zscore=True, abtt=2, whiten=True, whiten_k=10, remove=(9, 3)),
                    drop_outliers=True, proj_method="umap", proj_color="search", n_neighbors=30, min_dist=0.3,
                    search="the")
    params = to_query_params(sel)
    assert params["models"] == ["minilm-l6", "untrained-bert-base"]
    assert params["pp_drop"] == "3,9" and params["ref"] == "0"
    back, problems = from_query_params(_as_url(params))
    assert problems == []
    assert back == sel


def test_models_accept_a_comma_list_and_drop_duplicates():
    sel, problems = from_query_params({"models": ["minilm-l6,untrained-gpt2", "minilm-l6"]})
    assert problems == [] and sel.models == ("minilm-l6", "untrained-gpt2")


@pytest.mark.parametrize("key,value,field", [
    ("tokens", "many", "max_tokens"), ("metric", "nope", "metric"), ("device", "tpu", "device"),
    ("layer", "-2", "layer"), ("depth", "1.5", "depth"), ("x", "time", "x_axis"), ("pp_abtt", "x", "post"),
])
def test_a_bad_value_is_reported_and_falls_back_to_its_default(key, value, field):
    sel, problems = from_query_params({key: [value], "sample": ["700"]})
    assert getattr(sel, field) == getattr(DEFAULT, field)
    assert sel.sample == 700  # the other, good values are kept
    assert len(problems) == 1 and (key in problems[0] or field in problems[0])


def test_too_many_models_is_a_problem_not_a_crash():
    sel, problems = from_query_params({"models": [f"m{i}" for i in range(MAX_MODELS + 1)]})
    assert sel.models == DEFAULT.models and problems


def test_whiten_k_without_whiten_is_rejected_from_the_url():
    sel, problems = from_query_params({"pp_k": ["5"]})
    assert sel.post == PostProcess() and problems


def test_validation_messages():
    with pytest.raises(InputError, match="at least one model"):
        Selection(models=())
    with pytest.raises(InputError, match="max_tokens"):
        Selection(max_tokens=0)
    with pytest.raises(InputError, match="Unknown metric"):
        Selection(metric="cosine")
    assert Selection(models=("a", "b"), focus="c").focus is None


def test_specs_and_layers():
    sel = Selection(models=("minilm-l6", "untrained-gpt2"), max_tokens=1234, sample=99, seed=3)
    specs = sel.specs()
    assert [s.model for s in specs] == ["minilm-l6", "untrained-gpt2", "untrained-gpt2@seed1", "untrained-gpt2@seed2"]
    assert specs[0] == RunSpec(model="minilm-l6", max_tokens=1234, sample=99, seed=3)
    assert sel.layer_for(7) == 3 and sel.layer_for(13) == 6  # middle layer by default
    assert sel.replace(layer=10, layer_by="index").layer_for(7) == 6  # clamped to the model's depth
    assert sel.focus_model == "minilm-l6"


def test_every_metric_has_a_label_and_unit():
    assert all(len(v) == 2 and all(v) for v in METRICS.values())


def test_layer_by_depth_or_index_and_clamping_is_said():
    sel = Selection(layer_by="depth", depth=0.5)
    assert sel.layer_for(7) == 3 and sel.layer_for(13) == 6 and sel.layer_for(31) == 15
    idx = Selection(layer_by="index", layer=9)
    assert idx.layer_for(13) == 9 and idx.layer_for(7) == 6
    assert idx.layer_clamped(7) and not idx.layer_clamped(13)
    old, problems = from_query_params({"layer": ["4"]})  # a link from before layer_by: an index
    assert problems == [] and old.layer_by == "index" and old.layer_for(13) == 4
    back, _ = from_query_params(_as_url(to_query_params(Selection(layer=2, layer_by="depth", depth=0.3))))
    assert back.layer_by == "depth" and back.layer_for(11) == 3


def test_x_axis_is_relative_depth_when_depths_differ_or_published_curves_are_shown():
    assert Selection(reference=False).x_axis_for([7]) == "layer"
    assert Selection(reference=False).x_axis_for([7, 13]) == "depth"
    assert Selection(reference=True).x_axis_for([7]) == "depth"
    assert Selection(reference=True, x_axis="layer").x_axis_for([7, 13]) == "layer"  # an explicit choice stays


def test_untrained_controls_run_with_several_seeds():
    from core.models import control_seed, control_variant, describe_model, model_fingerprint

    sel = Selection(models=("minilm-l6", "untrained-gpt2"))
    assert sel.control_seeds == 3 and sel.control_specs("minilm-l6") == []
    extra = sel.control_specs("untrained-gpt2", "wiki-fr")
    assert [s.model for s in extra] == ["untrained-gpt2@seed1", "untrained-gpt2@seed2"]
    assert all(s.corpus == "wiki-fr" for s in extra)
    assert len(sel.specs()) == 2 + 2 and len(Selection(models=("untrained-gpt2",), control_seeds=1).specs()) == 1
    assert control_seed("untrained-gpt2@seed2") == ("untrained-gpt2", 2) and control_seed("minilm-l6@seed2")[1] == 0
    assert control_variant("untrained-gpt2", 0) == "untrained-gpt2"
    assert describe_model("untrained-gpt2@seed1")["label"].endswith("(seed +1)")
    fps = {model_fingerprint(control_variant("untrained-gpt2", k)) for k in range(3)}
    assert len(fps) == 3  # each seed its own cache entry
    with pytest.raises(InputError, match="control_seeds"):
        Selection(control_seeds=9)
