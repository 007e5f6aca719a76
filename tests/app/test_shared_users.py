"""Users kept apart on a shared server (ANISO_SHARED=1, issue 27 item 4): two browser sessions share
the computed results, but a job can be cancelled only by the session that started it. No worker
runs here, so the job stays queued while both sessions look at it."""

from __future__ import annotations

import pytest
from app_helpers import APP, SMALL, TIMEOUT, no_exception

from core import jobs
from core.errors import InputError


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

    from core import pipeline, uploads

    cache = tmp_path / "cache"
    monkeypatch.setenv("ANISO_CACHE_DIR", str(cache))
    monkeypatch.setenv("ANISO_SHARED", "1")
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")
    mine = uploads.upload_id(uploads.save_upload(b"alice's notes\n\nmore of them\n", "alice.txt"))
    theirs = uploads.upload_id(uploads.save_upload(b"bob's notes\n\nmore of his\n", "bob.txt"))
    pipeline.get_store().put("a-shared-result", {"computed": True})
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
    assert pipeline.get_store().get("a-shared-result")[0] == {"computed": True}  # results are shared: kept
    r = subprocess.run([sys.executable, "-m", "core", "cache", "clear", "--cache-dir", str(cache)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "cache cleared" in r.stdout, r.stderr  # the whole cache: from the command line
    with pytest.raises(InputError):
        uploads.resolve(theirs)
