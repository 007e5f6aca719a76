"""A hub model's download as a job stage, against the loopback hub (tests/hub_server.py) with the real
huggingface_hub client: bytes, rate and ETA per file; a cut connection resumes where it stopped; Cancel stops it
and leaves the local hub cache consistent; two jobs asking for the same model download it once."""

from __future__ import annotations

import hashlib
import re
import threading

import pytest

from core.base.errors import Cancelled
from core.base.progress import Progress, Stage
from core.inputs import hub_fetch

ID = "testorg/minilm@step0"
WEIGHTS = "model.safetensors"


def _sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _served(hub):
    return hub.server.repos["testorg/minilm"].commits[hub.server.repos["testorg/minilm"].tags["step0"]]


def test_the_download_stage_reports_bytes_rate_and_eta_per_file(hub, tmp_path):
    hub.server.throttle(60e6)  # ~1.5 s for MiniLM's 92 MB: several reports
    seen: list[Progress] = []
    got = hub_fetch.fetch(ID, progress=seen.append, cache_dir=tmp_path / "cache")
    files = _served(hub)
    # every file of the plan but config.json, which sizing the model read first
    fetched = [p for p in files if p.endswith((".json", ".txt")) and p != "config.json"] + [WEIGHTS]
    total = sum(files[p].size for p in fetched)
    dl = [p for p in seen if p.stage is Stage.DOWNLOAD]
    assert dl and all(p.total == total and p.counted for p in dl) and dl[-1].done == total
    assert [p.done for p in dl] == sorted(p.done for p in dl)  # bytes only grow
    mid = [p for p in dl if WEIGHTS in p.message and 0 < p.done < total]
    assert len(mid) >= 2 and all(p.rate > 0 and p.eta_s is not None for p in mid)
    assert mid[-1].eta_s < mid[0].eta_s and f"of {hub_fetch.fmt_bytes(files[WEIGHTS].size)}" in mid[0].message
    assert f"({len(fetched)} of {len(fetched)} files)" in dl[-1].message
    assert _sha256(got.folder / WEIGHTS) == files[WEIGHTS].sha256
    # the job panel's line and the CLI's, from the same record
    from ui.jobs_panel import progress_text

    class Job:
        status, cancel_requested, progress, message = "running", False, mid[-1], ""

    line = progress_text(Job)
    assert re.fullmatch(r"Step 2 of 5 · downloading the model: \d+ MB of 92 MB · \d+ MB/s · ETA \d+ s · "
                        r"model\.safetensors \(9 of 9 files\): \d+ MB of 91 MB", line), line
    # a second fetch finds it whole in the local hub cache: no file is asked again
    hub.server.clear()
    assert hub_fetch.fetch(ID, cache_dir=tmp_path / "cache").folder == got.folder
    assert not hub.server.downloads()


def test_a_cut_connection_resumes_where_it_stopped(hub, tmp_path):
    size = _served(hub)[WEIGHTS].size
    hub.server.cut("testorg/minilm", WEIGHTS, after=35_000_000)
    got = hub_fetch.fetch(ID, cache_dir=tmp_path / "cache")
    gets = [q for q in hub.server.downloads("testorg/minilm", WEIGHTS) if q["range"] != "bytes=0-100000"]
    assert len(gets) == 2 and gets[0].get("cut") and gets[0]["sent"] == 35_000_000
    start = int(gets[1]["range"].split("=")[1].rstrip("-"))  # what the client had whole: its chunks received
    assert gets[1]["status"] == 206 and 0 < start <= 35_000_000 and gets[1]["sent"] == size - start
    assert _sha256(got.folder / WEIGHTS) == _served(hub)[WEIGHTS].sha256


def _cache_state(home):
    root = home / "hub" / "models--testorg--minilm"
    files = [p for p in root.rglob("*")]
    return {"incomplete": [p for p in files if p.name.endswith(".incomplete")],
            "dangling": [p for p in files if p.is_symlink() and not p.exists()],
            "weights": [p for p in files if p.name == WEIGHTS], "refs": sorted(p.name for p in (root / "refs").glob("*"))}


def test_cancel_stops_the_download_and_leaves_the_cache_consistent(hub, tmp_path):
    from huggingface_hub import scan_cache_dir

    hub.server.throttle(40e6)
    seen: list[Progress] = []

    def cancel():  # the Cancel button, pressed once 20 MB of the weights are in
        return any(p.stage is Stage.DOWNLOAD and WEIGHTS in p.message and p.done > 20e6 for p in seen)

    with pytest.raises(Cancelled, match="download was cancelled"):
        hub_fetch.fetch(ID, progress=seen.append, cancel=cancel, cache_dir=tmp_path / "cache")
    state = _cache_state(hub.home)
    assert state == {"incomplete": [], "dangling": [], "weights": [], "refs": []}  # no part-file, no ref to it
    sent = [q for q in hub.server.downloads("testorg/minilm", WEIGHTS) if not q["range"]]
    assert len(sent) == 1 and sent[0]["sent"] < 0.6 * _served(hub)[WEIGHTS].size  # it stopped (the rest unsent)
    report = scan_cache_dir(hub.home / "hub")
    assert not report.warnings
    hub.server.throttle(None)
    got = hub_fetch.fetch(ID, cache_dir=tmp_path / "cache")  # again: the files already whole stay, the rest comes
    assert _sha256(got.folder / WEIGHTS) == _served(hub)[WEIGHTS].sha256
    assert _cache_state(hub.home)["refs"] == ["step0"]


def test_two_jobs_asking_for_the_same_model_download_it_once(hub, tmp_path):
    hub.server.throttle(60e6)
    seen = {0: [], 1: []}
    out, errors = {}, []

    def job(i):
        try:
            out[i] = hub_fetch.fetch(ID, progress=seen[i].append, cache_dir=tmp_path / "cache")
        except Exception as e:  # noqa: BLE001 - the test says which job failed
            errors.append(e)

    threads = [threading.Thread(target=job, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and out[0].folder == out[1].folder
    full = [q for q in hub.server.downloads("testorg/minilm", WEIGHTS) if not q["range"]]
    assert len(full) == 1  # one download of the weights for both
    waited = [i for i in (0, 1) if any(p.stage is Stage.WAIT for p in seen[i])]
    fetched = [i for i in (0, 1) if any(p.stage is Stage.DOWNLOAD for p in seen[i])]
    assert len(waited) == 1 and fetched == [1 - waited[0]]
