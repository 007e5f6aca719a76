"""A hub model sized before it is fetched, then fetched as a job stage: its files, bytes, parameters, the memory
it needs at a dtype, whether this machine holds it, and the download with bytes, rate and ETA. No torch.

    plan = plan_of("EleutherAI/pythia-70m@step1000")      # commit, files, parameters (safetensors headers)
    size_report(plan, "float32", "cpu")                    # what `python -m core model-info ID --json` prints
    fetch("EleutherAI/pythia-70m", dtype=..., device=..., progress=..., cancel=...)  # -> the snapshot folder

Before any weight is fetched: the hub's listing at the revision's commit (sizes and LFS sha256 of every file),
the model's config.json (a few KB: its architecture and whether it ships its own code), and the header of each
safetensors file (a range request of 100 KB: every tensor's dtype and shape, so the parameter count is exact).
What is fetched: config, tokenizer and other top-level JSON/text files, and one set of weights: model.safetensors
or the shards of model.safetensors.index.json; pickled pytorch_model.bin only with ANISO_ALLOW_PICKLE=1 and no
safetensors beside it; a repository's own Python files only with trust_remote_code.

Files land in the local hub cache (HF_HOME) through huggingface_hub itself (a blob is renamed into place only
when whole, so a cancelled or broken download leaves no partial file; a connection cut mid-file resumes from the
bytes received with an HTTP range). One download of a commit at a time per cache directory: a second job asking
for the same model waits ("wait" stage) and then finds it there. The revision's ref is written when every file
is in, so the cache never names a revision it does not hold.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from ..base.errors import Cancelled, InputError
from ..base.procfs import meminfo
from ..base.progress import Progress, Stage
from ..base.settings import Settings, current, hub_cache_dir, hub_endpoint, models_dir
from . import hub

SAFETENSORS, SAFETENSORS_INDEX = "model.safetensors", "model.safetensors.index.json"
PICKLE, PICKLE_INDEX = "pytorch_model.bin", "pytorch_model.bin.index.json"
SMALL_SUFFIXES = (".json", ".txt", ".model", ".tiktoken")  # config, tokenizer, generation and processor files
MEMORY_MARGIN = 1.2  # the weights at the run's dtype, and 20% for the forward pass's activations and buffers
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
REPORT_EVERY_S = 0.25


@dataclass
class Plan:
    """What fetching `ident` means: its commit, the files to fetch, its weights and their parameters."""

    ident: str
    name: str
    revision: str
    commit: str
    files: list[hub.HubFile]
    weights: list[str]
    weight_format: str  # "safetensors" or "pickle"
    config: dict
    n_params: int | None  # from the safetensors headers; None for pickled weights (no header)
    stored_dtypes: dict = field(default_factory=dict)  # safetensors dtype -> parameters
    remote_code: dict | None = None  # the config's auto_map, when the repository ships its own code

    @property
    def bytes(self) -> int:
        return sum(f.size or 0 for f in self.files)

    @property
    def weight_bytes(self) -> int:
        return sum(f.size or 0 for f in self.files if f.path in self.weights)

    def missing(self) -> list[hub.HubFile]:
        """The files of the plan that the local hub cache does not hold yet (whole) at the commit."""
        snap = hub.snapshot_folder(self.name, self.commit)
        return [f for f in self.files if not _whole(snap / f.path, f.size)]


def _whole(p: Path, size: int | None) -> bool:
    try:
        return p.is_file() and (size is None or p.stat().st_size == size)
    except OSError:
        return False


def _download(name: str, path: str, commit: str, tqdm_class=None) -> Path:
    """One file of `name` at `commit` into the local hub cache, through huggingface_hub (HF_TOKEN is its own)."""
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(name, path, revision=commit, cache_dir=str(hub_cache_dir()),
                                    endpoint=hub_endpoint(), tqdm_class=tqdm_class))
    except Cancelled:
        raise
    except Exception as e:  # noqa: BLE001 - every refusal of the hub becomes one line
        if hub.is_transport_error(e):
            raise InputError(f"The download of {name} ({path}) broke off: {type(e).__name__}: "
                             f"{(str(e).splitlines() or [''])[0]}; run again to fetch the rest.") from None
        raise hub.explain(e, name, commit) from None


def _json(name: str, path: str, commit: str) -> dict:
    local = _download(name, path, commit)  # a refusal of the hub says itself
    try:
        got = json.loads(local.read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"Model {name}'s {path} is not readable JSON ({e}).") from None
    if not isinstance(got, dict):
        raise InputError(f"Model {name}'s {path} is not a JSON object.")
    return got


def _revision(ident: str, commit: str | None, suggest=()) -> hub.Revision:
    """`ident` resolved (one hub call, or none offline); with the `commit` a run carries, the listing at that
    commit under the revision name asked."""
    if commit is None:
        return hub.resolve(ident, suggest)
    name, rev = hub.split(ident)
    return replace(hub.resolve(f"{name}@{commit}", suggest), revision=rev or "main")


def plan_of(ident: str, *, trust_remote_code: bool = False, settings: Settings | None = None,
            suggest=(), commit: str | None = None) -> Plan:
    """Resolve `ident`, read its config and weight headers, and decide what to fetch. InputError (one line) for a
    model that cannot be fetched here: unknown, gated, no weights, pickled weights without the opt-in, its own
    code without trust_remote_code."""
    st = settings or current()
    rev = _revision(ident, commit, suggest)
    if rev.files is None:  # from the local hub cache (offline, or the hub unreachable): what it holds
        return _cached_plan(rev, trust_remote_code)
    listed = {f.path: f for f in rev.files}
    name = rev.name
    if "config.json" not in listed:
        raise InputError(f"Model {rev.ident} has no config.json: not a transformers model (nothing to analyse).")
    config = _json(name, "config.json", rev.commit)
    remote = config.get("auto_map") if isinstance(config.get("auto_map"), dict) else None
    if remote and not trust_remote_code:
        raise InputError(_remote_code_refusal(rev.ident, remote))
    weights, fmt = _weights(rev, listed, st)
    small = [f for p, f in listed.items() if "/" not in p and p.endswith(SMALL_SUFFIXES) and p not in weights]
    code = [f for p, f in listed.items() if "/" not in p and p.endswith(".py")] if remote else []
    files = small + code + [listed[p] for p in weights]
    n_params, dtypes = _parameters(name, rev.commit, weights) if fmt == "safetensors" else (None, {})
    return Plan(rev.ident, name, rev.revision, rev.commit, files, weights, fmt, config, n_params, dtypes, remote)


def _remote_code_refusal(ident: str, auto_map: dict) -> str:
    what = ", ".join(f"{k} -> {v}" for k, v in list(auto_map.items())[:3])
    return (f"Model {ident} ships its own Python code (auto_map in its config.json: {what}), which runs only when "
            f"you allow it: --trust-remote-code on the command line; a job worker also needs "
            f"ANISO_ALLOW_REMOTE_CODE=1. Read the repository's code first.")


def _weights(rev: hub.Revision, listed: dict, st: Settings) -> tuple[list[str], str]:
    """The weight files transformers loads, safetensors first; pickles only with the opt-in."""
    for single, index, fmt in ((SAFETENSORS, SAFETENSORS_INDEX, "safetensors"), (PICKLE, PICKLE_INDEX, "pickle")):
        if single in listed:
            chosen = [single]
        elif index in listed:
            shards = sorted(set((_json(rev.name, index, rev.commit).get("weight_map") or {}).values()))
            absent = [s for s in shards if s not in listed]
            if not shards or absent:
                raise InputError(f"Model {rev.ident}'s {index} names shards the repository does not have "
                                 f"({', '.join(absent[:3]) or 'none'}): its weights cannot be loaded.")
            chosen = [index, *shards]
        else:
            continue
        if fmt == "pickle" and not st.allow_pickle:
            raise InputError(f"Model {rev.ident} has only pickled weights ({chosen[0]}, no safetensors); unpickling "
                             f"can run code, so they load only with ANISO_ALLOW_PICKLE=1 (never on a shared server, "
                             f"ANISO_SHARED=1). A safetensors revision of it, where there is one, loads as it is.")
        return chosen, fmt
    raise InputError(f"Model {rev.ident} has no weights transformers can load ({SAFETENSORS}, a sharded "
                     f"{SAFETENSORS_INDEX}, or pickled {PICKLE}): nothing to analyse.")


def _parameters(name: str, commit: str, weights: list[str]) -> tuple[int, dict]:
    """Parameters by dtype from the safetensors headers (the first 100 KB of each file: nothing else is fetched)."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub_endpoint())
    by: dict[str, int] = {}
    for w in weights:
        if not w.endswith(".safetensors"):
            continue
        try:
            meta = api.parse_safetensors_file_metadata(name, w, revision=commit)
        except Exception as e:  # noqa: BLE001 - unreachable mid-way, gated, a broken header: one line
            if hub.is_transport_error(e):
                raise InputError(f"The model hub stopped answering while {name}'s {w} header was read: run again.") \
                    from None
            raise hub.explain(e, name, commit) from None
        for dt, n in meta.parameter_count.items():
            by[dt] = by.get(dt, 0) + int(n)
    return sum(by.values()), by


def _cached_plan(rev: hub.Revision, trust_remote_code: bool) -> Plan:
    snap = hub.snapshot_folder(rev.name, rev.commit)
    files = [hub.HubFile(str(p.relative_to(snap)), p.stat().st_size, None) for p in sorted(snap.rglob("*")) if p.is_file()]
    cfg_path = snap / "config.json"
    try:
        config = json.loads(cfg_path.read_text())
    except (OSError, ValueError):
        raise InputError(f"The local hub cache's snapshot of {rev.ident} ({snap}) has no readable config.json.") \
            from None
    remote = config.get("auto_map") if isinstance(config.get("auto_map"), dict) else None
    if remote and not trust_remote_code:
        raise InputError(_remote_code_refusal(rev.ident, remote))
    names = {f.path for f in files}
    weights = [n for n in names if n.endswith((".safetensors", ".bin")) or n.endswith(".index.json")]
    fmt = "safetensors" if any(n.endswith(".safetensors") for n in weights) else "pickle"
    if fmt == "pickle" and not current().allow_pickle:
        raise InputError(f"Model {rev.ident} has only pickled weights in the local hub cache; they load only with "
                         f"ANISO_ALLOW_PICKLE=1 (never on a shared server).")
    if not weights:
        raise InputError(f"The local hub cache's snapshot of {rev.ident} ({snap}) holds no weights.")
    return Plan(rev.ident, rev.name, rev.revision, rev.commit, files, sorted(weights), fmt, config,
                _local_parameters(snap, weights), {})


def _local_parameters(snap: Path, weights) -> int | None:
    """Parameters from the headers of the cached safetensors files (8 + header bytes each)."""
    n = 0
    for w in weights:
        if not w.endswith(".safetensors"):
            continue
        try:
            with open(snap / w, "rb") as f:
                size = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(size))
        except (OSError, ValueError):
            return None
        for k, v in header.items():
            if k != "__metadata__":
                count = 1
                for s in v.get("shape", []):
                    count *= int(s)
                n += count
    return n or None


# ----------------------------------------------------------------------------- sizes
def fmt_bytes(n: float) -> str:
    """548 MB, 1.2 GB (decimal units, as the hub shows them)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            v = n / scale
            return f"{v:.1f} {unit}" if v < 10 and unit == "GB" else f"{v:.0f} {unit}"
    return f"{int(n)} B"


def fmt_params(n: int | None) -> str:
    """124M, 1.2B, 86K parameters."""
    if n is None:
        return "an unknown number of"
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            v = n / scale
            return f"{v:.1f}{unit}" if v < 10 else f"{v:.0f}{unit}"
    return str(n)


def _available_memory(device: str) -> int:
    if device.startswith("cuda"):
        # lazy: keeps torch out of a look-up of a model's size on the CPU
        import torch

        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    return meminfo("MemAvailable")


def _free_disk(path: Path) -> int:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return int(shutil.disk_usage(p).free)


def memory_needed(plan: Plan, dtype: str) -> int:
    """Bytes the model takes at `dtype`: its parameters at that size, plus MEMORY_MARGIN; for pickled weights
    (no header), from their file size as if stored in float32."""
    per = DTYPE_BYTES[dtype]
    n = plan.n_params if plan.n_params is not None else plan.weight_bytes // 4
    return int(n * per * MEMORY_MARGIN)


def size_report(plan: Plan, dtype: str, device: str = "cpu", settings: Settings | None = None) -> dict:
    """What `python -m core model-info` prints: id, commit, files, bytes, n_params, dtype, memory_bytes, fits and
    the reason (and the one-line summary the sidebar shows)."""
    st = settings or current()
    memory = memory_needed(plan, dtype)
    to_fetch = sum(f.size or 0 for f in plan.missing())
    avail, free = _available_memory(device), _free_disk(hub_cache_dir())
    where = "this GPU" if device.startswith("cuda") else "this machine"
    reasons = []
    cap = st.max_model_bytes
    if cap is not None and max(plan.weight_bytes, memory) > cap:
        reasons.append(f"its weights are {fmt_bytes(plan.weight_bytes)} and it needs ~{fmt_bytes(memory)} at {dtype}, "
                       f"over this server's cap of {fmt_bytes(cap)} (ANISO_MAX_MODEL_GB)")
    if memory > avail:
        reasons.append(f"it needs ~{fmt_bytes(memory)} of memory at {dtype} and {where} has {fmt_bytes(avail)} "
                       f"available" + (": use --dtype bfloat16" if dtype == "float32" else ""))
    if to_fetch > free:
        reasons.append(f"{fmt_bytes(to_fetch)} to download and the disk of the hub cache ({hub_cache_dir()}) has "
                       f"{fmt_bytes(free)} free")
    fits = not reasons
    reason = ("fits: " + f"~{fmt_bytes(memory)} of memory at {dtype} ({fmt_bytes(avail)} available on {where}); "
              + (f"{fmt_bytes(to_fetch)} to download ({fmt_bytes(free)} free on the disk of the hub cache)"
                 if to_fetch else "every file is in the local hub cache")) if fits else "; ".join(reasons)
    params = "estimated from the file size" if plan.n_params is None else "from the safetensors headers"
    return {"id": plan.ident, "name": plan.name, "revision": plan.revision, "commit": plan.commit,
            "files": [{"path": f.path, "size": f.size} for f in plan.files], "bytes": plan.bytes,
            "weight_bytes": plan.weight_bytes, "weight_format": plan.weight_format, "n_params": plan.n_params,
            "n_params_source": params, "stored_dtypes": plan.stored_dtypes, "dtype": dtype, "device": device,
            "memory_bytes": memory, "memory_available_bytes": avail, "download_bytes": to_fetch,
            "disk_free_bytes": free, "max_model_bytes": cap, "remote_code": plan.remote_code,
            "model_type": plan.config.get("model_type"), "fits": fits, "reason": reason,
            "summary": summary(plan, memory, dtype)}


def summary(plan: Plan, memory: int, dtype: str) -> str:
    """'found: 124M parameters, 548 MB safetensors, needs ~0.6 GB at float32'."""
    need = f"~{memory / 1e9:.1f} GB" if memory >= 1e8 else f"~{fmt_bytes(memory)}"
    if plan.weight_format != "safetensors":  # no header: the count is the file's size in float32
        return (f"found: {fmt_bytes(plan.weight_bytes)} pickled .bin (about {fmt_params(plan.weight_bytes // 4)} "
                f"parameters, from its size), needs {need} at {dtype}")
    return f"found: {fmt_params(plan.n_params)} parameters, {fmt_bytes(plan.weight_bytes)} safetensors, needs {need} at {dtype}"


def check_fits(report: dict) -> None:
    if not report["fits"]:
        raise InputError(f"Model {report['id']} is not fetched: {report['reason']}.")


# ----------------------------------------------------------------------------- the download stage
class _Reporter:
    """Bytes, rate and ETA of a model's download, per file, as `Progress(Stage.DOWNLOAD)`; polls `cancel`."""

    def __init__(self, name: str, files: list[hub.HubFile], progress, cancel):
        self.name, self.files = name, files
        self.total = sum(f.size or 0 for f in files)
        self.progress, self.cancel = progress, cancel
        self.done = 0  # bytes of the finished files
        self.current, self.size, self.got, self.index = "", 0, 0, 0
        self.t0 = time.monotonic()
        self.last = 0.0

    def start(self, i: int, f: hub.HubFile) -> None:
        self.index, self.current, self.size, self.got = i, f.path, f.size or 0, 0
        self.report(force=True)

    def finish(self) -> None:
        self.done += self.size
        self.got = 0

    def add(self, n: int) -> None:
        self.got += n
        if self.cancel is not None and self.cancel():
            raise Cancelled("The download was cancelled; the local hub cache keeps the files already whole.")
        self.report()

    def report(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < REPORT_EVERY_S:
            return
        self.last = now
        done = self.done + self.got
        el = now - self.t0
        rate = done / el if el > 0 and done else 0.0
        eta = (self.total - done) / rate if rate else None
        msg = (f"{self.current} ({self.index + 1} of {len(self.files)} files): {fmt_bytes(self.got)} of "
               f"{fmt_bytes(self.size)}" + (f" · {fmt_bytes(rate)}/s" if rate else ""))
        self.progress(Progress(Stage.DOWNLOAD, done, self.total, rate, eta, msg))

    def bar_class(self):
        """A progress-bar class for huggingface_hub's `tqdm_class` (it calls update(n) per chunk received)."""
        rep = self

        class Bar:
            def __init__(self, *args, total=None, initial=0, **kw):
                if initial:
                    rep.add(int(initial))

            def update(self, n=1):
                if n:
                    rep.add(int(n))

            def close(self):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        return Bar


@dataclass(frozen=True)
class Fetched:
    """A hub model in the local hub cache: the snapshot folder to load, and the revision it was asked by."""

    folder: Path
    name: str
    revision: str
    commit: str


def _marker(cache_dir, name: str, commit: str) -> Path:
    return models_dir(cache_dir) / "hub" / name.replace("/", "--") / f"{commit}.json"


def _complete(cache_dir, name: str, commit: str) -> Path | None:
    """The snapshot of `name@commit` when a download of it finished (its marker) and every file is still whole."""
    m = _marker(cache_dir, name, commit)
    try:
        files = json.loads(m.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    snap = hub.snapshot_folder(name, commit)
    return snap if all(_whole(snap / f["path"], f.get("size")) for f in files) else None


def cached(ident: str, cache_dir=None, commit: str | None = None, suggest=()) -> Fetched | None:
    """The complete local snapshot of `ident` (at `commit`, when the run carries it: no hub call), else None."""
    name, rev = hub.split(ident)
    if commit is not None:
        got = _complete(cache_dir, name, commit)
        if got is not None:
            return Fetched(got, name, rev or "main", commit)
    r = hub.resolve(ident, suggest) if commit is None else _revision(ident, commit, suggest)
    snap = hub.snapshot_folder(r.name, r.commit)
    if r.source == "cache":
        return Fetched(snap, r.name, r.revision, r.commit) if (snap / "config.json").exists() else None
    got = _complete(cache_dir, r.name, r.commit)
    return Fetched(got, r.name, r.revision, r.commit) if got else None


def fetch(ident: str, *, dtype: str = "float32", device: str = "cpu", trust_remote_code: bool = False,
          progress: Callable[[Progress], None] | None = None, cancel: Callable[[], bool] | None = None,
          cache_dir=None, suggest=(), commit: str | None = None) -> Fetched:
    """`ident`'s files in the local hub cache, downloaded as the "download" stage where missing, after its size
    was checked against this machine and the settings (InputError with the numbers when it does not fit).
    `commit`: the one the run resolved (then a complete snapshot is found without asking the hub)."""
    progress = progress or (lambda p: None)
    got = cached(ident, cache_dir, commit, suggest)
    if got is not None:
        return got
    plan = plan_of(ident, trust_remote_code=trust_remote_code, suggest=suggest, commit=commit)
    check_fits(size_report(plan, dtype, device))
    lock_path = _marker(cache_dir, plan.name, plan.commit).with_suffix(".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as lock:
        _acquire(lock, plan, progress, cancel)
        try:
            done = _complete(cache_dir, plan.name, plan.commit)  # another job fetched it while this one waited
            if done is None:
                _download_plan(plan, progress, cancel)
                _finish(cache_dir, plan)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return Fetched(hub.snapshot_folder(plan.name, plan.commit), plan.name, plan.revision, plan.commit)


def _acquire(lock, plan: Plan, progress, cancel) -> None:
    """The commit's download lock; while another job holds it, the "wait" stage (cancel is polled)."""
    said = False
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if cancel is not None and cancel():
                raise Cancelled("Cancelled while another job was downloading the same model.") from None
            if not said:
                progress(Progress(Stage.WAIT, message=f"another job is downloading {plan.ident}: waiting for it"))
                said = True
            time.sleep(0.2)


def _download_plan(plan: Plan, progress, cancel) -> None:
    missing = plan.missing()
    rep = _Reporter(plan.name, missing, progress, cancel)
    bar = rep.bar_class()
    for i, f in enumerate(missing):
        rep.start(i, f)
        _download(plan.name, f.path, plan.commit, tqdm_class=bar)
        rep.finish()
    if missing:
        rep.report(force=True)


def _finish(cache_dir, plan: Plan) -> None:
    """The marker of a whole download, then the revision's ref (the cache names only revisions it holds)."""
    m = _marker(cache_dir, plan.name, plan.commit)
    tmp = m.with_suffix(f".tmp{id(plan)}")
    tmp.write_text(json.dumps({"id": plan.ident, "commit": plan.commit,
                               "files": [{"path": f.path, "size": f.size} for f in plan.files]}))
    tmp.replace(m)
    if plan.revision != plan.commit:
        ref = hub.repo_folder(plan.name) / "refs" / plan.revision
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(plan.commit)
