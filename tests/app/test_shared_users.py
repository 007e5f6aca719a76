"""Users kept apart on a shared server (ANISO_SHARED=1, issue 27 item 4): two browser sessions share
the computed results, but a job can be cancelled only by the session that started it. No worker
runs here, so the job stays queued while both sessions look at it."""

from __future__ import annotations

import pytest
from app_helpers import APP, SMALL, TIMEOUT, no_exception

from core.base.cache import get_store
from core.base.errors import InputError
from core.entry import jobs


def _session(token: str):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for k, v in {**SMALL, "tokens": "3100"}.items():
        at.query_params[k] = v
    at.session_state["_browser_token"] = token  # what ui.state.browser_token would draw at random
    at.run()
    return at


def test_only_the_session_that_started_a_job_can_cancel_it(tmp_path, monkeypatch):
    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ANISO_SHARED", "1")
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")
    alice, bob = _session("alice-token"), _session("bob-token")
    alice.sidebar.button(key="run").click().run()
    no_exception(alice)
    [job] = [j for j in jobs.list_jobs() if j.active]
    assert job.owner == "alice-token"
    bob.run()
    no_exception(bob)
    assert bob.button(key=f"cancel_{job.id}").disabled  # bob sees it running, without a working Cancel
    assert "another user" in bob.button(key=f"cancel_{job.id}").help
    with pytest.raises(InputError, match="another user"):
        jobs.cancel(job.id, owner="bob-token")
    assert jobs.status(job.id).status == jobs.QUEUED
    assert not alice.button(key=f"cancel_{job.id}").disabled
    alice.button(key=f"cancel_{job.id}").click().run()
    no_exception(alice)
    assert jobs.status(job.id).status == jobs.CANCELLED


def test_without_a_shared_server_anyone_may_cancel(tmp_path, monkeypatch):
    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ANISO_SHARED", raising=False)
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")
    jid = jobs.submit("analyze", {"spec": {"model": "minilm-l6", "corpus": "wiki-en", "max_tokens": 3300}},
                      owner="alice-token")
    assert jobs.cancel(jid, owner="bob-token").status == jobs.CANCELLED
    monkeypatch.setenv("ANISO_SHARED", "1")
    jobs.retry(jid, owner="alice-token")
    assert jobs.cancel(jid).cancel_requested  # the command line always may


def test_clear_cache_on_a_shared_server_removes_only_this_browsers_uploads(tmp_path, monkeypatch):
    import subprocess
    import sys

    from app_helpers import ROOT

    from core.inputs import uploads

    cache = tmp_path / "cache"
    monkeypatch.setenv("ANISO_CACHE_DIR", str(cache))
    monkeypatch.setenv("ANISO_SHARED", "1")
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")
    mine = uploads.upload_id(uploads.save_upload(b"alice's notes\n\nmore of them\n", "alice.txt", owner="alice-token"))
    theirs = uploads.upload_id(uploads.save_upload(b"bob's notes\n\nmore of his\n", "bob.txt", owner="bob-token"))
    get_store().put("a-shared-result", {"computed": True})
    alice = _session("alice-token")
    alice.session_state["_my_uploads"] = {mine}  # what the sidebar notes when alice uploads
    alice.session_state["cache_open"] = True
    alice.run()
    assert "only the files this browser uploaded" in " ".join(c.value for c in alice.sidebar.caption)
    alice.sidebar.button(key="clear_cache").click().run()
    no_exception(alice)
    assert uploads.resolve(theirs).exists()  # bob's upload stays
    with pytest.raises(InputError):
        uploads.resolve(mine)  # alice's is gone
    assert get_store().get("a-shared-result")[0] == {"computed": True}  # results are shared: kept
    r = subprocess.run([sys.executable, "-m", "core", "cache", "clear", "--cache-dir", str(cache)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "cache cleared" in r.stdout, r.stderr  # the whole cache: from the command line
    with pytest.raises(InputError):
        uploads.resolve(theirs)


def _upload_session(token: str, uid: str, mine: bool):
    """A browser on the sidebar's *Upload a file* with `uid` (the link's corpus; `mine`: this browser uploaded it)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for k, v in {**SMALL, "tokens": "3100", "corpus": uid}.items():
        at.query_params[k] = v
    at.session_state["_browser_token"] = token
    if mine:
        at.session_state["_my_uploads"] = {uid}
    at.session_state["cache_open"] = True
    at.run()
    no_exception(at)
    return at


def _name_box(at, uid: str):
    return at.sidebar.text_input(key=f"w_name_{uid}_")


def test_one_browser_cannot_rename_another_browsers_upload(tmp_path, monkeypatch):
    """Issue 37 item 1: B opened A's upload link and renamed it for A (header, legends, file names)."""
    from core.inputs import uploads

    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ANISO_SHARED", "1")
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")
    data = b"alice's wiki notes\n\nmore of them, a second document\n"
    uid = uploads.upload_id(uploads.save_upload(data, "fake wiki-en.txt", owner="alice-token"))
    bob = _upload_session("bob-token", uid, mine=False)
    assert _name_box(bob, uid).disabled and "Only the browser that uploaded" in _name_box(bob, uid).help
    with pytest.raises(InputError, match="Only the browser that uploaded"):
        uploads.rename(uid, "RENAMED BY B", owner="bob-token")
    with pytest.raises(InputError, match="Only the browser that uploaded"):
        uploads.rename(uid, "RENAMED BY B")  # no browser at all (a forged call) either
    alice = _upload_session("alice-token", uid, mine=True)
    assert not _name_box(alice, uid).disabled
    assert _name_box(alice, uid).value == "fake wiki-en.txt"
    # Bob uploads the same bytes himself: he may name them his way, for himself only.
    uploads.save_upload(data, "bob's copy.txt", owner="bob-token")
    bob = _upload_session("bob-token", uid, mine=True)
    _name_box(bob, uid).input("RENAMED BY B").run()
    no_exception(bob)
    bob.run()
    assert _name_box(bob, uid).value == "RENAMED BY B"
    alice.run()
    no_exception(alice)
    assert _name_box(alice, uid).value == "fake wiki-en.txt"
    assert not any("RENAMED BY B" in t.value for t in [*alice.caption, *alice.markdown, *alice.title])
    carol = _upload_session("carol-token", uid, mine=False)  # whoever opens the link: the first upload's name
    assert _name_box(carol, uid).value == "fake wiki-en.txt"


def test_clearing_shared_bytes_keeps_them_for_their_other_owner(tmp_path, monkeypatch):
    """Issue 37 item 2: B uploaded the same bytes as A and pressed *Clear my uploads*: A's upload was gone. The
    content is shared by hash and removed only when no owner is left."""
    from core.inputs import uploads

    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ANISO_SHARED", "1")
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")
    data = b"the same bytes\n\nuploaded twice\n"
    uid = uploads.upload_id(uploads.save_upload(data, "alice.txt", owner="alice-token"))
    assert uploads.upload_id(uploads.save_upload(data, "bob.txt", owner="bob-token")) == uid
    assert uploads.owners(uid) == {"alice-token", "bob-token"}
    bob = _upload_session("bob-token", uid, mine=True)
    bob.sidebar.button(key="clear_cache").click().run()
    no_exception(bob)
    assert uploads.resolve(uid).exists() and uploads.owners(uid) == {"alice-token"}
    alice = _upload_session("alice-token", uid, mine=True)
    assert not any("not on this server" in e.value for e in alice.error)
    assert _name_box(alice, uid).value == "alice.txt"
    mallory = _upload_session("mallory-token", uid, mine=True)  # a forged claim in the session: not an owner
    mallory.sidebar.button(key="clear_cache").click().run()
    assert uploads.resolve(uid).exists()
    alice.sidebar.button(key="clear_cache").click().run()  # the last owner: the bytes go
    assert not alice.exception, [e.stack_trace for e in alice.exception]
    with pytest.raises(InputError):
        uploads.resolve(uid)
