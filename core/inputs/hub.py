"""The model hub as seen from this machine: whether it answers, what a revision of a repository is (its commit
and files), what the local hub cache (HF_HOME) holds, and each failure as one line that says what to do.
No torch; huggingface_hub (the real client, against HF_ENDPOINT) is imported inside the functions.

    resolve("EleutherAI/pythia-70m@step1000") -> Revision(name, revision, commit, files, source)

core/inputs/models.py (identifiers, fingerprints), core/inputs/hub_fetch.py (sizes and downloads) and core/inputs/hub_series.py
(checkpoint series) all ask these questions; they live here, below all three.
"""

from __future__ import annotations

import difflib
import re
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable
from urllib.parse import urlparse

from ..base.errors import InputError
from ..base.integrity import file_sha256, is_weight_file
from ..base.settings import current, hub_cache_dir, hub_endpoint, hub_offline

HUB_NAME = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9._-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")


def split(ident: str) -> tuple[str, str | None]:
    """("org/name", "step1000") for "org/name@step1000"; (ident, None) without a revision."""
    name, _, rev = str(ident).partition("@")
    return name, (rev or None)


def _local_snapshot(name: str, revision: str) -> Path | None:
    """The snapshot folder of `name@revision` in the local hub cache (HF_HOME), None when it is not there."""
    from huggingface_hub import try_to_load_from_cache

    try:
        got = try_to_load_from_cache(name, "config.json", revision=revision, cache_dir=str(hub_cache_dir()))
    except Exception:  # noqa: BLE001 - a malformed name or cache: treat as not cached
        return None
    return Path(got).parent if isinstance(got, str) else None  # .../snapshots/<commit>/config.json


def repo_folder(name: str) -> Path:
    """The repository's folder in the local hub cache (`models--org--name`), whether or not it exists."""
    return hub_cache_dir() / ("models--" + name.replace("/", "--"))


def snapshot_folder(name: str, commit: str) -> Path:
    return repo_folder(name) / "snapshots" / commit


def cached_revisions(name: str) -> dict[str, str]:
    """{revision: commit} of `name` in the local hub cache: its refs (branches and tags it was asked by) and the
    commits it holds a snapshot of (by commit)."""
    root = repo_folder(name)
    out = {}
    refs = root / "refs"
    if refs.is_dir():
        for p in sorted(refs.rglob("*")):
            if p.is_file():
                try:
                    out[str(p.relative_to(refs))] = p.read_text().strip()
                except OSError:
                    continue
    snaps = root / "snapshots"
    if snaps.is_dir():
        for p in sorted(snaps.iterdir()):
            if p.is_dir() and p.name not in out.values():
                out[p.name[:12]] = p.name
    return out


def cache_note(name: str) -> str:
    """What the local hub cache holds of `name`, in words."""
    held = cached_revisions(name)
    where = str(hub_cache_dir())
    if not held:
        return f"the local hub cache ({where}) holds nothing of {name}"
    return (f"the local hub cache ({where}) holds {name} at " +
            ", ".join(f"{r} ({c[:12]})" if r != c[:12] else r for r, c in held.items()))


def local_commit(name: str, revision: str) -> str | None:
    """The commit of `name@revision` in the local hub cache (HF_HOME), None when it is not there."""
    snap = _local_snapshot(name, revision)
    return snap.name if snap is not None else None


HUB_PROBE: dict[str, tuple[float, bool]] = {}  # endpoint -> (when, reachable), remembered for a minute


def hub_reachable(timeout: float | None = None) -> bool:
    """Whether the model hub answers a TCP connection within `timeout` seconds (ANISO_HUB_TIMEOUT_S).

    Probed in a thread so that a slow DNS lookup cannot hold the caller longer than the timeout;
    without it an unreachable hub costs ~48 s of retries inside transformers."""
    if hub_offline():
        return False
    endpoint = hub_endpoint()
    now = time.monotonic()
    if endpoint in HUB_PROBE and now - HUB_PROBE[endpoint][0] < 60:
        return HUB_PROBE[endpoint][1]
    u = urlparse(endpoint)
    host, port = u.hostname or "huggingface.co", u.port or (80 if u.scheme == "http" else 443)
    timeout = timeout or current().hub_timeout_s
    result = [False]

    def probe():
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result[0] = True
        except OSError:
            pass

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout)
    HUB_PROBE[endpoint] = (now, result[0])
    return result[0]


def _lfs_sha(path: Path) -> str | None:
    """The sha256 of a file of the local hub cache from its blob's name (an LFS blob is named by it)."""
    try:
        blob = path.resolve().name
    except OSError:
        return None
    return blob if len(blob) == 64 and all(c in "0123456789abcdef" for c in blob) else None


def local_weight_shas(name: str, revision: str) -> dict[str, str] | None:
    """{weight file: sha256} of `name@revision` in the local hub cache, None when it is not there."""
    snap = _local_snapshot(name, revision)
    if snap is None:
        return None
    files = [p for p in sorted(snap.iterdir()) if is_weight_file(p.name) and p.exists()]
    return {p.name: _lfs_sha(p) or file_sha256(p) for p in files} or None


# ----------------------------------------------------------------------------- revisions
@dataclass(frozen=True)
class HubFile:
    path: str
    size: int | None
    sha256: str | None  # an LFS file's (the hub lists it); None for a file kept in git


@dataclass(frozen=True)
class Revision:
    """A revision of a hub repository resolved to its commit. `files`: the hub's listing at that commit (None when
    resolved from the local hub cache: offline, or the hub unreachable); `source`: "hub" or "cache"."""

    name: str
    revision: str
    commit: str
    files: tuple[HubFile, ...] | None
    source: str = "hub"
    gated: bool = False

    @property
    def ident(self) -> str:
        return f"{self.name}@{self.revision}" if self.revision != "main" else self.name


_RESOLVED: dict[tuple[str, str, str], tuple[float, Revision]] = {}  # (endpoint, name, rev) -> (when, revision)
RESOLVE_TTL_S = 60.0  # a branch may move: asked again after a minute
_lock = threading.Lock()


def resolve(ident: str, suggest: Iterable[str] = ()) -> Revision:
    """The commit and files of hub model `ident` (`org/name[@revision]`, default revision main): one call of the
    hub's model-info API (remembered for a minute per process; a commit id is asked once). Offline
    (HF_HUB_OFFLINE=1), or when the hub cannot be reached, the commit the local hub cache holds for it.

    InputError with one line that says what to do: no such model (with the closest of `suggest`), an unknown
    revision (with the repository's branches and tags), the hub unreachable and the revision not cached (with
    what the cache holds), any other refusal of the hub (its status and message)."""
    name, rev = split(ident)
    rev = rev or "main"
    if not HUB_NAME.match(name):
        raise InputError(f"{name!r} is not a hub model id: write organisation/name[@revision] (e.g. gpt2, "
                         f"EleutherAI/pythia-70m@step1000).")
    if hub_offline():
        return _from_cache(name, rev, "the model hub is off (HF_HUB_OFFLINE=1)")
    key = (hub_endpoint(), name, rev)
    now = time.monotonic()
    with _lock:
        got = _RESOLVED.get(key)
    if got and (COMMIT.match(rev) or now - got[0] < RESOLVE_TTL_S):
        return got[1]
    if not hub_reachable():
        return _from_cache(name, rev, f"the model hub ({hub_endpoint()}) cannot be reached from here")
    from huggingface_hub import HfApi

    try:
        info = HfApi(endpoint=hub_endpoint()).model_info(name, revision=rev, files_metadata=True,
                                                          timeout=max(10.0, current().hub_timeout_s))
    except Exception as e:  # noqa: BLE001 - every refusal of the hub becomes one line (`explain`)
        if is_transport_error(e):
            return _from_cache(name, rev, f"the model hub ({hub_endpoint()}) did not answer ({type(e).__name__})")
        raise explain(e, name, rev, suggest) from None
    files = tuple(HubFile(s.rfilename, s.size, getattr(s.lfs, "sha256", None) if s.lfs else None)
                  for s in info.siblings or [])
    out = Revision(name, rev, str(info.sha), files, "hub", bool(info.gated))
    with _lock:
        _RESOLVED[key] = (now, out)
        _RESOLVED[(hub_endpoint(), name, out.commit)] = (now, out)
    return out


def known_commit(name: str, rev: str) -> str | None:
    """The commit of `name@rev` this process resolved lately, or the local hub cache names: no hub call."""
    if COMMIT.match(rev):
        return rev
    with _lock:
        got = _RESOLVED.get((hub_endpoint(), name, rev))
    return got[1].commit if got else local_commit(name, rev)


def _from_cache(name: str, rev: str, why: str) -> Revision:
    commit = rev if COMMIT.match(rev) and snapshot_folder(name, rev).is_dir() else local_commit(name, rev)
    if commit is None:
        raise InputError(f"Model {name}@{rev} cannot be fetched: {why}, and {cache_note(name)}. Use a cached "
                         f"revision, or run where the hub answers.")
    return Revision(name, rev, commit, None, "cache")


def is_transport_error(e: Exception) -> bool:
    """A failure to talk to the hub (connection, timeout, broken reply), not an answer of the hub."""
    import httpx2
    from huggingface_hub.errors import OfflineModeIsEnabled

    return isinstance(e, (httpx2.TransportError, OfflineModeIsEnabled, ConnectionError, TimeoutError))


def explain(e: Exception, name: str, rev: str, suggest: Iterable[str] = ()) -> InputError:
    """One line for a refusal of the hub about `name@rev`, saying what to do."""
    from huggingface_hub import errors as E

    status = getattr(getattr(e, "response", None), "status_code", None)
    if isinstance(e, E.GatedRepoError):
        if status == 403:
            return InputError(f"Model {name} is gated and the token in HF_TOKEN has no access to it: request access "
                              f"on its page ({hub_endpoint()}/{name}), then run again.")
        return InputError(f"Model {name} is gated: it needs access; request it on its page ({hub_endpoint()}/{name}), "
                          f"then set HF_TOKEN to a token of that account (for a job, in the worker's environment).")
    if isinstance(e, E.RevisionNotFoundError):
        return InputError(f"Model {name} has no revision {rev!r}: {_refs_note(name)}.")
    if isinstance(e, E.RepositoryNotFoundError):
        close = difflib.get_close_matches(name.lower(), [s.lower() for s in suggest], n=3, cutoff=0.5)
        names = {s.lower(): s for s in suggest}
        hint = (f"; closest built-in models: {', '.join(names[c] for c in close)}" if close else
                "; `python -m core models` lists the built-in ones")
        return InputError(f"No such model {name!r} on the hub ({hub_endpoint()}), or it is private{hint}.")
    if isinstance(e, E.RemoteEntryNotFoundError):
        return InputError(f"Model {name}@{rev} has no file {getattr(e, 'filename', '') or 'that was asked'}: "
                          f"{(str(e).splitlines() or [''])[-1]}")
    first = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)
    return InputError(f"The model hub refused {name}@{rev}" + (f" ({status})" if status else "") + f": {first}")


def _refs_note(name: str) -> str:
    from huggingface_hub import HfApi

    try:
        refs = HfApi(endpoint=hub_endpoint()).list_repo_refs(name)
    except Exception:  # noqa: BLE001 - only a hint: the revision is unknown either way
        return "pick one of its branches or tags (on its page), or a commit id"
    branches = ", ".join(b.name for b in refs.branches) or "none"
    tags = ", ".join(t.name for t in refs.tags) or "none"
    return f"its branches are {branches}; its tags {tags} (or give a commit id)"
