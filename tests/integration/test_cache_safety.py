"""The disk cache under attack and under faults: no unpickling, unwritable or full directories,
the size limit, clearing (core/base/cache.py)."""

from __future__ import annotations

import errno
import json
import os
import pickle
import sqlite3

import diskcache
import numpy as np
import pytest
from foundation_helpers import run_cli

from core.base.cache import CacheStore, get_store


class _Boom:
    """A pickle that, if ever loaded, writes a marker file (stands for arbitrary code)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _plant_pickle(directory, key, marker):
    dc = diskcache.Cache(str(directory / "entries"))  # the stock Disk: stores objects pickled
    dc.set(key, _Boom(marker))
    assert dc._sql("SELECT mode FROM Cache WHERE key = ?", (key,)).fetchone()[0] == diskcache.core.MODE_PICKLE
    dc.close()


def test_a_pickled_entry_is_refused_unread(tmp_path):
    store = CacheStore(tmp_path / "c")
    store.put("k", {"a": 1}, {"x": np.arange(3)})
    marker = tmp_path / "pwned"
    _plant_pickle(tmp_path / "c", "k", marker)
    assert store.get("k") is None  # treated as corrupted...
    assert not marker.exists()  # ...and never unpickled
    assert any("corrupted" in e for e in store.events)
    assert "k" not in store  # removed: recomputed next time


def test_a_pickled_entry_in_a_real_run_is_recomputed_not_run(tmp_path, tiny_bert_dir):
    corpus = tmp_path / "c.txt"
    corpus.write_text("Some text about rivers.\n\nAnother text about mountains and the sea.\n")
    out, cache = tmp_path / "r.json", tmp_path / "cache"
    args = ("analyze", "--model", tiny_bert_dir, "--corpus", corpus, "--max-tokens", "50", "--sample", "20",
            "--cache-dir", cache, "--out", out, "--quiet")
    assert run_cli(*args).returncode == 0
    dc = diskcache.Cache(str(cache / "entries"))
    keys = list(dc.iterkeys())
    dc.close()
    marker = tmp_path / "pwned"
    for k in keys:
        _plant_pickle(cache, k, marker)
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    assert not marker.exists()
    assert "warning: Cache entry" in r.stderr and "corrupted" in r.stderr
    assert json.loads(out.read_text())["manifest"]["cache_hit"] is False


def test_a_pickled_key_is_refused(tmp_path):
    store = CacheStore(tmp_path / "c")
    store.close()
    dc = diskcache.Cache(str(tmp_path / "c" / "entries"))
    dc.set(("tuple", "key"), b"x")  # a non-string key is stored pickled
    dc.close()
    store = CacheStore(tmp_path / "c")
    with pytest.raises(ValueError, match="refused"):
        store.keys()


def test_an_unwritable_directory_keeps_working_in_memory(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    store = CacheStore(blocker / "cache")  # cannot be created: a file is in the way
    assert store.degraded and "cannot be written" in store.degraded
    store.put("k", {"a": 1}, {"x": np.arange(4)})
    meta, arrays = store.get("k")
    assert meta == {"a": 1} and arrays["x"].tolist() == [0, 1, 2, 3]
    with store.lock("k"):
        pass


def test_a_full_disk_falls_back_to_memory(tmp_path, monkeypatch):
    store = CacheStore(tmp_path / "c")

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store._dc, "set", full)
    store.put("k", {"a": 2})
    assert store.get("k")[0] == {"a": 2}
    assert "No space left" in store.degraded


def test_a_readonly_database_falls_back(tmp_path, monkeypatch):
    import core.base.cache as C

    def ro(*a, **k):
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(C, "_open", ro)
    store = CacheStore(tmp_path / "c")
    store.put("k", {"a": 3})
    assert store.get("k")[0] == {"a": 3} and "readonly" in store.degraded


def test_the_cli_works_without_a_writable_cache(tmp_path, tiny_bert_dir):
    corpus = tmp_path / "c.txt"
    corpus.write_text("Some text about rivers.\n\nAnother text about mountains and the sea.\n")
    (tmp_path / "a-file").write_text("")
    out = tmp_path / "r.json"
    r = run_cli("analyze", "--model", tiny_bert_dir, "--corpus", corpus, "--max-tokens", "50", "--sample", "20",
                "--cache-dir", tmp_path / "a-file" / "cache", "--out", out, "--quiet")
    assert r.returncode == 0, r.stderr
    assert "warning: The cache directory cannot be written" in r.stderr
    assert json.loads(out.read_text())["layers"]


def test_size_limit_evicts_and_clear_frees(tmp_path):
    store = CacheStore(tmp_path / "c", size_limit=1_000_000)
    for i in range(12):
        store.put(f"k{i}", {"i": i}, {"x": np.random.default_rng(i).random(20_000)})  # ~160 kB each
    kept = [k for k in (f"k{i}" for i in range(12)) if k in store]
    assert 0 < len(kept) < 12 and "k11" in kept and "k0" not in kept  # the oldest went first
    assert store._dc.volume() <= 1_000_000
    (tmp_path / "c" / "uploads").mkdir()
    (tmp_path / "c" / "uploads" / ("a" * 64 + ".txt")).write_bytes(b"x" * 1000)
    size = store.size_bytes()
    assert size > 1000
    freed = store.clear()
    assert freed > 0 and store.size_bytes() < size and not (tmp_path / "c" / "uploads").exists()
    assert not [k for k in (f"k{i}" for i in range(12)) if k in store]
    store.put("again", {"ok": True})  # still usable after clearing
    assert store.get("again")[0] == {"ok": True}


def test_the_size_limit_is_a_setting(tmp_path, monkeypatch):

    monkeypatch.setenv("ANISO_CACHE_SIZE_GB", "0.5")
    store = get_store(tmp_path / "s")
    assert store.size_limit == 2**29
    assert store._dc.size_limit == 2**29


def test_pickle_module_is_never_imported_by_a_cache_hit(tmp_path):
    """A sanity check of the premise: a raw entry round-trips without pickle."""
    store = CacheStore(tmp_path / "c")
    store.put("k", {"a": [1, 2]}, {"x": np.arange(2)})
    blob = store._dc.get("k")
    assert isinstance(blob, bytes) and not blob.startswith(pickle.PROTO)
    assert os.path.isdir(tmp_path / "c" / "entries")


def test_get_or_compute_computes_once_and_force_recomputes(tmp_path):
    import threading
    import time

    store = CacheStore(tmp_path / "c")
    calls = []

    def compute():
        calls.append(1)
        time.sleep(0.05)  # long enough for the other thread to wait on the lock, not to find the entry
        return {"n": len(calls)}

    got = []
    threads = [threading.Thread(target=lambda: got.append(store.get_or_compute("k", compute))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got, key=lambda g: g[1]) == [({"n": 1}, False), ({"n": 1}, True)] and len(calls) == 1
    assert store.get_or_compute("k", compute) == ({"n": 1}, True)
    assert store.get_or_compute("k", compute, force=True) == ({"n": 2}, False)
    assert store.get_json("k") == {"n": 2}

    def fails():
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        store.get_or_compute("other", fails)
    assert "other" not in store


# ----------------------------------------------------------------------------- issue 37 items 8 and 13
def _files_and_rows(directory):
    """The value files under entries/ and the file names the index's rows reference."""
    entries = directory / "entries"
    files = {str(p.relative_to(entries)) for p in entries.rglob("*.val")}
    con = sqlite3.connect(str(entries / "cache.db"))
    try:
        rows = {r[0] for r in con.execute("SELECT filename FROM Cache WHERE filename IS NOT NULL")}
    finally:
        con.close()
    return files, rows


@pytest.mark.fast
def test_a_full_disk_leaves_no_value_file_that_no_row_references(tmp_path):
    """On a real 700 KiB file system: entries of ~100 kB (each a value file) until the disk is full. Every write
    that failed kept its entry in memory, and left no .val file behind."""
    from faults import small_disk

    with small_disk(tmp_path / "disk") as disk:
        store = CacheStore(disk / "c")
        rng = np.random.default_rng(0)
        for i in range(12):
            store.put(f"k{i}", {"i": i}, {"x": rng.random(12_000)})  # ~96 kB: stored as a file, not inline
        assert store.degraded and ("No space left" in store.degraded or "full" in store.degraded), store.degraded
        assert all(store.get(f"k{i}")[0] == {"i": i} for i in range(12))  # on disk or in memory, none lost
        store.close()
        files, rows = _files_and_rows(disk / "c")
        assert files == rows, f"orphan value files: {sorted(files - rows)}"


@pytest.mark.fast
@pytest.mark.parametrize("damage", ["not a database", "malformed"])
def test_a_damaged_index_is_set_aside_and_a_fresh_one_started(tmp_path, damage):
    """A damaged entries/cache.db was reported as "cannot be written ... Free disk space" and never set aside:
    the cache stayed unwritable for good. Now it is renamed (kept) and a fresh index started, once."""
    d = tmp_path / "c"
    store = CacheStore(d)
    store.put("k", {"a": 1})
    store.close()
    db = d / "entries" / "cache.db"
    if damage == "not a database":
        db.write_bytes(b"not a database " * 500)
    else:  # a real SQLite header, then garbage where the pages should be
        raw = bytearray(db.read_bytes())
        raw[100:] = b"\xff" * (len(raw) - 100)
        db.write_bytes(bytes(raw))
        for side in ("cache.db-wal", "cache.db-shm"):
            (d / "entries" / side).unlink(missing_ok=True)
    before = db.read_bytes()
    store = CacheStore(d)
    if damage == "malformed" and not store.notes:  # SQLite may open it and fail at the first read instead
        store.get("k")
        store.put("k2", {"b": 2})
    assert store.degraded is None, store.degraded
    [note] = store.notes
    assert "was damaged" in note and "renamed to cache.db.damaged-" in note and "kept, not deleted" in note
    [aside] = list((d / "entries").glob("cache.db.damaged-*[0-9]"))
    assert aside.read_bytes() == before  # set aside as it was
    store.put("k3", {"c": 3})
    assert store.get("k3")[0] == {"c": 3} and store._dc is not None  # on disk again
    store.close()
    again = CacheStore(d)  # the fresh index opens: nothing set aside twice
    assert again.get("k3")[0] == {"c": 3} and len(list((d / "entries").glob("cache.db.damaged-*[0-9]"))) == 1
