"""Hostile or broken URLs: every page keeps working, says what it ignored, and never renders a
value from the URL as markdown (links, images), never shows a server path or a traceback."""

from __future__ import annotations

import pytest
from app_helpers import no_exception

PAGES = ["pages/layers.py", "pages/outliers.py", "pages/projection.py", "pages/compare.py"]


def _texts(at) -> list[str]:
    return [e.value for kind in ("warning", "error", "caption", "markdown", "info") for e in getattr(at, kind)]


@pytest.fixture(autouse=True)
def _plain_settings(monkeypatch):
    for k in ("ANISO_DATA_DIR", "ANISO_ALLOW_SERVER_PATHS", "ANISO_ALLOW_MODEL_FOLDERS", "ANISO_ALLOW_HUB",
              "ANISO_SHARED"):
        monkeypatch.delenv(k, raising=False)


@pytest.mark.parametrize("key,value", [
    ("tokens", "[Your session expired](https://evil.example/login)"),
    ("metric", "![x](https://evil.example/pixel.png)"),
    ("q", "x" * 500 + "[a](https://evil.example)"),
    ("models", "[a](b) c"),
    ("corpus", "[Login](https://evil.example/a.txt)"),
    ("seqlen", ":red[danger] :material/home:"),
    ("astat", "[Login](https://evil.example)"), ("alink", "![x](https://evil.example/p.png)"),
    ("ctab", ":red[danger]"), ("akeys", "[a](b)"),
])
def test_markdown_from_the_url_is_shown_as_text(app, key, value):
    at = app(**{key: value})
    no_exception(at)
    warned = [w.value for w in at.warning]
    assert warned, _texts(at)
    for t in _texts(at):
        assert "](" not in t and "![" not in t and ":red[" not in t, t  # escaped: \[ \] \( \!


@pytest.mark.parametrize("corpus", ["/etc/passwd", "/etc/hostname.txt", "~/.bashrc.txt", "../README.md",
                                    "/nonexistent/x.txt", "/dev/zero.txt"])
def test_server_files_are_not_corpora_from_the_url(app, corpus):
    at = app(corpus=corpus)
    no_exception(at)
    assert any("not available here" in w.value for w in at.warning)
    assert at.query_params.get("corpus") in (None, [], "")  # back to the default corpus
    assert not any("no such file" in t or "is a folder" in t for t in _texts(at))


@pytest.mark.parametrize("key,model", [("icorpus", "dinov2-vits14"), ("acorpus", "whisper-tiny-en")])
@pytest.mark.parametrize("shared", [False, True])
def test_image_and_audio_corpora_are_not_server_paths(app, monkeypatch, key, model, shared):
    """Issue 27 item 1: icorpus=/acorpus= went to any server folder; now the one path check, one answer."""
    if shared:
        monkeypatch.setenv("ANISO_SHARED", "1")
    answers = []
    for path in ("/usr", "/nonexistent-usr"):
        at = app(models=model, **{key: path})
        no_exception(at)
        answers.append([w.value.replace(path, "PATH") for w in at.warning if "not available here" in w.value])
        assert at.query_params.get(key) in (None, [], "")
    assert answers[0] and answers[0] == answers[1]


@pytest.mark.parametrize("page", PAGES)
def test_out_of_range_numbers_are_clamped(app, page):
    at = app(page=page, tokens=str(10**12), sample=str(10**9), seed="-5", batch="0", pp_abtt=str(10**9),
             pp_whiten="1", pp_k=str(10**9), layer=str(10**9), nn="100000")
    no_exception(at)
    assert sum("out of range" in w.value for w in at.warning) >= 5
    assert at.sidebar.number_input(key="w_tokens").value == 10_000_000


def test_shared_server_refuses_hub_ids_and_folders(app, monkeypatch):
    monkeypatch.setenv("ANISO_SHARED", "1")
    at = app(models=["minilm-l6", "gpt2"])
    no_exception(at)
    assert any("switched off" in w.value for w in at.warning)


def test_a_one_word_corpus_says_not_enough_data(app, cache_dir):
    from app_helpers import run_clicked

    from core.inputs.uploads import save_upload

    path = save_upload(b"hello\n", "one.txt", cache_dir)
    at = app(corpus=f"upload:{path.name}", sample="100")
    run_clicked(at)
    assert not at.exception, [e.stack_trace for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert any("Not enough data" in w.value and "one token" in w.value for w in at.warning)


@pytest.mark.parametrize("page", PAGES)
def test_a_two_word_corpus_renders_every_page(app, cache_dir, page):
    from app_helpers import run_clicked

    from core.inputs.uploads import save_upload

    path = save_upload(b"hello world\n", "two.txt", cache_dir)
    at = app(corpus=f"upload:{path.name}", sample="100")
    run_clicked(at)
    at.switch_page(page).run()
    assert not at.exception, [e.stack_trace for e in at.exception]
    assert not at.error, [e.value for e in at.error]


BAD_FILES = {  # name -> (bytes or None for a FIFO, what the page must say)
    "empty.txt": (b"", "empty"),
    "blank.md": (b"\n \n\t\n", "empty"),
    "binary.txt": (b"GIF89a\x00\x01" + bytes(range(256)), "not a text file"),
    "latin1.txt": ("café crème".encode("latin-1"), "not UTF-8"),
    "bad.jsonl": (b'{"text": "a"}\n{"text": oops\n', "line 2"),
    "pipe.txt": (None, "not a regular file"),
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_bad_corpus_files_in_the_ui(app, tmp_path, monkeypatch, name, fresh_worker):
    """The same bad files as the CLI's: one clear error on the page, the app keeps working."""
    import os

    from app_helpers import run_clicked

    content, expected = BAD_FILES[name]
    if content is None:
        os.mkfifo(tmp_path / name)
    else:
        (tmp_path / name).write_bytes(content)
    monkeypatch.setenv("ANISO_DATA_DIR", str(tmp_path))
    query = {"corpus": f"data:{name}"} | ({"col": "text"} if name.endswith(".jsonl") else {})
    at = app(**query)
    assert not at.exception, [e.stack_trace for e in at.exception]
    if not any(expected.lower() in e.value.lower() for e in at.error):
        run_clicked(at)  # text files are read when Run is pressed
    assert not at.exception, [e.stack_trace for e in at.exception]
    assert any(expected.lower() in e.value.lower() for e in at.error), [e.value for e in at.error]
    assert at.sidebar.button(key="run")  # still there: the app keeps working


def test_utf16_with_a_bom_works_in_the_ui(app, tmp_path, monkeypatch, fresh_worker):
    from app_helpers import run_clicked

    (tmp_path / "u16.txt").write_bytes("Grüße aus Köln, am Rhein.\n\nZweites Dokument hier.".encode("utf-16"))
    monkeypatch.setenv("ANISO_DATA_DIR", str(tmp_path))
    at = app(corpus="data:u16.txt", sample="100")
    run_clicked(at)
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("computed in" in c.value for c in at.caption)


MD_LINK, MD_IMG, HTML = "[Log in](https://evil.example/login)", "![x](https://evil.example/p.png)", "<img src=x onerror=alert(1)>"
HOSTILE_UPLOADS = {  # issue 27 item 3: user text in every error path of an upload, shared as a link
    "numbers.csv": (f'"{MD_IMG}","{HTML}"\n1,2\n3,4\n'.encode(), MD_IMG, "warning"),  # numbers-only warning
    "empty-column.csv": (f'"{MD_LINK}",b\n,x\n,y\n'.encode(), MD_LINK, "error"),  # column holds no text
    "html-column.csv": (f'"{HTML}",b\n,x\n,y\n'.encode(), HTML, "error"),
    "bad.jsonl": (f'{{"{MD_LINK}": "a"}}\n{{oops {HTML}\n'.encode(), None, "error"),  # decode error
}


def _rendered_safely(texts: list[str]) -> None:
    import re

    for t in texts:
        t = re.sub(r"(`+) .*? \1", "", t)  # code spans show their content as typed
        assert "](" not in t and "![" not in t, t  # markdown links and images escaped: \[ \] \( \!
        assert not re.search(r"(?<!\\)<(img|a|b|script)\b", t, re.I), t  # HTML shown as text


@pytest.mark.parametrize("name", list(HOSTILE_UPLOADS))
def test_markdown_and_html_from_an_upload_are_shown_as_text(app, cache_dir, name):
    from core.inputs.uploads import save_upload

    content, column, kind = HOSTILE_UPLOADS[name]
    path = save_upload(content, f"{MD_LINK} {HTML} {name}", cache_dir)
    at = app(corpus=f"upload:{path.name}", **({"col": column} if column else {}))
    no_exception(at)
    assert getattr(at, kind), _texts(at)  # the path under test was taken
    _rendered_safely(_texts(at))


def test_a_missing_upload_link_is_shown_as_text(app):
    at = app(corpus="upload:" + "c" * 64 + ".csv", col=MD_LINK)
    no_exception(at)
    _rendered_safely(_texts(at))


@pytest.mark.parametrize("page", ["pages/attention.py", "pages/compare.py"])
def test_attention_and_compare_keys_are_checked(app, page):
    """Issue 28 item 2: the new keys go through the same reading: a bad value is said and ignored, a number
    out of range clamped and said; never a traceback."""
    at = app(page=page, astat="nope", akeys="some", alink="max", win=str(10**12), block="0", head="x" * 40,
             ctab="../../etc")
    no_exception(at)
    warned = " ".join(w.value for w in at.warning)
    for key, name in (("astat", "attn_stat"), ("akeys", "attn_keys"), ("alink", "attn_summary"), ("win", ""),
                      ("block", ""), ("head", ""), ("ctab", "compare_section")):
        assert f"URL parameter {key}=" in warned or f"URL parameter {key} ignored" in warned, (key, name, warned)
    assert not at.error, [e.value for e in at.error]


# Issue 36 item 5: the keys of every page's view (Compare's A and B, the sections, the Papers page, the Train form,
# Dynamics, the drift experiment), each hostile: said on every page and ignored or clamped, never a traceback.
VIEW_KEYS = {
    "ca": MD_LINK, "cb": "../../etc/passwd", "ca_corpus": "/etc/passwd", "cb_corpus": ":red[danger]",
    "cattn": HTML, "ltab": MD_IMG, "otab": "x" * 500, "paper": MD_LINK, "pbudget": "1e99", "pruns": "/etc/passwd,minilm-l6",
    "tpreset": ":red[danger] :material/home:", "druns": f"../x,{MD_LINK}", "dtokens": "-1", "tcorpus": "/etc/passwd",
    "tcol": MD_IMG, "tarch": MD_LINK, "tlr": "inf", "tvocab": str(10**12), "twidth": "0", "dr_d": "NaN",
    "dr_alphas": "1e400", "dr_taus": "-1", "drift": HTML, "lab": "../../etc/passwd", "lstat": MD_LINK,
}
ALL_PAGES = ["pages/layers.py", "pages/outliers.py", "pages/chain.py", "pages/projection.py", "pages/compare.py",
             "pages/train.py", "pages/dynamics.py", "pages/attention.py", "pages/papers.py", "pages/lab.py"]


def test_hostile_view_keys_are_said_on_every_page_and_ignored(app):
    at = app(**VIEW_KEYS)
    for page in ALL_PAGES:
        at.switch_page(page).run()
        no_exception(at)
        warned = " ".join(w.value for w in at.warning).replace("\\", "")
        for key in VIEW_KEYS:
            assert f"URL parameter {key}=" in warned or f"URL parameter {key} ignored" in warned, (page, key)
        _rendered_safely(_texts(at))
        for t in _texts(at):
            assert ":red[" not in t, t
        for key, value in VIEW_KEYS.items():  # the link the page now shows drops every hostile value
            kept = at.query_params.get(key)
            assert value not in (kept if isinstance(kept, list) else [kept]), (page, key, kept)
    assert at.session_state["selection"].dyn_tokens == 500  # clamped, and said


# Issue 37 items 3-5 and 7: values of every kind for every key of every page, generated from the keys the
# selection reads (core.studies.selection) rather than listed by hand: no traceback, no server path, and a warning for
# every value that is not taken as it is (ignored or clamped), on every page, Train, Dynamics and Papers too.
def _every_key() -> list[str]:
    from core.studies import selection as S

    return [*S._KEYS, *S._PP_KEYS, *S.TRAIN_KEYS, *S.DRIFT_KEYS, "drift"]


HOSTILE_VALUES = {  # kind -> one value given to every key at once
    "over-long": "x" * 300,
    "over-long path": "a/" + "b" * 300,
    "existing path": "core/data",
    "missing path": "core/nodata",
    "absolute path": "/etc",
    "missing checkpoint": "trained/nosuchrun@step-1",
    "NUL": "a\x00b",
    "unicode": "é\u202eñ\u200b😀",
    "huge number": "9" * 40,
    "negative": "-1",
    "list": ["1", "x" * 300],
}


def _taken(sel, key: str, value) -> bool:
    """Whether the selection took the URL's value as it is (then nothing needs saying)."""
    from core.studies.selection import to_query_params

    def norm(v: str):
        try:
            return float(v)  # "1e+39" and "9" * 40 are one number
        except ValueError:
            return v

    kept = to_query_params(sel).get(key)
    given = value if isinstance(value, list) else [value]
    kept = {norm(v) for v in (kept if isinstance(kept, list) else [kept])} if kept is not None else set()
    return all(norm(v) in kept for v in given) and bool(kept)


@pytest.mark.parametrize("shared", [False, True], ids=["default", "shared"])
@pytest.mark.parametrize("kind", list(HOSTILE_VALUES))
def test_every_key_of_every_page_takes_every_kind_of_value(app, monkeypatch, kind, shared):
    import os

    from app_helpers import ROOT

    if shared:
        monkeypatch.setenv("ANISO_SHARED", "1")
    monkeypatch.chdir(ROOT)  # "core/data" exists relative to the server's working folder, "core/nodata" does not
    value = HOSTILE_VALUES[kind]
    at = app(models=value if isinstance(value, list) else [value],  # (app() takes the models apart)
             **{key: value for key in _every_key() if key != "models"})
    for page in ALL_PAGES:
        at.switch_page(page).run()
        assert not at.exception, (page, [e.stack_trace for e in at.exception])
        texts = _texts(at)
        for t in texts:
            assert str(ROOT) not in t and os.sep + "site-packages" not in t, (page, t)  # no server path
        warned = " ".join(w.value for w in at.warning).replace("\\", "")
        sel = at.session_state["selection"]
        for key in _every_key():
            if _taken(sel, key, value):
                continue
            assert f"URL parameter {key}=" in warned or f"URL parameter {key} ignored" in warned, (page, kind, key)


@pytest.mark.parametrize("shared", [False, True], ids=["default", "shared"])
def test_models_answer_the_same_whether_a_folder_exists_or_not(app, monkeypatch, shared):
    """Issue 37 item 3: models=core/data (a folder of the server's working directory) and models=core/nodata get
    the same answer, in both modes; an over-long value is refused on every page without a traceback (item 4)."""
    from app_helpers import ROOT

    if shared:
        monkeypatch.setenv("ANISO_SHARED", "1")
    monkeypatch.chdir(ROOT)
    answers = []
    for value in ("core/data", "core/nodata"):
        at = app(models=["minilm-l6", value])
        no_exception(at)
        answers.append((sorted(w.value.replace(value, "VALUE") for w in at.warning),
                        sorted(c.value.replace(value, "VALUE") for c in at.sidebar.caption
                               if "VALUE" in c.value.replace(value, "VALUE")),
                        value in at.session_state["selection"].models))
    assert answers[0] == answers[1], answers
    assert answers[0][2] is (not shared)  # a hub id where the hub is allowed, refused on a shared server
    at = app(models=["minilm-l6", "m" * 300])
    for page in ALL_PAGES:
        at.switch_page(page).run()
        no_exception(at)
        assert any("URL parameter models" in w.value for w in at.warning), page


def test_a_missing_trained_checkpoint_in_the_url_is_said_and_dropped(app):
    """Issue 37 item 5: trained/nosuchrun@step-1 ended in a traceback on Layers and Papers."""
    at = app(models=["minilm-l6", "trained/nosuchrun@step-1"])
    for page in ("pages/layers.py", "pages/papers.py"):
        at.switch_page(page).run()
        no_exception(at)
        assert any("no such trained checkpoint" in w.value for w in at.warning), page
    assert at.session_state["selection"].models == ("minilm-l6",)
