"""What the URL, the sidebar and a queued job may name on this server: the access policy.

    check_model / check_corpus / check_modal_corpus / check_more_corpus   an identifier from the URL or the sidebar
    check_job_params                                                      a job's parameters, re-checked by the worker
    url_ident / split_corpus                                              how identifiers are written in a URL

Every refusal is decided on the text and the server's settings (core.base.settings), never on what exists here,
with one message whatever the reason. The dashboard's selection (core/studies/selection.py) and the jobs (a job's
parameters, re-checked where it runs: core/entry/job_run.py) both use it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..base.errors import InputError
from ..base.escape import shorten, visible
from ..base.settings import Settings, cache_root, uploads_dir
from ..base.settings import current as current_settings
from .checkpoints import RUN_NAME, is_trained
from .checkpoints import parse as parse_trained
from .corpora import BUILTIN_CORPORA, TABLE_SUFFIXES, TEXT_SUFFIXES, UPLOAD_PREFIX
from .hub_series import is_hub_series
from .modalities import MODAL_CORPORA
from .models import BUILTIN_MODELS, control_seed
from .uploads import is_upload_id, upload_id

MAX_IDENT_CHARS = 255  # the longest model, corpus or folder name from the URL (a file name's limit)
DATA_PREFIX = "data:"
# A hub identifier: name or org/name, optional @revision (branch, tag or commit).
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?(@[A-Za-z0-9._/-]{1,100})?")


def split_corpus(entry: str) -> tuple[str, str | None]:
    """ "upload:<sha256>.csv#text" -> ("upload:<sha256>.csv", "text"); "wiki-fr" -> ("wiki-fr", None)."""
    c, _, col = str(entry).partition("#")
    return c, (col or None)


def quote_ident(ident: str) -> str:
    """An identifier as a message quotes it: visible characters, at most 80."""
    return repr(shorten(visible(ident), 80))


def _is_path(ident: str) -> bool:
    """Written as a path (decided on the text alone: the answer must not depend on what exists)."""
    name = ident.split("@", 1)[0]
    return (
        ident.startswith((DATA_PREFIX, "/", ".", "~", "\\"))
        or "\\" in name
        or name.count("/") > 1
        or (len(name) > 1 and name[1] == ":")
    )


def _allowed_path(ident: str, what: str, allowed: str, st: Settings) -> str:
    """The absolute path `ident` names, if this server lets the URL/sidebar name it."""
    raw = ident[len(DATA_PREFIX) :] if ident.startswith(DATA_PREFIX) else ident
    refused = InputError(
        f"{what} {quote_ident(ident)} is not available here: {allowed}. Other server paths "
        f"work from the command line (python -m core)."
    )
    # No path can hold these: refused on the text, before a file system call could fail on them.
    if "\x00" in raw or len(raw) > 4096 or any(len(part.encode()) > 255 for part in re.split(r"[/\\]", raw)):
        raise refused
    if st.allow_server_paths and not ident.startswith(DATA_PREFIX):
        return str(Path(raw).expanduser().resolve())
    if st.data_dir is None or raw.startswith("~"):
        raise refused
    p = Path(raw)
    # realpath follows symbolic links: a link inside the data directory that leads out is refused too.
    p = Path(os.path.realpath(p if p.is_absolute() else st.data_dir / p))
    if p != st.data_dir and not p.is_relative_to(st.data_dir):
        raise refused
    return str(p)


def check_corpus(ident: str, settings: Settings | None = None) -> str:
    """Validate a corpus identifier from the URL or the sidebar; return its canonical form.

    Built-in ids and upload ids are returned as they are; a file in the data directory
    (``data:rel/path.txt``, a relative path, or an absolute one inside it) as its absolute path.
    The message of a refused identifier is the same whether or not such a file exists.
    """
    ident = str(ident).strip()
    if ident in BUILTIN_CORPORA:
        return ident
    if ident.startswith(UPLOAD_PREFIX):
        if not is_upload_id(ident):
            raise InputError(f"Corpus {quote_ident(ident)} is not an upload id this app gave; upload the file again.")
        return ident
    st = settings or current_settings()
    where = "in the data directory (data:<file>)" if st.data_dir else "(no data directory is configured)"
    path = _allowed_path(
        ident, "Corpus", f"name a built-in corpus ({', '.join(BUILTIN_CORPORA)}), upload a file, or name a file {where}", st
    )
    suffix = Path(path).suffix.lower()
    if suffix not in TEXT_SUFFIXES + TABLE_SUFFIXES:
        raise InputError(f"Unsupported corpus file type {suffix or '(none)'!r}: use {', '.join(TEXT_SUFFIXES + TABLE_SUFFIXES)}.")
    return path


def check_modal_corpus(ident: str, modality: str, settings: Settings | None = None) -> str:
    """Validate an image or speech corpus from the URL or the sidebar; return its canonical form.

    A built-in corpus of that modality or an upload id (a zip) as it is; a file or folder in the data
    directory as its absolute path. Decided before anything is read or hashed, on the text alone.
    """
    ident = str(ident).strip()
    what = {"image": "Image corpus", "audio": "Speech corpus"}[modality]
    builtins = [k for k, c in MODAL_CORPORA.items() if c.modality == modality]
    if ident in MODAL_CORPORA:
        if ident not in builtins:
            raise InputError(
                f"{what} {quote_ident(ident)} holds {MODAL_CORPORA[ident].modality}: use one of {', '.join(builtins)}."
            )
        return ident
    if ident.startswith(UPLOAD_PREFIX):
        if not is_upload_id(ident) or not ident.endswith(".zip"):
            raise InputError(f"{what} {quote_ident(ident)} is not an upload id this app gave; upload the files again.")
        return ident
    st = settings or current_settings()
    where = "in the data directory (data:<folder>)" if st.data_dir else "(no data directory is configured)"
    return _allowed_path(
        ident, what, f"name a built-in corpus ({', '.join(builtins)}), upload files, or name a folder or zip {where}", st
    )


def check_more_corpus(entry: str, settings: Settings | None = None) -> str:
    """A corpus to compare (``<id>[#<text column>]``): a built-in text corpus or an upload id."""
    base = split_corpus(entry)[0]
    if base not in BUILTIN_CORPORA and not is_upload_id(base):
        raise InputError(
            f"Corpus {quote_ident(base)} to compare is not a built-in corpus "
            f"({', '.join(BUILTIN_CORPORA)}) nor an upload of this app."
        )
    return str(entry)


def check_model(ident: str, settings: Settings | None = None) -> str:
    """Validate a model identifier from the URL or the sidebar; return its canonical form.

    Built-in ids as they are; hub identifiers (``org/name[@revision]``) unless ANISO_ALLOW_HUB=0;
    model folders in the data directory (as absolute paths) unless ANISO_ALLOW_MODEL_FOLDERS=0.
    """

    ident = str(ident).strip()
    if ident in BUILTIN_MODELS:
        return ident
    if is_trained(ident):  # a checkpoint trained on this server, named by its id like an upload
        parse_trained(ident)
        return ident
    st = settings or current_settings()
    builtins = ", ".join(BUILTIN_MODELS)
    # One answer for every refusal, so that what is refused says nothing about what exists.
    ok = [f"built-in models ({builtins})"]
    if st.allow_hub:
        ok.append("hub identifiers (org/name[@revision])")
    if st.allow_model_folders and st.data_dir is not None:
        ok.append("model folders in the data directory (data:<folder>)")
    off = [w for w, on in (("hub identifiers", st.allow_hub), ("local model folders", st.allow_model_folders)) if not on]
    allowed = f"this server takes {', '.join(ok)}" + (f"; {' and '.join(off)} are switched off" if off else "")
    refused = InputError(
        f"Model {quote_ident(ident)} is not available here: {allowed}. Other server paths work "
        f"from the command line (python -m core)."
    )
    if len(ident) > MAX_IDENT_CHARS:  # no file name is that long: refused before any file system call
        raise refused
    # Decided on the text alone, never on what exists here: a path is written as one; "org/name" is a hub id
    # (also where such a folder exists relative to the server's working folder: core.inputs.models.is_local_folder).
    if _is_path(ident):
        if not st.allow_model_folders:
            raise refused
        return _allowed_path(ident, "Model", allowed, st)
    if not st.allow_hub:
        raise refused
    if not _HUB_ID.fullmatch(ident):
        raise InputError(
            f"Model {quote_ident(ident)} is not a built-in model ({builtins}) nor a valid hub identifier (org/name[@revision])."
        )
    return ident


# Options a checkpoint series takes from a job (series.series_specs); anything else (cache_dir...) is refused.
SERIES_OPTIONS = ("corpus", "text_column", "max_tokens", "sample", "seed", "batch_size", "device", "dtype", "attention")


def check_job_params(params: dict, settings: Settings | None = None) -> None:
    """The worker's own check of a job's parameters (they come from the queue, which anyone who can
    write the cache directory can write): the model, the corpus and trust_remote_code of its spec,
    a series' run and options, and the cache and processes a torchrun job names, pass the same
    checks as a URL's, under the worker's settings. InputError when they do not."""
    if not isinstance(params, dict):
        raise InputError("The job's parameters are not an object.")
    st = settings or current_settings()
    spec = params.get("spec")
    if isinstance(spec, dict):
        _check_job_spec(spec, st)
    for name in ("kw", "series"):  # a checkpoint series' options ("series" jobs; "train" jobs that analyse)
        kw = params.get(name)
        if kw is None:
            continue
        if not isinstance(kw, dict) or set(kw) - set(SERIES_OPTIONS):
            raise InputError(f"This job's series options are not ones the app gives ({', '.join(SERIES_OPTIONS)}).")
        if kw.get("corpus") is not None:
            _check_job_corpus(str(kw["corpus"]), st)
    if "run" in params:
        check_series_run(str(params["run"]), st)
    if params.get("cache_dir") is not None and Path(str(params["cache_dir"])).resolve() != cache_root():
        raise InputError("This job names another cache directory than the worker's.")
    if "nproc" in params and int(params["nproc"]) > max(1, st.torchrun_nproc):
        raise InputError(
            f"This job asks for {int(params['nproc'])} torchrun processes; the worker's "
            f"ANISO_TORCHRUN_NPROC allows {max(1, st.torchrun_nproc)}."
        )


def _check_job_spec(spec: dict, st: Settings) -> None:
    if spec.get("trust_remote_code") and not st.allow_remote_code:
        raise InputError(
            "This job asks to run a model folder's own Python code (trust_remote_code), which this "
            "worker refuses: set ANISO_ALLOW_REMOTE_CODE=1 on the worker's side to allow it."
        )
    if "model" in spec:
        model = str(spec["model"])
        if control_seed(model)[1] == 0:  # an untrained control's other seed is a built-in too
            check_model(model, st)
    if "corpus" in spec:
        _check_job_corpus(str(spec["corpus"]), st)


def _check_job_corpus(corpus: str, st: Settings) -> None:
    if corpus in BUILTIN_CORPORA or corpus in MODAL_CORPORA or _is_saved_upload(corpus):
        return
    if corpus.startswith(UPLOAD_PREFIX):
        check_corpus(corpus, st)
        return
    _allowed_path(corpus, "Corpus", "a built-in corpus, an upload, or a file or folder in the data directory", st)


def check_series_run(run: str, st: Settings) -> None:
    """A series' run: a run trained here (a plain name, never a path) or a hub series of an allowed hub id."""
    if is_hub_series(run):
        check_model(run.split(":", 1)[1], st)
    elif not RUN_NAME.match(run):
        raise InputError(f"Trained run {quote_ident(run)} is not a run name (letters, digits, '.', '_', '-').")


def _is_saved_upload(path: str) -> bool:
    """A file that the app saved as an upload in this cache (what an upload id resolves to)."""
    p = Path(path)
    try:
        upload_id(p)
    except InputError:
        return False
    return p.is_absolute() and os.path.realpath(p.parent) == os.path.realpath(uploads_dir())


def url_ident(ident: str, settings: Settings | None = None) -> str:
    """How a canonical corpus/model identifier is written in a URL: a path inside the data
    directory as ``data:<relative path>``; everything else as it is."""
    st = settings or current_settings()
    p = Path(ident)
    if st.data_dir is not None and p.is_absolute() and p.is_relative_to(st.data_dir):
        return DATA_PREFIX + p.relative_to(st.data_dir).as_posix()
    return ident
