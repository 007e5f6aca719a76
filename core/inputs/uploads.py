"""Uploaded or pasted corpora: saved content-addressed, named as the user named them.

A file is written once as <cache>/uploads/<sha256>.<ext>; a small sidecar <sha256>.name.json
keeps the name it was uploaded under (and any rename). The app and the URL refer to an upload by
its id, ``upload:<sha256>.<ext>``, never by its server path; `resolve` gives the saved file.
`display_name` is how every chart, table, status line and export names a corpus: the uploaded
file's own name, with the text column of a table ("my-corpus.csv [text]").
`preview` describes a corpus before Run (documents, estimated tokens, first rows, warnings).

Owners (issue 37 items 1-2): a browser that uploads a file is one of its owners (`owner=`, its random token).
The bytes are shared by hash; names and ownership belong to a browser: on a shared server (ANISO_SHARED=1) only an
owner renames it, each owner's name is its own (what `display_name` shows to the browser set by `viewing_as`), and
`delete_uploads(..., owner=)` takes the browser off the owners, removing the file when no owner is left.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..base.errors import InputError
from ..base.settings import current as current_settings
from ..base.settings import uploads_dir
from .corpora import BUILTIN_CORPORA, TABLE_SUFFIXES, TEXT_SUFFIXES, load_documents, table_columns
from .modalities.files import check_unpacked

ID_PREFIX = "upload:"
_SUFFIXES = "|".join(s[1:] for s in TEXT_SUFFIXES + TABLE_SUFFIXES + (".zip",))  # zip: images or audio
_ID_RE = re.compile(rf"^{ID_PREFIX}([0-9a-f]{{64}}\.(?:{_SUFFIXES}))$")
_SHA_NAME_RE = re.compile(rf"^([0-9a-f]{{64}})\.(?:{_SUFFIXES})$")
MAX_NAME_CHARS = 80
TEXT_COLUMN_NAMES = ("text", "content", "sentence", "document", "body", "abstract")
# Degenerate-input thresholds of the preview (warnings, never refusals).
FEW_TOKENS = 500  # fewer estimated tokens than this: noisy metrics
TOKENS_PER_WORD = 1.3  # subword tokens per whitespace word of English prose (a rough, stated estimate)
PREVIEW_ROWS = 5


# ----------------------------------------------------------------------------- ids
def is_upload_id(s: str | None) -> bool:
    return bool(s) and bool(_ID_RE.match(str(s)))


def upload_id(path: str | Path) -> str:
    """The id of a saved upload (its content-addressed file name, without the folder)."""
    name = Path(path).name
    if not _SHA_NAME_RE.match(name):
        raise InputError(f"{clean_name(name)} is not a saved upload.")
    return ID_PREFIX + name


def resolve(uid: str, cache_dir: str | Path | None = None) -> Path:
    """The saved file of an upload id; InputError when it is malformed or not on this server."""
    m = _ID_RE.match(str(uid))
    if not m:
        raise InputError(f"Not an upload id this app gave (expected {ID_PREFIX}<sha256>.<ext>): upload the file "
                         "again.")
    p = uploads_dir(cache_dir) / m.group(1)
    if not p.is_file():
        raise InputError("The uploaded corpus is not on this server (uploads stay on the server that received "
                         "them, until its cache is cleared): upload the file again.")
    return p


def _meta_path(path: Path) -> Path:
    return path.with_name(path.name.split(".")[0] + ".name.json")


def _read_meta(path: Path) -> dict:
    try:
        meta = json.loads(_meta_path(path).read_text("utf-8"))
        return meta if isinstance(meta, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_meta(path: Path, meta: dict) -> None:
    mp = _meta_path(path)
    tmp = mp.with_name(mp.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(meta, ensure_ascii=False, indent=1), "utf-8")
    os.replace(tmp, mp)


def clean_name(name: str) -> str:
    """A name fit for labels and file names: one line, no control or invisible characters, bounded."""
    s = "".join(ch for ch in str(name) if ch.isprintable() and ch not in "\u200b\u200c\u200d\u2060\ufeff"
                and not 0x202A <= ord(ch) <= 0x202E and not 0x2066 <= ord(ch) <= 0x2069)
    s = " ".join(s.replace("/", "_").replace("\\", "_").split())
    return s[:MAX_NAME_CHARS] or "unnamed"


# ----------------------------------------------------------------------------- owners
_VIEWER: contextvars.ContextVar[str | None] = contextvars.ContextVar("upload_viewer", default=None)


def viewing_as(token: str | None) -> None:
    """The browser this thread draws for (a Streamlit script run): its own names of its uploads are shown."""
    _VIEWER.set(token)


def viewer() -> str | None:
    return _VIEWER.get()


_NAMES: contextvars.ContextVar[dict | None] = contextvars.ContextVar("upload_names", default=None)


@contextlib.contextmanager
def names_as(names: dict[tuple[str, str], str] | None):
    """Within it, this thread names corpora as `names` says ({(corpus, text column or ""): name}), before
    anything `display_name` reads: a job (the report zip) names the uploads as the browser that queued it sees
    them, whoever else uploaded the same bytes first."""
    token = _NAMES.set({_name_key(c, col): n for (c, col), n in (names or {}).items()})
    try:
        yield
    finally:
        _NAMES.reset(token)


def owners(uid: str, cache_dir: str | Path | None = None) -> set[str]:
    """The browsers that uploaded these bytes (their tokens); empty for an upload of the CLI or an older one."""
    try:
        return set((_read_meta(resolve(uid, cache_dir)).get("owners") or {}))
    except InputError:
        return set()


def may_rename(uid: str, owner: str | None, cache_dir: str | Path | None = None) -> bool:
    """Whether this browser may rename the upload: anyone on a single-user server, an owner on a shared one."""
    return not current_settings().shared or (owner is not None and owner in owners(uid, cache_dir))


# ----------------------------------------------------------------------------- saving
def save_upload(data: bytes, filename: str, cache_dir: str | Path | None = None, name: str | None = None,
                owner: str | None = None) -> Path:
    """Write `data` once as <cache>/uploads/<sha256>.<ext>, remember its name (`name`, else the file's
    own name), return the path. `owner`: the browser that uploaded it (one of the file's owners, with its
    own name for it)."""
    suffix = Path(filename).suffix.lower()
    allowed = TEXT_SUFFIXES + TABLE_SUFFIXES + (".zip",)  # .zip: a folder of images or audio files
    if suffix not in allowed:
        raise InputError(f"{clean_name(filename)}: unsupported file type {suffix or '(none)'}; use one of "
                         f"{', '.join(allowed)}.")
    if not data:
        raise InputError(f"{clean_name(filename)} is empty.")
    st = current_settings()
    limit = st.max_upload_bytes
    if len(data) > limit:
        raise InputError(f"{clean_name(filename)} is larger than the upload limit of {limit // 2**20} MiB "
                         f"(ANISO_MAX_UPLOAD_MB).")
    if suffix == ".zip":  # its declared sizes, before anything is decompressed (the run reads it again)
        _check_zip(data, clean_name(filename), st.max_unpacked_bytes)
    d = uploads_dir(cache_dir)
    d.mkdir(parents=True, exist_ok=True)
    out = d / f"{hashlib.sha256(data).hexdigest()}{suffix}"
    if not out.exists():
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, out)  # whole or not at all
    meta = _read_meta(out)
    shown = clean_name(name or Path(filename).name)
    changed = False
    if owner is not None:
        mine = dict((meta.get("owners") or {}).get(owner) or {})
        if mine.get("name") != shown:
            meta["owners"] = {**(meta.get("owners") or {}), owner: {**mine, "name": shown}}
            changed = True
    # The name shown to those who only open a link: the first one on a shared server (another owner's upload of the
    # same bytes must not rename it for them), else the newest (one user: the same bytes under a new name).
    if meta.get("name") != shown and not (owner is not None and meta.get("name") and current_settings().shared):
        meta["name"] = shown
        changed = True
    if changed:
        _write_meta(out, meta)
    return out


def delete_uploads(uids, cache_dir: str | Path | None = None, owner: str | None = None) -> int:
    """Remove these uploads (their files and remembered names); return the bytes freed. Unknown ids are skipped.

    With `owner` (a browser's *Clear my uploads*): only this browser's ownership goes; the file goes with it when
    no other owner is left (an upload no browser owns, of the CLI, is not this browser's to remove)."""
    freed = 0
    for uid in uids:
        m = _ID_RE.match(str(uid))
        if not m:
            continue
        p = uploads_dir(cache_dir) / m.group(1)
        if owner is not None:
            meta = _read_meta(p)
            left = dict(meta.get("owners") or {})
            if owner not in left:
                continue
            left.pop(owner)
            if left:
                meta["owners"] = left
                _write_meta(p, meta)
                continue
        for f in (p, _meta_path(p)):
            try:
                n = f.stat().st_size
                f.unlink()
                freed += n
            except OSError:
                pass
    return freed


def _check_zip(data: bytes, name: str, max_bytes: int) -> None:
    import io
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            check_unpacked(sum(i.file_size for i in z.infolist()), name, max_bytes)
    except zipfile.BadZipFile:
        raise InputError(f"{name} is not a valid zip archive.") from None


def bundle_files(files: list[tuple[str, bytes]], suffixes: tuple[str, ...]) -> bytes:
    """Several uploaded files (a folder's images or recordings) as one zip, the way a zip upload is
    saved: entries sorted by name, fixed timestamps, so the same files give the same id. A zip among
    them is opened and its members taken (only `suffixes`). InputError when nothing fits.
    """
    import io
    import zipfile

    st = current_settings()
    limit = min(st.max_upload_bytes, st.max_unpacked_bytes)  # the bundle is saved as an upload, uncompressed
    setting = "ANISO_MAX_UPLOAD_MB" if st.max_upload_bytes <= st.max_unpacked_bytes else "ANISO_MAX_UNPACKED_MB"
    members: dict[str, bytes] = {}
    for name, data in files:
        if Path(name).suffix.lower() == ".zip":
            try:
                with zipfile.ZipFile(io.BytesIO(data)) as z:
                    infos = [i for i in z.infolist() if not i.is_dir() and Path(i.filename).suffix.lower() in suffixes]
                    # declared sizes first: nothing is decompressed when the whole would be too large
                    check_unpacked(sum(len(v) for v in members.values()) + sum(i.file_size for i in infos),
                                   clean_name(name), limit, setting)
                    for info in infos:
                        members[f"{Path(name).stem}/{info.filename}"] = z.read(info)
            except (zipfile.BadZipFile, NotImplementedError, RuntimeError):
                raise InputError(f"{clean_name(name)} is not a valid zip archive.") from None
        elif Path(name).suffix.lower() in suffixes:
            members[clean_name(name)] = data
            check_unpacked(sum(len(v) for v in members.values()), f"The bundle of {len(members)} files", limit, setting)
    if not members:
        raise InputError(f"None of the {len(files)} files is one of {', '.join(suffixes)}.")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for name in sorted(members):
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), members[name])
    return out.getvalue()


def save_pasted_text(text: str, cache_dir: str | Path | None = None, owner: str | None = None) -> Path:
    """Pasted text as a .txt corpus (documents separated by blank lines), named by its first words."""
    if not text or not text.strip():
        raise InputError("The pasted text is empty (only blanks): paste some text, or pick a built-in corpus.")
    words = " ".join(text.split()[:4])[:40]
    return save_upload(text.encode("utf-8"), "pasted.txt", cache_dir,
                       name=f"pasted: {words}{'…' if len(text.split()) > 4 else ''}", owner=owner)


def rename(uid: str, name: str, text_column: str | None = None, cache_dir: str | Path | None = None,
           owner: str | None = None) -> str:
    """Give an upload (or one text column of it) the name shown everywhere; '' restores the file's name.

    On a shared server the name is the owner's own (`owner`: a browser that uploaded these bytes; anyone else is
    refused): another owner of the same bytes, and whoever opens a link, keep theirs."""
    path = resolve(uid, cache_dir)
    meta = _read_meta(path)
    shared = current_settings().shared
    if shared and (owner is None or owner not in (meta.get("owners") or {})):
        raise InputError("Only the browser that uploaded this file can rename it: upload the file yourself to give "
                         "it your own name.")
    if shared:
        mine = dict(meta["owners"][owner])
        labels = dict(mine.get("labels") or {})
    else:
        labels = dict(meta.get("labels") or {})
    key = text_column or ""
    if name.strip():
        labels[key] = clean_name(name)
    else:
        labels.pop(key, None)
    if shared:
        meta["owners"] = {**meta["owners"], owner: {**mine, "labels": labels}}
    else:
        meta["labels"] = labels
    _write_meta(path, meta)
    if shared:
        token = _VIEWER.set(owner)
        try:
            return display_name(uid, text_column, cache_dir)
        finally:
            _VIEWER.reset(token)
    return display_name(uid, text_column, cache_dir)


# ----------------------------------------------------------------------------- names
def _upload_file(corpus: str, cache_dir) -> Path | None:
    """The saved file behind an upload id or an upload's path or file name, if it is one."""
    if is_upload_id(corpus):
        try:
            return resolve(corpus, cache_dir)
        except InputError:
            return None
    name = str(corpus).replace("\\", "/").rsplit("/", 1)[-1]
    if _SHA_NAME_RE.match(name):
        p = uploads_dir(cache_dir) / name
        return p if p.exists() else Path(name)
    return None


def _name_key(corpus: str, text_column: str | None) -> tuple[str, str]:
    """One upload's key in `names_as` whatever form names it (its id, its saved path, its file name)."""
    up = _upload_file(str(corpus), None)
    return (up.name if up is not None else str(corpus)), (text_column or "")


def display_name(corpus: str, text_column: str | None = None, cache_dir: str | Path | None = None) -> str:
    """How people see a corpus: a built-in id as is; an upload by its own (or given) name; a file by its
    name; a table's text column in brackets ("my-corpus.csv [text]") unless a rename says otherwise."""
    corpus = str(corpus)
    if corpus in BUILTIN_CORPORA:
        return corpus
    given = _NAMES.get() and _NAMES.get().get(_name_key(corpus, text_column))
    if given:  # a job's names, those of the browser that queued it (`names_as`)
        return str(given)
    col = f" [{text_column}]" if text_column else ""
    up = _upload_file(corpus, cache_dir)
    if up is not None:
        meta = _read_meta(up) if up.parent.name == "uploads" else {}
        mine = (meta.get("owners") or {}).get(_VIEWER.get()) or {}  # the viewing browser's own names come first
        given = (mine.get("labels") or {}).get(text_column or "") or (meta.get("labels") or {}).get(text_column or "")
        if given:
            return str(given)
        if mine.get("name") or meta.get("name"):
            return f"{mine.get('name') or meta['name']}{col}"
        m = _SHA_NAME_RE.match(up.name)
        return f"upload {m.group(1)[:8] if m else up.name}{up.suffix}{col}"  # saved before names were kept
    if is_upload_id(corpus):
        return f"{corpus} (not on this server){col}"
    return f"{corpus.replace(chr(92), '/').rsplit('/', 1)[-1]}{col}"


def slug(name: str) -> str:
    """A display name as part of a file name ("my-corpus.csv [text]" -> "my-corpus.csv_text")."""
    s = re.sub(r"[^A-Za-z0-9._-]+", "_", str(name)).strip("_.")
    return s[:60] or "corpus"


# ----------------------------------------------------------------------------- preview
@dataclass
class Preview:
    """What a corpus holds, shown before Run."""

    name: str
    kind: str  # "text" (documents separated by blank lines) or "table" (one document per row)
    n_documents: int
    n_words: int
    est_tokens: int
    first: list[str]  # the first documents, shortened
    columns: list[str] = field(default_factory=list)
    text_column: str | None = None
    detected_column: str | None = None
    warnings: list[str] = field(default_factory=list)


def detect_text_column(path: str | Path) -> str | None:
    """The column that most looks like text: a conventional name, else the string column with the
    longest mean length among the first rows."""
    import pandas as pd

    cols = table_columns(path)
    for c in cols:
        if c.lower() in TEXT_COLUMN_NAMES:
            return c
    p = Path(path)
    s = p.suffix.lower()
    try:
        if s == ".parquet":
            df = pd.read_parquet(p).head(200)
        elif s == ".jsonl":
            df = pd.read_json(p, lines=True, nrows=200)
        else:
            df = pd.read_csv(p, sep="\t" if s == ".tsv" else ",", nrows=200)
    except Exception:  # noqa: BLE001 - table_columns already read it; keep the first column then
        return cols[0] if cols else None
    best, best_len = None, -1.0
    for c in df.columns:
        v = df[c].dropna()
        if v.empty or pd.api.types.is_numeric_dtype(v):
            continue
        mean_len = float(v.astype(str).str.len().mean())
        if mean_len > best_len:
            best, best_len = str(c), mean_len
    return best if best is not None else (cols[0] if cols else None)


def _numeric_share(docs: list[str]) -> float:
    num = re.compile(r"^[\s\d.,:;+\-eE%/()]*$")
    return sum(bool(num.match(d)) for d in docs) / max(len(docs), 1)


def preview(corpus: str, text_column: str | None = None, cache_dir: str | Path | None = None) -> Preview:
    """Documents, estimated tokens, first rows and warnings of an upload id or a file corpus.

    Raises InputError when the corpus cannot be read at all (the reader's message).
    """
    path = resolve(corpus, cache_dir) if is_upload_id(corpus) else Path(corpus)
    name = display_name(corpus, text_column, cache_dir)
    is_table = path.suffix.lower() in TABLE_SUFFIXES
    cols, detected = ([], None)
    if is_table:
        cols = table_columns(path)
        detected = detect_text_column(path)
        text_column = text_column if text_column in cols else detected
    docs = load_documents(str(path), text_column)
    n_words = sum(len(d.split()) for d in docs)
    est = int(round(n_words * TOKENS_PER_WORD))
    warns = []
    if est < FEW_TOKENS:
        warns.append(f"Only about {est:,} tokens: every metric will be noisy, and with fewer than two documents "
                     "there is no confidence interval. Add text, or use a built-in corpus.")
    if len(docs) < 2:
        warns.append("One document only: cross-sequence cosine and the bootstrap interval need at least two "
                     "documents (separate documents with a blank line, or one row each).")
    if _numeric_share(docs) > 0.5:
        warns.append(f"{_numeric_share(docs):.0%} of the {'rows' if is_table else 'documents'} are numbers only"
                     + (f": is {text_column!r} the text column?" if is_table else "."))
    first = [d if len(d) <= 160 else d[:157] + "…" for d in docs[:PREVIEW_ROWS]]
    return Preview(name=name, kind="table" if is_table else "text", n_documents=len(docs), n_words=n_words,
                   est_tokens=est, first=first, columns=cols, text_column=text_column, detected_column=detected,
                   warnings=warns)
