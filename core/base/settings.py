"""Deployment settings: what a served dashboard may touch. One place, read from the environment.

These are the knobs of a lab server, not analysis rules (those live in core/base/config.py):

=============================  =========  =====================================================
environment variable           default    meaning
=============================  =========  =====================================================
ANISO_DATA_DIR                 (unset)    a folder whose files and model folders the URL and the
                                          sidebar may name (as ``data:<relative path>``)
ANISO_ALLOW_SERVER_PATHS       0          1: the URL and the sidebar may name any server path
                                          (single-user machines). The CLI always may.
ANISO_ALLOW_MODEL_FOLDERS      1          0: no local model folders from the URL/sidebar
ANISO_ALLOW_HUB                1          0: no hub identifiers from the URL/sidebar
ANISO_SHARED                   0          1: a shared server: sets both switches above to 0
                                          (and server paths off) unless they are set explicitly
ANISO_MAX_UPLOAD_MB            200        largest upload accepted (refused before it is read)
ANISO_MAX_UNPACKED_MB          1024       largest total size of the image or audio files of one
                                          corpus (a zip's declared sizes, read before anything is
                                          decompressed; a folder's file sizes)
ANISO_MAX_IMAGE_PIXELS         40000000   largest image (width x height, from its header, before it
                                          is decoded)
ANISO_MAX_CLIP_SECONDS         3600       longest audio clip (from its header, before decoding)
ANISO_EXPORT_TIMEOUT_S         60         how long a static image export (PNG, SVG, PDF through
                                          kaleido's Chromium) may take before it is given up
ANISO_REPORT_TIMEOUT_S         300        how long the report zip's job (Export report) may take
                                          before it is stopped with a message saying so
ANISO_REPORT_FORMATS           png,svg,   the report zip's static image formats (comma-separated;
                               pdf        "none": data files and report.html only)
ANISO_ALLOW_REMOTE_CODE        0          1: the job worker may run a job that asks for a model
                                          folder's own Python code (trust_remote_code); the CLI's
                                          --trust-remote-code is not a job and is not affected
ANISO_ALLOW_PICKLE             0          1: a hub model whose weights are pickled (pytorch_model.bin,
                                          no safetensors) may be loaded (unpickling can run code);
                                          always 0 on a shared server (ANISO_SHARED=1)
ANISO_MAX_MODEL_GB             (unset)    the largest hub model fetched: its weight files and its
                                          memory at the run's dtype, each at most this many GB
ANISO_CACHE_SIZE_GB            20         disk cache size; least recently stored entries go first
ANISO_HUB_TIMEOUT_S            2          how long to wait for the model hub before calling it
                                          unreachable
ANISO_TORCHRUN_NPROC           0          K > 1: the job queue runs each analysis, attention
                                          pass and series as a local torchrun job of K processes
                                          (e.g. one per GPU); 0 or 1: in the worker's process
=============================  =========  =====================================================

Settings are read at call time (`current()`), so a test or a server restart sees a change.

This module is also the one reader of every other environment variable the product uses, and
the owner of the cache layout; everything else receives paths and settings from here or as
arguments (tests/unit/test_structure.py fails on an `os.environ` read anywhere else):

=============================  =====================================================================
ANISO_CACHE_DIR                the cache directory (default ./cache); a process that is given one
                               (`--cache-dir`, `set_cache_dir`, `use_cache_dir`) uses that instead
ANISO_QUEUE_URL                a redis:// queue shared by several machines (default: SQLite in the cache)
ANISO_JOB_MODULES              comma-separated modules that register() more job kinds
ANISO_WORKER_AUTOSTART         0: the app never starts a worker (dedicated worker machines)
ANISO_WORKERS                  jobs at once in one worker process (threads), default 1
ANISO_WORKER_NICE              the CPU niceness of the job worker, default 0 (the CLI's: docs/jobs.md)
ANISO_UMAP_NICE                the CPU niceness of the app's UMAP process, default 10
ANISO_WORKER_WARM              0: the app starts its worker on Run only, and that worker takes jobs at
                               once; default 1: when a page opens, and the worker first imports what
                               an analysis needs and loads the default model (the first curve sooner)
HF_HUB_OFFLINE, HF_ENDPOINT    the model hub: offline when 1; its address
HF_HUB_CACHE, HF_HOME          the local hub cache (default ~/.cache/huggingface/hub), as huggingface_hub
                               reads them
XDG_CACHE_HOME                 the user's cache folder (default ~/.cache): the default cache of an
                               installed package is aniso/ in it (a checkout's is its cache/)
RANK, WORLD_SIZE, LOCAL_RANK,  what torchrun sets for each process of a distributed run
LOCAL_WORLD_SIZE, MASTER_*
=============================  =====================================================================

The cache layout (`<cache>/jobs/queue.db`, `uploads/`, `trained/`, `labs/`, `models/`...) is defined by
the functions of the "cache layout" section below.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    v = raw.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise InputError(f"{name}={raw!r} is not a boolean (use 1 or 0).")


def _number(name: str, default: float, lo: float) -> float:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        v = float(raw)
    except ValueError:
        raise InputError(f"{name}={raw!r} is not a number.") from None
    if not v >= lo:
        raise InputError(f"{name} must be at least {lo:g}, got {raw!r}.")
    return v


REPORT_FORMATS = ("png", "svg", "pdf")


def _formats(name: str) -> tuple[str, ...]:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return REPORT_FORMATS
    got = tuple(f.strip().lower() for f in raw.split(",") if f.strip())
    if got == ("none",):
        return ()
    bad = [f for f in got if f not in REPORT_FORMATS]
    if bad:
        raise InputError(f"{name}={raw!r}: {', '.join(bad)} is not one of {', '.join(REPORT_FORMATS)} (or none).")
    return got


def _count(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        v = int(raw)
    except ValueError:
        v = -1
    if v < 0:
        raise InputError(f"{name} must be a whole number of processes (0: no torchrun), got {raw!r}.")
    return v


@dataclass(frozen=True)
class Settings:
    data_dir: Path | None = None
    allow_server_paths: bool = False
    allow_model_folders: bool = True
    allow_hub: bool = True
    max_upload_bytes: int = 200 * 2**20
    max_unpacked_bytes: int = 1024 * 2**20
    max_image_pixels: int = 40_000_000
    max_clip_seconds: float = 3600.0
    export_timeout_s: float = 60.0
    report_timeout_s: float = 300.0
    report_formats: tuple[str, ...] = REPORT_FORMATS
    allow_remote_code: bool = False
    allow_pickle: bool = False
    max_model_bytes: int | None = None  # None: no cap
    cache_size_bytes: int = 20 * 2**30
    hub_timeout_s: float = 2.0
    torchrun_nproc: int = 0
    shared: bool = False  # ANISO_SHARED=1: users kept apart (a job is cancelled only by the browser that started it)

    @property
    def max_upload_mb(self) -> int:
        return max(1, self.max_upload_bytes // 2**20)


def current() -> Settings:
    """The settings from the environment (see the module docstring for each variable)."""
    shared = _flag("ANISO_SHARED", False)
    data = os.environ.get("ANISO_DATA_DIR", "").strip()
    return Settings(
        data_dir=Path(data).expanduser().resolve() if data else None,
        allow_server_paths=_flag("ANISO_ALLOW_SERVER_PATHS", False) and not (
            shared and "ANISO_ALLOW_SERVER_PATHS" not in os.environ),
        allow_model_folders=_flag("ANISO_ALLOW_MODEL_FOLDERS", not shared),
        allow_hub=_flag("ANISO_ALLOW_HUB", not shared),
        max_upload_bytes=int(_number("ANISO_MAX_UPLOAD_MB", 200, 1) * 2**20),
        max_unpacked_bytes=int(_number("ANISO_MAX_UNPACKED_MB", 1024, 1) * 2**20),
        max_image_pixels=int(_number("ANISO_MAX_IMAGE_PIXELS", 40_000_000, 1)),
        max_clip_seconds=_number("ANISO_MAX_CLIP_SECONDS", 3600.0, 1),
        export_timeout_s=_number("ANISO_EXPORT_TIMEOUT_S", 60.0, 1),
        report_timeout_s=_number("ANISO_REPORT_TIMEOUT_S", 300.0, 1),
        report_formats=_formats("ANISO_REPORT_FORMATS"),
        allow_remote_code=_flag("ANISO_ALLOW_REMOTE_CODE", False),
        allow_pickle=_flag("ANISO_ALLOW_PICKLE", False) and not shared,
        max_model_bytes=int(_number("ANISO_MAX_MODEL_GB", 0, 0) * 1e9) or None,
        cache_size_bytes=int(_number("ANISO_CACHE_SIZE_GB", 20, 0.001) * 2**30),
        hub_timeout_s=_number("ANISO_HUB_TIMEOUT_S", 2.0, 0.1),
        torchrun_nproc=_count("ANISO_TORCHRUN_NPROC", 0),
        shared=shared,
    )


# ----------------------------------------------------------------------------- the cache and its layout
REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_ENV = "ANISO_CACHE_DIR"
_cache_dir: Path | None = None  # given to this process explicitly (set_cache_dir / use_cache_dir)


def default_cache_dir() -> Path:
    """The cache directory of this process: the one it was given (`set_cache_dir`, a worker's or
    the CLI's `--cache-dir`), else ANISO_CACHE_DIR, else `cache/` in the repository (a checkout, or
    `pip install -e .`), else, for a package installed with `pip install .` (it ships no cache folder),
    `aniso/` in the user's cache folder (XDG_CACHE_HOME, default ~/.cache)."""
    if _cache_dir is not None:
        return _cache_dir
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    if (REPO_ROOT / "cache").is_dir():
        return REPO_ROOT / "cache"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "aniso"


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """`cache_dir` (or the default one), resolved."""
    return Path(cache_dir or default_cache_dir()).resolve()


def set_cache_dir(cache_dir: str | Path | None) -> None:
    """Give this process its cache directory (None: back to ANISO_CACHE_DIR or ./cache)."""
    global _cache_dir
    _cache_dir = Path(cache_dir).resolve() if cache_dir else None


@contextlib.contextmanager
def use_cache_dir(cache_dir: str | Path | None):
    """`set_cache_dir` for the duration of a block (a CLI command called in-process); nothing when None."""
    if not cache_dir:
        yield
        return
    before = _cache_dir
    set_cache_dir(cache_dir)
    try:
        yield
    finally:
        set_cache_dir(before)


def _under(name: str, cache_dir: str | Path | None) -> Path:
    return Path(cache_dir or default_cache_dir()) / name


def jobs_dir(cache_dir: str | Path | None = None) -> Path:
    """The job queue's folder: queue.db, the worker's lock and log, the records' lock."""
    return cache_root(cache_dir) / "jobs"


def queue_db(cache_dir: str | Path | None = None) -> Path:
    """The SQLite job queue (used unless ANISO_QUEUE_URL names a Redis queue)."""
    return jobs_dir(cache_dir) / "queue.db"


def results_dir(cache_dir: str | Path | None = None) -> Path:
    """The results store's entries (diskcache; written by core/base/cache.py only)."""
    return _under("entries", cache_dir)


def locks_dir(cache_dir: str | Path | None = None) -> Path:
    """Per-key locks of the results store."""
    return _under("locks", cache_dir)


def uploads_dir(cache_dir: str | Path | None = None) -> Path:
    """Corpora uploaded in the app (`upload:<name>`)."""
    return _under("uploads", cache_dir)


def trained_dir(cache_dir: str | Path | None = None) -> Path:
    """Runs trained here, one folder per run (see core/inputs/checkpoints.py)."""
    return _under("trained", cache_dir)


def labs_dir(cache_dir: str | Path | None = None) -> Path:
    """Labs (issue 41), one lab.json per lab id (see core/studies/lab.py)."""
    return _under("labs", cache_dir)


def hub_series_dir(cache_dir: str | Path | None = None) -> Path:
    """Hub checkpoint series kept as runs (see core/inputs/hub_series.py)."""
    return _under("hub-series", cache_dir)


def models_dir(cache_dir: str | Path | None = None) -> Path:
    """Model conversions made once (GGUF, ONNX, CTranslate2 weights -> transformers folders)."""
    return _under("models", cache_dir)


def corpora_dir(cache_dir: str | Path | None = None) -> Path:
    """Corpora generated once (synthetic speech)."""
    return _under("corpora", cache_dir)


def saved_models_dir(cache_dir: str | Path | None = None) -> Path:
    """Models handed to the Python API loaded (`aniso.analyze(model, corpus, tokenizer=...)`), saved once as
    model folders named by the hash of their config, weights and tokenizer (core/entry/api.py)."""
    return _under("saved-models", cache_dir)


def child_env(cache_dir: str | Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of a child process: this one's, with `cache_dir` (default: the one this
    process was given, if any) as ANISO_CACHE_DIR, for a child that takes no --cache-dir such as
    the app, and `extra` variables set."""
    env = dict(os.environ)
    cache_dir = cache_dir if cache_dir is not None else _cache_dir
    if cache_dir is not None:
        env[CACHE_ENV] = str(cache_dir)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def export_env(**values: str) -> None:
    """Set variables in this process's environment (a harness configuring libraries before they
    are imported, or its children's threads)."""
    os.environ.update({k: str(v) for k, v in values.items()})


def env_default(**values: str) -> None:
    """Like `export_env`, but only variables that are not set yet."""
    for k, v in values.items():
        os.environ.setdefault(k, str(v))


def env_value(name: str) -> str | None:
    """A variable reported as is (a benchmark's record of its threads or caches), never a setting."""
    return os.environ.get(name)


# ----------------------------------------------------------------------------- the job queue and worker
QUEUE_URL_ENV = "ANISO_QUEUE_URL"
MODULES_ENV = "ANISO_JOB_MODULES"
AUTOSTART_ENV = "ANISO_WORKER_AUTOSTART"
WORKERS_ENV = "ANISO_WORKERS"
NICE_ENV = "ANISO_WORKER_NICE"
UMAP_NICE_ENV = "ANISO_UMAP_NICE"
WARM_ENV = "ANISO_WORKER_WARM"
UMAP_WARM_ENV = "ANISO_UMAP_WARM"
TORCH_THREADS_ENV = "ANISO_TORCH_THREADS"


def queue_url() -> str:
    """ANISO_QUEUE_URL, stripped ("" for the SQLite queue in the cache)."""
    return os.environ.get(QUEUE_URL_ENV, "").strip()


def job_modules() -> list[str]:
    """The modules named by ANISO_JOB_MODULES (they register more job kinds when imported)."""
    return [m for m in (m.strip() for m in os.environ.get(MODULES_ENV, "").split(",")) if m]


def worker_autostart() -> bool:
    """False when ANISO_WORKER_AUTOSTART=0: the app never starts a worker."""
    return os.environ.get(AUTOSTART_ENV, "1") != "0"


def worker_warm() -> bool:
    """False when ANISO_WORKER_WARM=0: the app starts its worker on Run only (not when a page opens), and the
    worker takes jobs at once, without first importing what an analysis needs and loading the default model
    (`core.entry.worker.ensure_worker`, `ui.jobs_panel.prestart_worker`)."""
    return os.environ.get(WARM_ENV, "1") != "0"


def umap_warm() -> bool:
    """False when ANISO_UMAP_WARM=0: the app starts its UMAP process without compiling umap's kernels ahead (a
    minute of CPU beside whatever else runs); its first UMAP fit compiles them instead (`core.compute.projection`)."""
    return os.environ.get(UMAP_WARM_ENV, "1") != "0"


def worker_threads(given: int | None = None) -> int:
    """Jobs at once in one worker: `given` (--workers), else ANISO_WORKERS, else 1."""
    return int(given or os.environ.get(WORKERS_ENV) or 1)


def worker_nice() -> int:
    """The niceness of the job worker: ANISO_WORKER_NICE, default 0, the command line's (a dashboard job runs
    as fast as `python -m core analyze` beside the same load; docs/jobs.md says why)."""
    return int(os.environ.get(NICE_ENV, "0") or 0)


def torch_threads() -> int | str:
    """The torch threads of a run's forward passes: ANISO_TORCH_THREADS, "torch" (unset or empty: torch's own
    count, OMP_NUM_THREADS or one per core; the command line's default), "auto" (the cores other processes leave
    free when the run starts, at most torch's own count; the worker's default, docs/jobs.md says why) or a
    positive integer. Anything else is an InputError that names the setting."""
    got = (os.environ.get(TORCH_THREADS_ENV) or "torch").strip().lower()
    if got in ("torch", "auto"):
        return got
    if got.isdigit() and int(got) >= 1:
        return int(got)
    raise InputError(f"{TORCH_THREADS_ENV} must be auto, torch or a positive integer, got {got!r}.")


def umap_nice() -> int:
    """The niceness of the app's UMAP process: ANISO_UMAP_NICE, default 10. It runs in the app server's own
    scheduling group (autogroup), where a fit or its kernels' compilation must not hold the page renders."""
    return int(os.environ.get(UMAP_NICE_ENV, "10") or 0)


# ----------------------------------------------------------------------------- the model hub
def hub_offline() -> bool:
    """HF_HUB_OFFLINE=1: never ask the hub (the network may still be there)."""
    return os.environ.get("HF_HUB_OFFLINE") == "1"


def hub_endpoint() -> str:
    """The hub's address (HF_ENDPOINT, default https://huggingface.co)."""
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def hub_cache_dir() -> Path:
    """The local hub cache, read as huggingface_hub reads it (HF_HUB_CACHE, else HF_HOME/hub, else
    $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub), at call time."""
    got = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if got:
        return Path(os.path.expandvars(got)).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(os.path.expandvars(home)).expanduser() / "hub"


# ----------------------------------------------------------------------------- torchrun
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def torchrun_env() -> dict[str, str]:
    """The variables torchrun sets for each process that are set here (core/compute/distributed.py reads them)."""
    return {v: os.environ[v] for v in TORCHRUN_VARS if v in os.environ}


def without_server_paths(text: str, s: Settings | None = None) -> str:
    """`text` (a job's error, read in a browser) with the server's own folders named in words instead of by path,
    unless the URL may name server paths (ANISO_ALLOW_SERVER_PATHS=1): the local hub cache, the data folder, the
    results cache and the home folder. The CLI and the Python API print errors as they are."""
    s = s or current()
    if s.allow_server_paths or not text:
        return text
    names = [(hub_cache_dir(), "the server's hub cache"), (default_cache_dir(), "the server's cache"),
             (s.data_dir, "the data folder"), (Path.home(), "the server's home folder")]
    for path, name in sorted(((p, n) for p, n in names if p), key=lambda pn: -len(str(pn[0]))):
        for form in {str(path), str(Path(path).expanduser().resolve())}:  # longest first: the hub cache in home
            if len(form) > 1:
                text = text.replace(form, f"<{name}>")
    return text
