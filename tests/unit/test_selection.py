"""The selection and its URL round trip (core/studies/selection.py)."""

import shutil
import tempfile
from pathlib import Path

import pytest

from core.base.errors import InputError
from core.base.spec import RunSpec
from core.stats.postprocess import PostProcess
from core.studies.drift import DriftSpec
from core.studies.selection import DEFAULT, MAX_MODELS, METRICS, Selection, from_query_params, to_query_params
from core.studies.train_spec import TrainSpec


def _as_url(params: dict) -> dict:
    """What st.query_params.get_all gives back: every value a list of strings."""
    return {k: (v if isinstance(v, list) else [v]) for k, v in params.items()}


def test_default_writes_nothing_and_reads_back():
    assert to_query_params(DEFAULT) == {}
    sel, problems = from_query_params({})
    assert sel == DEFAULT and problems == []


def test_round_trip_of_every_field(tmp_path, monkeypatch):
    monkeypatch.setenv("ANISO_DATA_DIR", str(tmp_path))
    sel = Selection(models=("minilm-l6", "untrained-bert-base"), corpus="x/abc.csv", text_column="body",
                    max_tokens=2000, max_seq_len=128, batch_size=4, device="cpu", dtype="float32",
                    special_tokens="include", sample=500, seed=7, focus="untrained-bert-base",
                    metric="isoscore", x_axis="depth", layer=3, depth=0.25, reference=True, dim=5,
                    post=PostProcess(center=True, zscore=True, abtt=2, whiten=True, whiten_k=10, remove=(9, 3)),
                    drop_outliers=True, proj_method="umap", proj_color="search", n_neighbors=30, min_dist=0.3,
                    search="the", outlier_set="layer", attn_stat="q_drift", attn_keys="included",
                    attn_summary="strongest", attn_window=17, attn_block=3, attn_head=2, compare_section="projections",
                    more_corpora=("wiki-fr",), compare_a="untrained-bert-base", compare_a_corpus="wiki-fr",
                    compare_b="minilm-l6", compare_attn_stat="mean_term_share", layers_section="numbers",
                    outliers_section="across", drift=DriftSpec(d=32, heads=2, alphas=(0.0, 1.5), taus=(2.0,), seed=4),
                    paper="ethayarajh", paper_tokens=1000, paper_runs=("minilm-l6",),
                    train=TrainSpec(corpus="wiki-fr", arch="llama", tokenizer="bytes", vocab_size=1024, n_layers=3,
                                    d_model=96, n_heads=6, steps=50, batch_size=8, seq_len=32, lr=3e-4, seed=5,
                                    optimizer="coupled-adam"),
                    train_preset="natural-vs-uniform", dyn_runs=("run-a", "run-b"), dyn_tokens=5000)
    params = to_query_params(sel)
    assert params["models"] == ["minilm-l6", "untrained-bert-base"]
    assert params["pp_drop"] == "3,9" and params["ref"] == "1"
    assert params["ca"] == "untrained-bert-base" and params["ca_corpus"] == "wiki-fr" and params["cb"] == "minilm-l6"
    assert params["drift"] == "1" and params["dr_alphas"] == "0,1.5" and params["tlr"] == "0.0003"
    assert params["pruns"] == "minilm-l6" and params["druns"] == "run-a,run-b"
    for name in ("compare_a", "compare_a_corpus", "compare_b", "compare_attn_stat", "layers_section", "outliers_section",
                 "drift", "paper", "paper_tokens", "paper_runs", "train", "train_preset", "dyn_runs", "dyn_tokens"):
        assert getattr(sel, name) != getattr(DEFAULT, name), name  # every new field is tried away from its default
    assert params["corpus"] == "data:x/abc.csv"  # the server's path of the data directory stays out of the URL
    assert sel.corpus == str(tmp_path.resolve() / "x" / "abc.csv")
    back, problems = from_query_params(_as_url(params))
    assert problems == []
    assert back == sel


def test_models_accept_a_comma_list_and_drop_duplicates():
    sel, problems = from_query_params({"models": ["minilm-l6,untrained-gpt2", "minilm-l6"]})
    assert problems == [] and sel.models == ("minilm-l6", "untrained-gpt2")


@pytest.mark.parametrize("key,value,field", [
    ("tokens", "many", "max_tokens"), ("metric", "nope", "metric"), ("device", "tpu", "device"),
    ("layer", "x", "layer"), ("depth", "1.5", "depth"), ("x", "time", "x_axis"), ("pp_abtt", "x", "post"),
    ("oset", "all", "outlier_set"), ("astat", "nope", "attn_stat"), ("akeys", "some", "attn_keys"),
    ("alink", "max", "attn_summary"), ("win", "first", "attn_window"), ("block", "1.5", "attn_block"),
    ("head", "", "attn_head"), ("ctab", "Attention", "compare_section"), ("odims", "8, x", "typed_dims"),
    ("odims", ",".join(map(str, range(65))), "typed_dims"), ("odims", "70000", "typed_dims"),
    ("color", "meta:", "proj_color"), ("color", "meta:a\x00b", "proj_color"), ("color", "topic", "proj_color"),
    ("ca", "gpt2", "compare_a"), ("cb", "[x](y)", "compare_b"), ("ca_corpus", "wiki-fr", "compare_a_corpus"),
    ("cattn", "nope", "compare_attn_stat"), ("ltab", "Curves", "layers_section"), ("otab", "../x", "outliers_section"),
    ("focus", "untrained-gpt2", "focus"), ("paper", "godey2", "paper"), ("pbudget", "5000", "paper_tokens"),
    ("pbudget", "1e3", "paper_tokens"), ("pruns", "gpt2", "paper_runs"), ("tpreset", "x", "train_preset"),
    ("druns", "../etc/passwd", "dyn_runs"), ("druns", ",".join(f"r{i}" for i in range(5)), "dyn_runs"),
    ("dtokens", "lots", "dyn_tokens"), ("tarch", "rnn", "train"), ("ttok", "words", "train"),
    ("tcorpus", "/etc/passwd", "train"), ("tcorpus", "upload:../x.csv", "train"), ("tlr", "nan", "train"),
    ("tlr", "fast", "train"), ("tlayers", "2.5", "train"), ("dr_d", "x", "drift"), ("dr_alphas", "1,two", "drift"),
    ("dr_taus", ",".join(["1"] * 33), "drift"), ("drift", "maybe", "drift"),
])
def test_a_bad_value_is_reported_and_falls_back_to_its_default(key, value, field):
    sel, problems = from_query_params({key: [value], "sample": ["700"]})
    if field == "drift" and key != "drift":  # a drift key shows the experiment: with that value at its default
        assert sel.drift == DriftSpec(), sel.drift
    elif field == "drift":
        assert sel.drift == DriftSpec()  # drift=maybe is said, and the experiment shown (the link asked for it)
    else:
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


def test_the_published_overlay_is_off_by_default_and_moves_no_axis_without_a_curve():
    """Issue 36 item 7: the Ethayarajh overlay was on by default and put every metric on relative depth."""
    from core.stats.reference import reference_curves

    assert DEFAULT.reference is False and to_query_params(DEFAULT.replace(reference=True)) == {"ref": "1"}
    with_curve = {m for m in METRICS if reference_curves(m)}
    assert with_curve == {"mean_cosine", "intra_sentence_similarity"}  # what Ethayarajh 2019 published here
    for m in METRICS:
        on = Selection(reference=True, metric=m)
        assert on.x_axis_for([7]) == ("depth" if m in with_curve else "layer"), m
        assert on.overlays_published == (m in with_curve)


def test_untrained_controls_run_with_several_seeds():
    from core.inputs.models import control_seed, control_variant, describe_model, model_fingerprint

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


# ----------------------------------------------------------------------------- hostile URLs
@pytest.fixture
def no_settings(monkeypatch):
    for k in ("ANISO_DATA_DIR", "ANISO_ALLOW_SERVER_PATHS", "ANISO_ALLOW_MODEL_FOLDERS", "ANISO_ALLOW_HUB",
              "ANISO_SHARED"):
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


@pytest.mark.parametrize("corpus", ["/etc/passwd.txt", "/etc/hostname", "~/notes.txt", "../../etc/x.csv",
                                    "README.md", "core", "/nonexistent/secret.txt", "/dev/stdin"])
def test_the_url_names_no_server_file(no_settings, corpus):
    sel, problems = from_query_params({"corpus": [corpus]})
    assert sel.corpus == DEFAULT.corpus
    assert len(problems) == 1 and "not available here" in problems[0]


@pytest.fixture
def short_tmp():
    """A folder with a short path: problems show a name cut at 80 characters, and pytest's own tmp_path
    (longer under pytest-xdist: .../popen-gw1/<test name>0/) would be cut inside the compared part."""
    d = Path(tempfile.mkdtemp(prefix="sel", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_the_refusal_does_not_tell_whether_a_path_exists(no_settings, short_tmp):
    tmp_path = short_tmp
    (tmp_path / "there.txt").write_text("hello")
    msgs = []
    for p in (tmp_path / "there.txt", tmp_path / "missing.txt", tmp_path):
        _, problems = from_query_params({"corpus": [str(p)]})
        msgs.append(problems[0].replace(str(p), "P").replace(_q(p), "P"))
    assert len(set(m.replace("there.txt", "X").replace("missing.txt", "X") for m in msgs[:2])) == 1
    assert "folder" not in msgs[2] and "no such" not in " ".join(msgs)


def _q(p):
    return repr(str(p))


def test_data_directory_files_and_escapes(no_settings, tmp_path):
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "sub" / "a.txt").write_text("x")
    (tmp_path / "outside.txt").write_text("secret")
    (data / "link.txt").symlink_to(tmp_path / "outside.txt")
    no_settings.setenv("ANISO_DATA_DIR", str(data))
    ok, problems = from_query_params({"corpus": ["data:sub/a.txt"]})
    assert problems == [] and ok.corpus == str(data.resolve() / "sub" / "a.txt")
    assert to_query_params(ok)["corpus"] == "data:sub/a.txt"
    for bad in ("data:../outside.txt", "data:link.txt", str(tmp_path / "outside.txt"), "data:/etc/passwd.txt"):
        sel, problems = from_query_params({"corpus": [bad]})
        assert sel.corpus == DEFAULT.corpus and "not available here" in problems[0], bad


def test_server_paths_only_when_allowed(no_settings, tmp_path):
    f = tmp_path / "c.txt"
    with pytest.raises(InputError, match="not available here"):
        Selection(corpus=str(f))
    no_settings.setenv("ANISO_ALLOW_SERVER_PATHS", "1")
    assert Selection(corpus=str(f)).corpus == str(f.resolve())


def test_upload_ids_only(no_settings):
    from core.inputs.access import check_corpus

    good = "upload:" + "a" * 64 + ".csv"
    assert check_corpus(good) == good
    for bad in ("upload:../../etc/passwd", "upload:" + "a" * 64 + ".sh", "upload:/tmp/x.txt"):
        with pytest.raises(InputError, match="upload"):
            Selection(corpus=bad)


def test_model_identifiers(no_settings, tmp_path):
    from core.inputs.access import check_model

    assert check_model("minilm-l6") == "minilm-l6"
    assert check_model("org/name@v1.0") == "org/name@v1.0"
    for bad in ("/etc", "~/models/x", "./core", "a/b/c", "data:m"):
        with pytest.raises(InputError, match="not available here"):
            check_model(bad)
    with pytest.raises(InputError, match="valid hub identifier"):
        check_model("[x](evil) name")
    (tmp_path / "m").mkdir()
    (tmp_path / "org" / "name").mkdir(parents=True)
    no_settings.chdir(tmp_path)  # "org/name" is a folder here: it must not load as one from the URL, and the
    # answer must not say that it exists (issue 37 item 3): a hub id like any other, and never a local folder after
    from core.inputs.models import is_hub_model, is_local_folder

    assert check_model("org/name") == "org/name" and check_model("org/nothing") == "org/nothing"
    assert is_hub_model("org/name") and not is_local_folder("org/name")
    no_settings.setenv("ANISO_DATA_DIR", str(tmp_path))
    assert check_model("data:m") == str(tmp_path.resolve() / "m")
    no_settings.setenv("ANISO_SHARED", "1")  # a shared server: built-ins only
    for bad in ("data:m", "org/name"):
        with pytest.raises(InputError, match="switched off"):
            check_model(bad)
    sel, problems = from_query_params({"models": ["minilm-l6", "gpt2"]})
    assert sel.models == DEFAULT.models and "switched off" in problems[0]


@pytest.mark.parametrize("key,value,field,want", [
    ("tokens", str(10**12), "max_tokens", 10_000_000), ("sample", str(10**9), "sample", 50_000),
    ("sample", "0", "sample", 1), ("seed", "-1", "seed", 0), ("batch", "100000", "batch_size", 512),
    ("nn", "1", "n_neighbors", 2), ("layer", "-2", "layer", 0), ("seqlen", "99999999", "max_seq_len", 8192),
    ("block", "0", "attn_block", 1), ("head", str(10**9), "attn_head", 100_000), ("win", "-3", "attn_window", 0),
])
def test_out_of_range_numbers_are_clamped_with_a_warning(no_settings, key, value, field, want):
    sel, problems = from_query_params({key: [value]})
    assert getattr(sel, field) == want
    assert len(problems) == 1 and "out of range" in problems[0]


def test_post_processing_numbers_are_bounded(no_settings):
    sel, problems = from_query_params({"pp_abtt": [str(10**12)]})
    assert sel.post.abtt == 65_536 and "out of range" in problems[0]
    sel, problems = from_query_params({"pp_drop": ["1," * 3000]})
    assert sel.post.remove == () and problems


def test_problems_never_carry_raw_newlines_or_huge_values(no_settings):
    _, problems = from_query_params({"metric": ["x\n\n# big\u202e" + "y" * 5000]})
    assert len(problems) == 1 and "\n" not in problems[0] and len(problems[0]) < 600
    assert "<U+202E>" in problems[0]


def test_every_metric_of_the_picker_has_one_definition_with_its_one_line_form():
    """core.stats.registry is the only copy of the metric texts: each metric the app offers has its hover line,
    formula, reading and paper there, and the hover line states what the docs' heading names."""
    from core.stats.registry import DEFINITIONS, docs_section, short
    from core.studies.selection import METRICS

    assert set(METRICS) <= set(DEFINITIONS), set(METRICS) - set(DEFINITIONS)
    for key, d in DEFINITIONS.items():
        assert d.short and d.formula and d.high and d.low and d.paper, key
        assert short(key) == d.short and "\n" not in d.short
        assert docs_section(key), f"docs/metrics.md has no section naming `{key}`"
    assert short("no-such-metric") == ""


@pytest.mark.parametrize("shared", [False, True])
def test_every_url_key_refuses_outside_paths_with_one_answer(no_settings, short_tmp, shared):
    """Issue 27 item 1: every URL key of Selection that could name a file or folder goes through the
    one path check (icorpus= and acorpus= did not), and the answer is the same whether the path exists."""
    tmp_path = short_tmp
    from core.studies.selection import _KEYS, _PP_KEYS, TEXT_FIELDS

    data = tmp_path / "data"
    data.mkdir()
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    for name in ("a.png", "a.wav", "a.zip", "a.txt", "sub/config.json"):
        (outside / name).write_bytes(b"x")
    no_settings.setenv("ANISO_DATA_DIR", str(data))
    if shared:
        no_settings.setenv("ANISO_SHARED", "1")
    existing = [str(outside), str(outside / "a.png"), str(outside / "a.wav"), str(outside / "a.zip"),
                str(outside / "a.txt"), str(outside / "sub"), "/usr", "data:../outside"]
    tried = 0
    from core.studies.selection import DRIFT_KEYS, TRAIN_KEYS

    spec_keys = [(k, None) for k in list(TRAIN_KEYS) + list(DRIFT_KEYS) if k != "tcol"]  # tcol: a column name
    for key, name in list(_KEYS.items()) + [(k, None) for k in _PP_KEYS] + spec_keys:
        if name in TEXT_FIELDS:
            continue
        for there in existing:
            missing = there.replace("outside", "nowhere").replace("/usr", "/nousr")
            answers = []
            for value in (there, missing):
                sel, problems = from_query_params({key: [value]})
                for f in ("models", "corpus", "image_corpus", "audio_corpus", "more_corpora", "focus",
                          "focus_corpus", "metric", "compare_a", "compare_b", "paper_runs", "dyn_runs"):
                    assert getattr(sel, f) == getattr(DEFAULT, f), (key, value, f)
                answers.append([p.replace(value, "PATH") for p in problems])
            assert answers[0] == answers[1], (key, answers)
            tried += 1
        if key == "tcorpus":
            assert sel.train.corpus == "wiki-en" and problems, problems  # the form keeps its default corpus
    assert tried >= 8 * 25
    for f in ("image_corpus", "audio_corpus", "corpus"):
        for p in (str(outside), str(outside / "a.zip"), "/usr"):
            with pytest.raises(InputError, match="not available here"):
                Selection(**{f: p})


def test_modal_corpora_from_the_data_directory(no_settings, tmp_path):
    (tmp_path / "imgs").mkdir()
    no_settings.setenv("ANISO_DATA_DIR", str(tmp_path))
    sel = Selection(image_corpus="data:imgs", audio_corpus="speech-synthetic")
    assert sel.image_corpus == str(tmp_path.resolve() / "imgs")
    zip_id = "upload:" + "b" * 64 + ".zip"
    assert Selection(image_corpus=zip_id).image_corpus == zip_id
    for bad in ("speech-human", "upload:" + "b" * 64 + ".csv", "upload:../x.zip"):
        with pytest.raises(InputError):
            Selection(image_corpus=bad)


def test_the_url_of_a_page_leaves_out_the_keys_of_the_others():
    """Issue 28 item 2: Outliers' dim=308&ablate=1 stays on Outliers; each page's link carries its own keys."""
    from core.studies.selection import PAGE_KEYS

    sel = DEFAULT.replace(dim=308, ablation=True, attn_stat="q_drift", compare_section="outliers", metric="isoscore",
                          models=("minilm-l6", "untrained-minilm-l6"), compare_a="untrained-minilm-l6",
                          layers_section="lens", outliers_section="across", drift=DriftSpec(d=32), paper="puccetti",
                          train=TrainSpec(steps=10), dyn_runs=("r",), chain_ablation=True)
    every = set(to_query_params(sel))
    assert {"dim", "ablate", "astat", "ctab", "metric", "ca", "ltab", "otab", "drift", "dr_d", "paper", "tsteps",
            "druns", "cabl"} <= every  # no page: everything
    assert {k for keys in PAGE_KEYS.values() for k in keys} & every == every - {"models", "metric"}
    for page in ("layers", "outliers", "attention", "compare", "projection", "chain", "papers", "train", "dynamics"):
        got = to_query_params(sel, page)
        assert got["metric"] == "isoscore"  # shared keys stay
        for other, keys in PAGE_KEYS.items():
            assert all((k in got) == (other == page) for k in keys if k in to_query_params(sel)), (page, other)


def test_the_attention_choices_are_the_views():
    from core.studies.selection import ATTN_CURVE_STATS, ATTN_STATS, ATTN_SUMMARIES
    from core.views import attention as AV

    assert ATTN_STATS == AV.HEATMAP_STATS and ATTN_SUMMARIES == tuple(AV.LINK_SUMMARIES)
    assert ATTN_CURVE_STATS == AV.CURVE_STATS


def test_typed_dims_and_a_metadata_colour_round_trip():
    """Issue 28 items 4 and 12: oset=typed&odims=308,8 and color=meta:<column> are links like the others."""
    from core.studies.selection import typed_dims_for

    sel, problems = from_query_params({"oset": ["typed"], "odims": ["308, 8 8"], "color": ["meta:topic"]})
    assert problems == [] and sel.typed_dims == (8, 308) and sel.proj_color == "meta:topic"
    assert to_query_params(sel)["odims"] == "8,308"
    assert from_query_params(_as_url(to_query_params(sel)))[0] == sel
    assert typed_dims_for((8, 308), 576) == [8, 308]
    with pytest.raises(InputError, match=r"256 dims \(0 to 255\): 308 is out of range"):
        typed_dims_for((8, 308), 256)
    with pytest.raises(InputError, match="At most 2 dims"):
        typed_dims_for((0, 1, 2), 4)
    with pytest.raises(InputError, match="Type one or more"):
        typed_dims_for((), 384)


def test_a_url_with_an_unknown_optimizer_is_a_problem_not_a_crash():
    sel, problems = from_query_params(_as_url({"topt": "adam-9000", "tsteps": "10"}))
    assert sel.train.optimizer == "adamw" and problems
    sel, problems = from_query_params(_as_url({"topt": "sgd"}))
    assert sel.train.optimizer == "sgd" and problems == []
