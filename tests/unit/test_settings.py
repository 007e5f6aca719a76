"""Deployment settings read from the environment (core/base/settings.py)."""

import pytest

from core.base import settings
from core.base.errors import InputError


@pytest.mark.parametrize("raw, want", [(None, 0), ("", 0), ("0", 0), ("1", 1), (" 4 ", 4)])
def test_torchrun_processes(monkeypatch, raw, want):
    if raw is None:
        monkeypatch.delenv("ANISO_TORCHRUN_NPROC", raising=False)
    else:
        monkeypatch.setenv("ANISO_TORCHRUN_NPROC", raw)
    assert settings.current().torchrun_nproc == want


@pytest.mark.parametrize("raw", ["two", "-1", "1.5"])
def test_torchrun_processes_refuses_what_is_not_a_count(monkeypatch, raw):
    monkeypatch.setenv("ANISO_TORCHRUN_NPROC", raw)
    with pytest.raises(InputError, match=r"ANISO_TORCHRUN_NPROC must be a whole number of processes .*got '"):
        settings.current()


def test_cache_dir_given_to_the_process_wins_over_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("ANISO_CACHE_DIR", str(tmp_path / "env"))
    assert settings.default_cache_dir() == tmp_path / "env"
    with settings.use_cache_dir(tmp_path / "given"):
        assert settings.default_cache_dir() == (tmp_path / "given").resolve()
        assert settings.child_env()["ANISO_CACHE_DIR"] == str((tmp_path / "given").resolve())  # children follow
        with settings.use_cache_dir(None):  # no --cache-dir: nothing changes
            assert settings.default_cache_dir() == (tmp_path / "given").resolve()
    assert settings.default_cache_dir() == tmp_path / "env"
    monkeypatch.delenv("ANISO_CACHE_DIR")
    assert settings.default_cache_dir() == settings.REPO_ROOT / "cache"


def test_cache_layout(tmp_path):
    assert settings.queue_db(tmp_path) == tmp_path.resolve() / "jobs" / "queue.db"
    assert settings.jobs_dir(tmp_path) == tmp_path.resolve() / "jobs"
    for fn, name in ((settings.results_dir, "entries"), (settings.uploads_dir, "uploads"),
                     (settings.trained_dir, "trained"), (settings.hub_series_dir, "hub-series"),
                     (settings.models_dir, "models"), (settings.corpora_dir, "corpora"), (settings.locks_dir, "locks")):
        assert fn(tmp_path) == tmp_path / name


def test_worker_and_queue_switches(monkeypatch):
    for v in ("ANISO_QUEUE_URL", "ANISO_JOB_MODULES", "ANISO_WORKER_AUTOSTART", "ANISO_WORKERS", "ANISO_WORKER_NICE",
              "ANISO_WORKER_WARM", "ANISO_UMAP_WARM", "ANISO_UMAP_NICE"):
        monkeypatch.delenv(v, raising=False)
    assert (settings.queue_url(), settings.job_modules(), settings.worker_autostart(), settings.worker_threads(),
            settings.worker_nice(), settings.worker_warm(), settings.umap_warm(), settings.umap_nice()) == (
        "", [], True, 1, 0, True, True, 10)
    monkeypatch.setenv("ANISO_QUEUE_URL", " redis://h:6379/0 ")
    monkeypatch.setenv("ANISO_JOB_MODULES", "a, b,,")
    monkeypatch.setenv("ANISO_WORKER_AUTOSTART", "0")
    monkeypatch.setenv("ANISO_WORKERS", "3")
    monkeypatch.setenv("ANISO_WORKER_NICE", "10")
    monkeypatch.setenv("ANISO_WORKER_WARM", "0")
    monkeypatch.setenv("ANISO_UMAP_WARM", "0")
    assert (settings.queue_url(), settings.job_modules(), settings.worker_autostart(), settings.worker_threads(),
            settings.worker_threads(2), settings.worker_nice(), settings.worker_warm(), settings.umap_warm()) == (
        "redis://h:6379/0", ["a", "b"], False, 3, 2, 10, False, False)


def test_hub_and_torchrun_variables(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert settings.hub_offline() and settings.hub_endpoint() == "https://huggingface.co"
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", "http://mirror:8080")
    assert not settings.hub_offline() and settings.hub_endpoint() == "http://mirror:8080"
    for v in settings.TORCHRUN_VARS:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert settings.torchrun_env() == {"RANK": "1", "WORLD_SIZE": "2"}


def test_a_jobs_error_names_the_servers_folders_in_words_unless_server_paths_are_allowed(monkeypatch, tmp_path):
    """Issue 37's leftover: a hub-offline error read in a browser named the server's hub cache by its path (the
    pages show a failed job's error through ui.jobs_panel.job_error, which applies this)."""
    hub, data = tmp_path / "hf" / "hub", tmp_path / "data"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("ANISO_DATA_DIR", str(data))
    monkeypatch.delenv("ANISO_ALLOW_SERVER_PATHS", raising=False)
    error = f"Model org/x cannot be reached; the local hub cache ({hub}) holds nothing of org/x; see {data}/a.txt"
    shown = settings.without_server_paths(error)
    assert str(tmp_path) not in shown and "<the server's hub cache>" in shown and "<the data folder>/a.txt" in shown
    monkeypatch.setenv("ANISO_ALLOW_SERVER_PATHS", "1")  # a single-user machine: the path is the help
    assert settings.without_server_paths(error) == error


def test_torch_threads_setting(monkeypatch):
    monkeypatch.delenv("ANISO_TORCH_THREADS", raising=False)
    assert settings.torch_threads() == "torch"  # the command line's default: torch's own count
    for raw, want in (("", "torch"), (" Auto ", "auto"), ("torch", "torch"), ("4", 4)):
        monkeypatch.setenv("ANISO_TORCH_THREADS", raw)
        assert settings.torch_threads() == want
    for bad in ("0", "-1", "two", "1.5"):
        monkeypatch.setenv("ANISO_TORCH_THREADS", bad)
        with pytest.raises(InputError, match="ANISO_TORCH_THREADS"):
            settings.torch_threads()


def test_free_cores_are_the_usable_cores_less_what_others_used():
    from core.base import procfs

    ticks = iter([100.0, 100.0 + 2 * 0.3 + 0.2])  # the machine: two cores busy through the window, and 0.2 s of ours
    own = iter([5.0, 5.2])
    got = procfs.free_cores(0.3, busy=lambda: next(ticks), own=lambda: next(own), wait=lambda s: None)
    assert got == pytest.approx(procfs.usable_cores() - 2.0)
    assert procfs.free_cores(0.3, busy=lambda: 0.0, wait=lambda s: None) is None  # no /proc/stat
    assert procfs.usable_cores() >= 1 and procfs.cpu_busy_s() > 0 and procfs.own_cpu_s() > 0
