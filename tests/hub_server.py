"""A model hub on 127.0.0.1 that speaks what huggingface_hub 2.4 asks, for the tests (HF_ENDPOINT=server.url).

    server = HubServer([repo, ...]).start()     # a free port; server.url
    server.requests                             # every request, as the server saw it
    server.cut("org/name", "model.safetensors", after=1_000_000)   # the next GET of it breaks after 1 MB
    server.throttle(4_000_000)                  # bodies at most 4 MB/s (a download slow enough to watch)

No maintained server fits (olah, checked for issue 39: its local-mirror mode reads git repositories, answers no
ranges and no gated repos, and reads each LFS file whole into memory), so this one follows the client's code
(huggingface_hub/hf_api.py, file_download.py, utils/_http.py) and the hub's documented replies:

- `GET /api/models/{id}[/revision/{rev}]` (?blobs=true: sizes, blob ids and LFS sha256 of every file): model
  info with `sha` (the commit), `siblings`, `gated`, `config` (architectures, model_type, auto_map);
- `GET /api/models/{id}/refs`: branches and tags with their commits;
- `GET /api/models/{id}/tree/{rev}[/{path}]`, `POST /api/models/{id}/paths-info/{rev}`: the file listing;
- `HEAD|GET /{id}/resolve/{rev}/{path}`: `X-Repo-Commit`, `ETag` (an LFS file's sha256, else its git blob id),
  `X-Linked-Etag`/`X-Linked-Size` for LFS files, `Content-Length`, `Accept-Ranges`, and `Range: bytes=a-[b]`
  answered with 206 and `Content-Range`;
- errors as the hub words them (`X-Error-Code`): an unknown repository 401 RepoNotFound, an unknown revision
  404 RevisionNotFound, an unknown file 404 EntryNotFound (with the commit); a gated repository's files 401
  GatedRepo without a token, 403 GatedRepo with a token that has no access (its model info is public).

Weights are served from the files they are built from (nothing copied); a commit id is the sha1 of its files.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

LFS_MIN_BYTES = 10 * 2**20  # files at least this large, and weights, are LFS files (as the hub's .gitattributes make them)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack", ".gguf", ".onnx")
DATE = "2024-05-01T12:00:00.000Z"


@dataclass
class RepoFile:
    """One file of a commit: its bytes on disk or in memory."""

    path: str
    source: Path | bytes

    def __post_init__(self):
        data = self.source if isinstance(self.source, bytes) else None
        self.size = len(data) if data is not None else Path(self.source).stat().st_size
        self._sha256: str | None = None
        self._oid: str | None = None

    @property
    def lfs(self) -> bool:
        return self.size >= LFS_MIN_BYTES or self.path.endswith(WEIGHT_SUFFIXES)

    def _digest(self, algo, prefix: bytes = b"") -> str:
        h = algo(prefix)
        if isinstance(self.source, bytes):
            h.update(self.source)
        else:
            with open(self.source, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 22), b""):
                    h.update(chunk)
        return h.hexdigest()

    @property
    def sha256(self) -> str:
        if self._sha256 is None:
            self._sha256 = self._digest(hashlib.sha256)
        return self._sha256

    @property
    def oid(self) -> str:
        """The git blob id: of the file itself, or of its LFS pointer."""
        if self._oid is None:
            if self.lfs:
                pointer = self.pointer()
                self._oid = hashlib.sha1(b"blob %d\0" % len(pointer) + pointer).hexdigest()
            else:
                self._oid = self._digest(hashlib.sha1, b"blob %d\0" % self.size)
        return self._oid

    def pointer(self) -> bytes:
        return (f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\nsize {self.size}\n").encode()

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.oid

    def read(self, start: int, end: int):
        """The bytes [start, end) in chunks."""
        if isinstance(self.source, bytes):
            yield self.source[start:end]
            return
        with open(self.source, "rb") as f:
            f.seek(start)
            left = end - start
            while left > 0:
                chunk = f.read(min(left, 1 << 16))
                if not chunk:
                    return
                left -= len(chunk)
                yield chunk

    def entry(self, blobs: bool = True) -> dict:
        d = {"rfilename": self.path}
        if blobs:
            d.update(size=self.size, blobId=self.oid)
            if self.lfs:
                d["lfs"] = {"size": self.size, "sha256": self.sha256, "pointerSize": len(self.pointer())}
        return d

    def tree_entry(self) -> dict:
        d = {"type": "file", "oid": self.oid, "size": self.size, "path": self.path}
        if self.lfs:
            d["lfs"] = {"oid": self.sha256, "size": self.size, "pointerSize": len(self.pointer())}
        return d


@dataclass
class HubRepo:
    """A model repository: commits (files by path), branches and tags naming them; gated ones admit `tokens`."""

    id: str
    gated: bool = False
    tokens: tuple[str, ...] = ()
    commits: dict[str, dict[str, RepoFile]] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    def commit(self, files: dict[str, Path | bytes | str], branches=(), tags=(), message: str = "") -> str:
        """Add a commit of `files` (path -> file, bytes or text), pointed to by `branches` and `tags`; its id."""
        got = {p: RepoFile(p, s.encode() if isinstance(s, str) else s) for p, s in sorted(files.items())}
        h = hashlib.sha1(f"{self.id}\n{message}\n".encode())
        for p, f in got.items():
            h.update(f"{p} {f.oid}\n".encode())
        sha = h.hexdigest()
        self.commits[sha] = got
        for b in branches:
            self.branches[b] = sha
        for t in tags:
            self.tags[t] = sha
        return sha

    def resolve(self, rev: str | None) -> str | None:
        rev = rev or "main"
        if rev in self.commits:
            return rev
        return self.branches.get(rev) or self.tags.get(rev)


class HubServer:
    """The hub of `repos` on 127.0.0.1 (see the module docstring). Use as a context manager, or start()/stop()."""

    def __init__(self, repos: list[HubRepo]):
        self.repos = {r.id: r for r in repos}
        self.requests: list[dict] = []
        self._cuts: dict[tuple[str, str], int] = {}
        self.rate: float | None = None  # bytes per second of a body, None: as fast as it goes
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    # --------------------------------------------------------------------------- control
    def start(self) -> "HubServer":
        server = self

        class Handler(_Handler):
            hub = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True, name="test-hub").start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def add(self, repo: HubRepo) -> HubRepo:
        self.repos[repo.id] = repo
        return repo

    def cut(self, repo_id: str, path: str, after: int) -> None:
        """The next GET of `path` in `repo_id` longer than `after` bytes sends `after` bytes of its body, then the
        connection is dropped."""
        with self._lock:
            self._cuts[(repo_id, path)] = int(after)

    def throttle(self, bytes_per_s: float | None) -> None:
        self.rate = bytes_per_s

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def downloads(self, repo_id: str | None = None, path: str | None = None) -> list[dict]:
        """The GETs of files (not HEADs, not the API), with the bytes each sent."""
        return [r for r in list(self.requests) if r["kind"] == "file" and r["method"] == "GET"
                and (repo_id is None or r["repo"] == repo_id) and (path is None or r["file"] == path)]

    def _log(self, **kw) -> dict:
        with self._lock:
            self.requests.append(kw)
        return kw

    def _take_cut(self, repo_id: str, path: str, length: int) -> int | None:
        """The cut planned for this GET of `length` bytes (a GET shorter than the cut, such as a header's range,
        leaves it for the next)."""
        with self._lock:
            after = self._cuts.get((repo_id, path))
            if after is None or length <= after:
                return None
            return self._cuts.pop((repo_id, path))


def _error(code: int, error_code: str, message: str, headers: dict | None = None) -> tuple[int, dict, bytes]:
    body = json.dumps({"error": message}).encode()
    return code, {"X-Error-Code": error_code, "X-Error-Message": message, "Content-Type": "application/json",
                  **(headers or {})}, body


class _Handler(BaseHTTPRequestHandler):
    hub: HubServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):  # quiet
        pass

    # --------------------------------------------------------------------------- routing
    def do_HEAD(self):
        self._route("HEAD")

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")

    def _split_repo(self, parts: list[str]) -> tuple[str, list[str]]:
        """(repo id, the rest): `org/name` when that is a repository here or the path has room for it, else `name`."""
        if len(parts) >= 2 and "/".join(parts[:2]) in self.hub.repos:
            return "/".join(parts[:2]), parts[2:]
        if parts and parts[0] in self.hub.repos:
            return parts[0], parts[1:]
        if len(parts) >= 2 and parts[1] not in ("revision", "refs", "tree", "paths-info", "resolve"):
            return "/".join(parts[:2]), parts[2:]
        return (parts[0] if parts else ""), parts[1:]

    def _route(self, method: str):
        u = urlsplit(self.path)
        parts = [unquote(p) for p in u.path.strip("/").split("/")]
        query = parse_qs(u.query)
        if parts[:2] == ["api", "models"]:
            repo_id, rest = self._split_repo(parts[2:])
            self._api(method, repo_id, rest, query)
        else:
            repo_id, rest = self._split_repo(parts)
            if len(rest) >= 3 and rest[0] == "resolve":
                self._file(method, repo_id, rest[1], "/".join(rest[2:]))
            else:
                self._send(method, *_error(404, "EntryNotFound", "Not found"), kind="other")

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization") or ""
        return auth[7:].strip() if auth.lower().startswith("bearer ") else None

    def _send(self, method: str, code: int, headers: dict, body: bytes, **log):
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, str(v))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(body)
        self.hub._log(method=method, status=code, path=self.path, auth=self._token() is not None, **log)

    # --------------------------------------------------------------------------- the API
    def _api(self, method: str, repo_id: str, rest: list[str], query: dict):
        repo = self.hub.repos.get(repo_id)
        log = dict(kind="api", repo=repo_id, file=None, range=None, sent=0)
        if repo is None:
            self._send(method, *_error(401, "RepoNotFound", "Repository not found"), **log)
            return
        if rest[:1] == ["refs"]:
            def refs(d, kind):
                return [{"name": n, "ref": f"refs/{kind}/{n}", "targetCommit": c} for n, c in sorted(d.items())]
            body = {"branches": refs(repo.branches, "heads"), "tags": refs(repo.tags, "tags"), "converts": []}
            self._send(method, 200, {"Content-Type": "application/json"}, json.dumps(body).encode(), op="refs", **log)
            return
        op, rev = "info", None
        if rest[:1] == ["revision"] and len(rest) >= 2:
            rev = "/".join(rest[1:])
        elif rest[:1] in (["tree"], ["paths-info"]) and len(rest) >= 2:
            op, rev = rest[0], rest[1]
        commit = repo.resolve(rev)
        log.update(op=op, revision=rev or "main")
        if commit is None:
            self._send(method, *_error(404, "RevisionNotFound", f"Invalid rev id: {rev}"), **log)
            return
        files = repo.commits[commit]
        if op == "tree":
            prefix = "/".join(rest[2:]).strip("/")
            body = [f.tree_entry() for p, f in files.items() if not prefix or p.startswith(prefix + "/")]
        elif op == "paths-info":
            n = int(self.headers.get("Content-Length") or 0)
            form = parse_qs(self.rfile.read(n).decode()) if n else {}
            wanted = set(form.get("paths", [])) | set(form.get("paths[]", []))
            body = [f.tree_entry() for p, f in files.items() if p in wanted]
        else:
            blobs = query.get("blobs", ["false"])[0].lower() == "true"
            cfg = {}
            if "config.json" in files:
                try:
                    raw = json.loads(b"".join(files["config.json"].read(0, files["config.json"].size)))
                    cfg = {k: raw[k] for k in ("architectures", "model_type", "auto_map") if k in raw}
                except ValueError:
                    cfg = {}
            body = {"_id": hashlib.sha1(repo.id.encode()).hexdigest()[:24], "id": repo.id, "modelId": repo.id,
                    "author": repo.id.split("/")[0], "sha": commit, "lastModified": DATE, "createdAt": DATE,
                    "private": False, "gated": "manual" if repo.gated else False, "disabled": False,
                    "downloads": 0, "likes": 0, "tags": ["transformers"], "library_name": "transformers",
                    "config": cfg, "siblings": [f.entry(blobs) for f in files.values()]}
        self._send(method, 200, {"Content-Type": "application/json"}, json.dumps(body).encode(), **log)

    # --------------------------------------------------------------------------- files
    def _file(self, method: str, repo_id: str, rev: str, path: str):
        repo = self.hub.repos.get(repo_id)
        log = dict(kind="file", repo=repo_id, file=path, revision=rev, range=self.headers.get("Range"), sent=0)
        if repo is None:
            self._send(method, *_error(401, "RepoNotFound", "Repository not found"), **log)
            return
        if repo.gated and self._token() not in repo.tokens:
            no_token = self._token() is None
            why = (f"Access to model {repo.id} is restricted. You must have access to it and be authenticated to "
                   f"access it. Please log in." if no_token else
                   f"Access to model {repo.id} is restricted and you are not in the authorized list.")
            self._send(method, *_error(401 if no_token else 403, "GatedRepo", why), **log)
            return
        commit = repo.resolve(rev)
        if commit is None:
            self._send(method, *_error(404, "RevisionNotFound", f"Invalid rev id: {rev}"), **log)
            return
        f = repo.commits[commit].get(path)
        if f is None:
            self._send(method, *_error(404, "EntryNotFound", f"{path} does not exist on {rev}",
                                       {"X-Repo-Commit": commit}), **log)
            return
        start, end, code = 0, f.size, 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            start = int(a or 0)
            end = min(f.size, int(b) + 1) if b else f.size
            if start >= f.size:
                self._send(method, 416, {"Content-Range": f"bytes */{f.size}"}, b"", **log)
                return
            code = 206
        headers = {"X-Repo-Commit": commit, "ETag": f'"{f.etag}"', "Accept-Ranges": "bytes",
                   "Content-Type": "application/octet-stream", "Content-Length": str(end - start)}
        if f.lfs:
            headers.update({"X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(f.size)})
        if code == 206:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{f.size}"
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        entry = self.hub._log(method=method, status=code, path=self.path, auth=self._token() is not None,
                              commit=commit, **log)
        if method == "HEAD":
            return
        cut = self.hub._take_cut(repo_id, path, end - start)
        t0 = time.monotonic()
        try:
            for chunk in f.read(start, end):
                if cut is not None and entry["sent"] + len(chunk) > cut:
                    self.wfile.write(chunk[:max(0, cut - entry["sent"])])
                    self.wfile.flush()
                    entry["sent"] = cut
                    entry["cut"] = True
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(chunk)
                entry["sent"] += len(chunk)
                rate = self.hub.rate
                if rate:  # as slow as the throttle says: sleep until the bytes sent are due
                    due = entry["sent"] / rate - (time.monotonic() - t0)
                    if due > 0:
                        time.sleep(due)
        except (BrokenPipeError, ConnectionResetError, OSError):  # the client went away (a cancelled download)
            entry["aborted"] = True
            self.close_connection = True
