"""The dashboard on a faulty cache (docs/safety.md, Faults): a read-only cache directory and a
corrupted job queue give a warning and a working page, never an exception box."""

from __future__ import annotations

from app_helpers import by_title, no_exception, run_clicked
from faults import read_only

from core.entry import job_queue, job_run, jobs


def _warnings(at) -> str:
    return " ".join(w.value for w in at.warning)


def test_run_on_a_read_only_cache_computes_in_memory(app, tmp_path, monkeypatch, tiny_bert_dir):
    cache = tmp_path / "read-only-cache"
    cache.mkdir()
    monkeypatch.setenv("ANISO_CACHE_DIR", str(cache))
    monkeypatch.setenv("ANISO_DATA_DIR", str(tiny_bert_dir.parent))
    with read_only(cache):
        at = app(models=(f"data:{tiny_bert_dir.name}",), tokens="500", sample="100")
        no_exception(at)
        run_clicked(at, timeout=300)  # the job runs in the app's process: the queue cannot be written
        no_exception(at)
        assert not at.error, [e.value for e in at.error]
        assert by_title(at, "Mean cosine similarity by layer")  # the result, from memory
        assert "cannot be written" in _warnings(at) and "in memory" in _warnings(at)
        assert all(j.worker.get("here") for j in jobs.list_jobs())


def test_a_corrupted_queue_is_one_warning_on_a_working_page(app, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    (cache / "jobs").mkdir(parents=True)
    (cache / "jobs" / "queue.db").write_bytes(b"not a database " * 500)
    monkeypatch.setenv("ANISO_CACHE_DIR", str(cache))
    at = app()
    no_exception(at)
    assert _warnings(at).count("was damaged") == 1 and "renamed" in _warnings(at)
    assert any("not computed yet" in c.value for c in at.caption)
    assert len(list((cache / "jobs").glob("queue.db.damaged-*"))) == 1
    at.switch_page("pages/outliers.py").run()
    no_exception(at)
    assert len(list((cache / "jobs").glob("queue.db.damaged-*"))) == 1  # set aside once


def test_a_read_only_cache_says_so_without_the_servers_path(app, tmp_path, monkeypatch):
    """Issue 37 items 9 and 12: the warning showed every visitor the absolute cache path; Clear cache on a read-only
    cache said "Cache cleared" (the CLI: "0 bytes freed", exit 0)."""
    import subprocess
    import sys

    from app_helpers import ROOT

    from core.base.cache import CacheStore

    cache = tmp_path / "read-only-cache"
    store = CacheStore(cache)
    store.put("an-entry", {"kept": True})
    store.close()  # (no database of this process left open under the read-only files: SQLite maps them)
    monkeypatch.setenv("ANISO_CACHE_DIR", str(cache))
    with read_only(cache):
        at = app()
        at.session_state["cache_open"] = True
        at.run()
        no_exception(at)
        assert "cannot be written" in _warnings(at)
        texts = [e.value for kind in ("warning", "error", "caption", "markdown", "info") for e in getattr(at, kind)]
        assert not [t for t in texts if str(tmp_path) in t.replace("\\", "")], texts  # (markdown escapes - and _)
        at.sidebar.button(key="clear_cache").click().run()
        no_exception(at)
        assert any("not cleared" in e.value for e in at.error), [e.value for e in at.error]
        assert not [t for t in at.toast if "Cache cleared" in t.value]
        r = subprocess.run([sys.executable, "-m", "core", "cache", "clear", "--cache-dir", str(cache)], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and "not cleared" in r.stderr and "cache cleared" not in r.stdout, (r.stdout, r.stderr)
    assert CacheStore(cache).get_json("an-entry") == {"kept": True}  # nothing was removed


def _forged_record(spec, **fields):
    """The selection's extraction job as a worker of this host would have recorded it, with `fields` changed."""
    import dataclasses

    from ui.run import analyze_params

    jid = jobs.submit("analyze", analyze_params(spec), label="forged")
    job = dataclasses.replace(jobs.status(jid), **fields)
    job_queue.write(job)
    return jid


def test_a_job_that_failed_for_a_full_cache_is_computed_in_memory_and_shown(app, tmp_path, monkeypatch):
    """docs/safety.md, Faults: a job whose results the worker could not store (the cache is full) is computed again
    in the app's own memory and shown (issue 37 item 6)."""
    import errno
    import time

    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")
    at = app(tokens="500", sample="100")
    [spec] = at.session_state["selection"].specs()
    full = job_run._cache_full_error(OSError(errno.ENOSPC, "No space left on device"))
    jid = _forged_record(spec, status=jobs.FAILED, error=full, finished=time.time())
    assert jobs.cache_full(jobs.status(jid))
    at.run()  # the page sees the failed job and starts the run here, in memory
    t0 = time.monotonic()
    while jobs.status(jid).active or jobs.status(jid).status != jobs.DONE:
        assert time.monotonic() - t0 < 120, jobs.status(jid).describe()
        time.sleep(0.2)
    assert jobs.status(jid).worker.get("here")  # computed by the app's process, not a worker
    at.run()
    no_exception(at)
    assert by_title(at, "Mean cosine similarity by layer")  # the result, from memory


def test_a_running_job_whose_record_is_late_says_so_in_its_panel(app, tmp_path, monkeypatch):
    """A worker whose record writes fail (a full or unwritable disk) left the panel's bar frozen without a word for
    400 s (issue 37 item 6): a record older than LATE_S is said in the job's panel."""
    import os
    import socket
    import time

    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")
    at = app(tokens="500", sample="100")
    [spec] = at.session_state["selection"].specs()
    worker = {"host": socket.gethostname(), "pid": os.getpid(), "start": job_run.proc_start(os.getpid())}  # alive
    jid = _forged_record(spec, status=jobs.RUNNING, started=time.time() - 60, worker=worker,
                         heartbeat=time.time() - job_run.HEARTBEAT_S)
    at.run()
    no_exception(at)
    assert "No news from the worker" not in _warnings(at)  # one beat late: not yet
    _forged_record(spec, status=jobs.RUNNING, started=time.time() - 60, worker=worker,
                   heartbeat=time.time() - jobs.LATE_S - 5)
    at.run()
    no_exception(at)
    assert jobs.status(jid).status == jobs.RUNNING  # its worker lives, on a disk with room: not failed, but said
    assert "No news from the worker for" in _warnings(at) and "may be failing" in _warnings(at), _warnings(at)


def test_a_failed_jobs_error_names_the_servers_hub_cache_in_words(app, tmp_path, monkeypatch):
    """A hub-offline error read in the browser named the server's hub cache by its path (issue 37's leftover):
    the page shows the error with the server's folders in words (core.base.settings.without_server_paths)."""
    import time

    from core.inputs.hub import cache_note

    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "server-hf" / "hub"))
    monkeypatch.delenv("ANISO_ALLOW_SERVER_PATHS", raising=False)
    at = app(tokens="500", sample="100")
    [spec] = at.session_state["selection"].specs()
    error = f"Model org/x cannot be reached (offline); {cache_note('org/x')}."
    assert str(tmp_path) in error  # what the worker recorded: the CLI prints it so
    _forged_record(spec, status=jobs.FAILED, error=error, finished=time.time())
    at.run()
    no_exception(at)
    shown = [e.value.replace("\\", "") for e in at.error]
    assert any("cannot be reached" in t and "the server's hub cache" in t for t in shown), shown
    assert not [t for t in shown if "server-hf" in t], shown
