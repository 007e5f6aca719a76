"""The dashboard on a faulty cache (docs/safety.md, Faults): a read-only cache directory and a
corrupted job queue give a warning and a working page, never an exception box."""

from __future__ import annotations

from app_helpers import by_title, no_exception, run_clicked
from faults import read_only

from core import jobs


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
