"""The shared sidebar: models, corpus, token budget, advanced options, Run, report export.

Changing a widget only changes the selection (and the URL); extraction starts on Run only.
"""

from __future__ import annotations

import streamlit as st

from core.base import settings
from core.base.cache import get_store
from core.base.errors import InputError
from core.base.escape import markdown_code, markdown_text
from core.base.spec import DEVICES, DTYPES, SPECIAL_POLICIES, RunSpec
from core.inputs.corpora import BUILTIN_CORPORA, TABLE_SUFFIXES, TEXT_SUFFIXES, table_columns
from core.inputs.modalities import MODAL_CORPORA
from core.inputs.modalities.audio import AUDIO_SUFFIXES
from core.inputs.modalities.images import IMAGE_SUFFIXES
from core.inputs.models import BUILTIN_MODELS, describe_model, is_hub_model
from core.inputs.uploads import (
    bundle_files,
    delete_uploads,
    detect_text_column,
    display_name,
    is_upload_id,
    may_rename,
    rename,
    resolve,
    save_pasted_text,
    save_upload,
    upload_id,
)
from core.studies.selection import FULL_LOOK_TOKENS, LIMITS, MAX_CONTROL_SEEDS, MAX_CORPORA, MAX_MODELS, UI_MAX_TOKENS

from . import data, run, state
from . import report as report_ui
from .page import lazy_expander, md

SOURCES = ("Built-in corpus", "Upload a file", "Paste text")
UPLOAD_TYPES = [s.lstrip(".") for s in TEXT_SUFFIXES + TABLE_SUFFIXES]


MODALITY_TAGS = {"text": "text", "image": "image", "audio": "speech"}


def _model_label(ident: str) -> str:
    e = BUILTIN_MODELS.get(ident)
    if not e:
        return ident
    return (f"[{MODALITY_TAGS[e.modality]}{' CNN' if e.architecture == 'cnn' else ''}] {e.label}"
            f"{' (untrained)' if not e.trained and 'untrained' not in e.label else ''}")


def _models(sel) -> tuple[str, ...]:
    order = {"text": 0, "image": 1, "audio": 2}  # listed by modality
    here = sorted(BUILTIN_MODELS, key=lambda k: order[BUILTIN_MODELS[k].modality]) + data.trained_checkpoints()
    options = here + [m for m in sel.models if m not in here]  # checkpoints of the Train page too
    chosen = st.multiselect(
        f"Models (up to {MAX_MODELS})", options, format_func=_model_label, key="w_models",
        # a preset sets the box through the session state (ui.state.apply_preset): then no default beside it (the
        # widget's identity is its key: the default is only its first value)
        default=None if "w_models" in st.session_state else list(sel.models),
        max_selections=MAX_MODELS, accept_new_options=True, select_all=False,  # no silent cut to MAX_MODELS
        help="Built-in models, or type a local model folder (with config.json and weights) or a hub "
             "identifier and press Enter.")
    if len(chosen) == MAX_MODELS:
        st.caption(f":material/info: {MAX_MODELS} models is the most at once: remove one to add another.")
    for m in chosen:
        note = describe_model(m).get("note")
        if note:
            st.caption(f":material/warning: {_model_label(m)}: {note}")
        if is_hub_model(m) and settings.current().allow_hub:
            _hub_size(m, sel)
    return tuple(chosen)


def _hub_size(ident: str, sel) -> None:
    """A hub model's size as soon as it is typed ("found: 124M parameters, 548 MB safetensors, needs ~0.6 GB at
    float32"), looked up in the background: until it is there, a line that polls for it."""
    spec = RunSpec(model=ident, device=sel.device, dtype=sel.dtype)
    device = spec.resolved_device()
    fut = data.hub_size(ident, spec.resolved_dtype(device), device)
    if fut.done():
        text, fits = fut.result()
        st.caption(f"{':material/cloud_done:' if fits else ':material/error:'} {markdown_text(ident)}: "
                   f"{markdown_text(text)}")
        return

    @st.fragment(run_every=1.0)
    def wait():
        if fut.done():
            st.rerun()  # the whole page once, which then draws the line above and polls no more
        st.caption(f":material/cloud_sync: {markdown_text(ident)}: looking it up on the hub…")

    wait()


def _preview(uid: str, col: str | None) -> None:
    """What the chosen file holds, before Run: size, estimated tokens, first rows, warnings."""
    try:
        pv = data.preview(uid, col)
    except InputError as e:
        st.error(markdown_text(str(e)), icon=":material/error:")
        state.log().corpus_problem = str(e)
        return
    what = "rows" if pv.kind == "table" else "documents"
    colnote = ""
    if pv.kind == "table":
        colnote = (f" · text column {markdown_code(str(pv.text_column))}"
                   + (" (detected)" if pv.text_column == pv.detected_column else ""))
    st.caption(f":material/description: **{md(pv.name)}** · {pv.n_documents:,} {what} · "
               f"≈{pv.est_tokens:,} tokens (estimate: {pv.n_words:,} words × 1.3){colnote}")
    for w in pv.warnings:
        st.warning(markdown_text(w), icon=":material/warning:")
    with st.expander(f"First {len(pv.first)} {what}"):
        for i, d in enumerate(pv.first, 1):
            st.text(f"{i}. {d}")


def _rename(uid: str, col: str | None) -> None:
    cur = display_name(uid, col)
    me = state.browser_token()
    if not may_rename(uid, me):  # a shared server: names belong to the browsers that uploaded the file
        st.text_input("Name in figures, tables and file names", cur, key=f"w_name_{uid}_{col or ''}", disabled=True,
                      help="Only the browser that uploaded this file can rename it: upload the file yourself to give "
                           "it your own name.")
        return
    new = st.text_input("Name in figures, tables and file names", cur, key=f"w_name_{uid}_{col or ''}",
                        help="Defaults to the file's own name (and the text column). Leave empty to restore it.")
    if new.strip() != cur:
        try:
            rename(uid, new, col, owner=me)
        except InputError as e:
            st.error(markdown_text(str(e)))
            return
        data.forget_labels()
        st.rerun()


def _corpus(sel) -> tuple[str, str | None]:
    """Built-in corpus, uploaded file or pasted text. An upload is named by its id (upload:<hex>)."""
    lg = state.log()
    lg.corpus_problem = None
    src0 = 0 if sel.corpus in BUILTIN_CORPORA else 1
    src = st.radio("Corpus", SOURCES, index=src0, key="w_corpus_src", horizontal=False)
    if src == SOURCES[0]:
        ids = list(BUILTIN_CORPORA)
        cur = sel.corpus if sel.corpus in BUILTIN_CORPORA else ids[0]
        cid = st.selectbox("Built-in corpus", ids, index=ids.index(cur), key="w_corpus",
                           format_func=lambda i: BUILTIN_CORPORA[i].label, label_visibility="collapsed")
        st.caption(BUILTIN_CORPORA[cid].description)
        return cid, None
    if src == SOURCES[1]:
        limit = settings.current().max_upload_mb
        up = st.file_uploader("Text or table file", type=UPLOAD_TYPES, key="w_upload", max_upload_size=limit,
                              help=".txt/.md: documents separated by blank lines; .csv/.tsv/.jsonl/.parquet: "
                                   f"one document per row, pick the text column. At most {limit} MiB.")
        if up is not None:
            try:
                if up.size > limit * 2**20:  # before reading it (the uploader enforces it too)
                    raise InputError(f"The file is larger than the upload limit of {limit} MiB.")
                uid = state.remember_upload(upload_id(save_upload(up.getvalue(), up.name, owner=state.browser_token())))
            except InputError as e:
                st.error(markdown_text(str(e)))
                lg.corpus_problem = f"The upload of {up.name} failed: {e}"
                return sel.corpus, sel.text_column
        elif is_upload_id(sel.corpus):
            uid = sel.corpus  # from the URL, an earlier upload or pasted text
        else:
            st.caption("No file yet: the built-in corpus stays selected until you upload one.")
            return sel.corpus, sel.text_column
    else:
        with st.form("paste_form", border=False):
            text = st.text_area("Paste documents (separate documents with a blank line)", height=140, key="w_paste")
            use = st.form_submit_button("Use this text")
        if use:
            try:
                uid = state.remember_upload(upload_id(save_pasted_text(text, owner=state.browser_token())))
            except InputError as e:
                st.error(markdown_text(str(e)))
                lg.corpus_problem = str(e)
                return sel.corpus, sel.text_column
        elif is_upload_id(sel.corpus):
            uid = sel.corpus
        else:
            st.caption("Nothing pasted yet: the built-in corpus stays selected until you press *Use this text*.")
            return sel.corpus, sel.text_column
    try:
        path = resolve(uid)
    except InputError as e:
        st.error(markdown_text(str(e)))
        lg.corpus_problem = str(e)
        return sel.corpus, sel.text_column
    col = None
    if path.suffix.lower() in TABLE_SUFFIXES:
        try:
            cols = table_columns(path)
            guess = sel.text_column if sel.text_column in cols else (detect_text_column(path) or cols[0])
        except InputError as e:
            st.error(markdown_text(str(e)))
            lg.corpus_problem = str(e)
            return sel.corpus, sel.text_column
        col = st.selectbox("Text column", cols, index=cols.index(guess), key="w_text_col")
    _preview(uid, col)
    _rename(uid, col)
    entry = f"{uid}#{col}" if col else uid
    if entry not in lg.uploads:
        lg.uploads.append(entry)
    return uid, col


def _more_corpora(sel, corpus: str, col: str | None) -> tuple[str, ...]:
    """Other corpora every model also runs on: the corpus comparison (wiki-en vs wiki-fr vs uniform-random,
    or two of your own files)."""
    main = f"{corpus}#{col}" if col else corpus
    options = [c for c in list(BUILTIN_CORPORA) + state.log().uploads + list(sel.more_corpora) if c != main]
    options = list(dict.fromkeys(options))
    cur = [c for c in sel.more_corpora if c in options]

    def label(c: str) -> str:
        base, _, column = c.partition("#")
        return BUILTIN_CORPORA[base].label if base in BUILTIN_CORPORA else display_name(base, column or None)

    chosen = st.multiselect("Compare with more corpora", options, default=cur, key="w_more_corpora",
                            format_func=label, max_selections=MAX_CORPORA - 1, select_all=False,
                            help="Each model also runs on these: Layers and Compare overlay the runs (e.g. English "
                                 "vs French Wikipedia vs the uniform-random control). Your uploads of this session "
                                 "are listed too.")
    return tuple(chosen)


def _modal_corpora(sel, models) -> dict:
    """The image and the speech corpus, shown when an image or speech model is selected."""

    out = {}
    for modality, fieldname, title in (("image", "image_corpus", "Image corpus"),
                                       ("audio", "audio_corpus", "Speech corpus")):
        if not any(describe_model(m).get("modality") == modality for m in models):
            continue
        ids = [k for k, c in MODAL_CORPORA.items() if c.modality == modality]
        cur = getattr(sel, fieldname)
        extra = [] if cur in ids else [cur]  # an uploaded folder/zip from the URL
        cid = st.selectbox(title, ids + extra, index=(ids + extra).index(cur), key=f"w_{fieldname}",
                           format_func=lambda i: MODAL_CORPORA[i].label if i in MODAL_CORPORA else display_name(i))
        st.caption(MODAL_CORPORA[cid].description if cid in MODAL_CORPORA else "uploaded files")
        suffixes = IMAGE_SUFFIXES if modality == "image" else AUDIO_SUFFIXES
        ups = st.file_uploader(f"…or upload {'images' if modality == 'image' else 'WAV/FLAC/OGG files'}: several "
                               "files, a folder's files or a zip", type=[x[1:] for x in suffixes + (".zip",)],
                               accept_multiple_files=True, key=f"w_up_{fieldname}",
                               max_upload_size=settings.current().max_upload_mb)
        if ups:
            try:
                if len(ups) == 1 and ups[0].name.lower().endswith(".zip"):
                    data, name = ups[0].getvalue(), ups[0].name
                else:  # the files become one zip, saved like a zip upload (same files, same id)
                    data = bundle_files([(u.name, u.getvalue()) for u in ups], suffixes)
                    name = f"{len(ups)} {'images' if modality == 'image' else 'recordings'}.zip"
                saved = save_upload(data, name, owner=state.browser_token())
                cid = state.remember_upload(upload_id(saved))  # an id, like the text uploads
            except InputError as e:
                st.error(markdown_text(str(e)))
        out[fieldname] = cid
    return out


def _more_tokens() -> None:
    """The *More tokens* button's callback: the budget box and the selection take the larger budget."""
    st.session_state["w_tokens"] = FULL_LOOK_TOKENS
    st.session_state["_tokens_set"] = True
    state.update(max_tokens=FULL_LOOK_TOKENS)


def _advanced(sel) -> dict:
    with st.expander("Advanced options"):
        kw = dict(
            max_seq_len=st.number_input("Max sequence length (tokens)", *LIMITS["max_seq_len"], sel.max_seq_len, step=64,
                                        key="w_seqlen", help="Longer documents are split into windows."),
            special_tokens=st.radio("Special tokens ([CLS], [SEP], BOS…)", SPECIAL_POLICIES,
                                    index=SPECIAL_POLICIES.index(sel.special_tokens), key="w_special",
                                    horizontal=True, help="exclude: analyse text tokens only (default)."),
            device=st.selectbox("Device", DEVICES, index=DEVICES.index(sel.device), key="w_device"),
            dtype=st.selectbox("Dtype", DTYPES, index=DTYPES.index(sel.dtype), key="w_dtype",
                               help="auto: float32 on CPU, bfloat16 on CUDA."),
            sample=st.number_input("Sample size K (tokens kept for projections and sample metrics)", *LIMITS["sample"],
                                   sel.sample, step=500, key="w_sample"),
            seed=st.number_input("Seed", *LIMITS["seed"], sel.seed, key="w_seed"),
            logit_lens=st.checkbox("Logit lens (causal LMs)", sel.logit_lens, key="w_lens",
                                   help="Also read every layer with the model's own final norm and unembedding (up to "
                                        "512 sampled positions; shown under Layers → Logit lens). Opt-in: it costs more "
                                        "than 10% of a run. Other models' runs are unchanged."),
            batch_size=st.number_input("Batch size", *LIMITS["batch_size"], sel.batch_size, key="w_batch"),
            control_seeds=st.number_input("Seeds of each untrained control (band)", 1, MAX_CONTROL_SEEDS,
                                          sel.control_seeds, key="w_seeds",
                                          help="An untrained model is one random draw: it also runs with this many "
                                               "seeds in all, drawn as a min-max band (1: no band)."),
        )
    return {k: (int(v) if k in ("max_seq_len", "sample", "seed", "batch_size", "control_seeds") else v)
            for k, v in kw.items()}


# Pages that show no selected run: what of the sidebar applies there (Train reads the sidebar's own corpora,
# Dynamics reads trained runs only); the models, the budget and Run are left out.
RUNLESS_PAGES = {"train": "corpus", "dynamics": None}


def render(sel, page: str | None = None):
    """Draw the sidebar and act on its Run button (queue the jobs); return the selection.
    `page`: the url_path of the page on show (Train and Dynamics draw only what applies to them)."""
    lg = state.log()
    lg.no_models = False
    if page in RUNLESS_PAGES:
        with st.sidebar:
            if RUNLESS_PAGES[page] == "corpus":
                st.caption("Your own corpus for training: upload or paste it here, then pick it on the page.")
                corpus, col = _corpus(sel)
                if (corpus, col) != (sel.corpus, sel.text_column):
                    sel = state.update(corpus=corpus, text_column=col)
            else:
                st.caption("Dynamics reads the runs trained on the Train page: their options are on the page.")
            _cache_panel()
        return sel
    with st.sidebar:
        models = _models(sel)
        if not models:  # nothing to run: no Run button, no count of the previous selection's runs
            st.error("Select at least one model.", icon=":material/error:")
            lg.no_models = True
        corpus, col = _corpus(sel)
        more = _more_corpora(sel, corpus, col)
        modal = _modal_corpora(sel, models)
        tokens = st.number_input("Token budget (tokens analysed per model)", *LIMITS["max_tokens"],
                                 # None only right after More tokens set the box (no duplicate-default warning); else
                                 # a value, which also keeps the box from offering to be emptied
                                 None if st.session_state.pop("_tokens_set", False) else sel.max_tokens,
                                 step=5000, key="w_tokens",
                                 help="Whole documents in a seeded order until the budget is met.")
        if int(tokens) == UI_MAX_TOKENS:  # the default: say what it is, and how to ask for more
            st.caption(f":material/speed: {UI_MAX_TOKENS:,} tokens: a first look (about a minute on 2 CPU cores "
                       "from a cold start). "
                       "For tighter intervals and steadier outlier sets, press *More tokens* and Run again "
                       "(the first look stays cached).")
            st.button(f"More tokens ({FULL_LOOK_TOKENS:,})", key="w_more_tokens", icon=":material/add:",
                      on_click=_more_tokens)
        adv = _advanced(sel)
        new = sel
        if not models:
            _cache_panel()
            return sel
        try:
            new = sel.replace(models=models, corpus=corpus, text_column=col, more_corpora=more, max_tokens=int(tokens),
                              **modal, **adv)
        except (InputError, ValueError) as e:
            st.error(markdown_text(str(e)))
        if new != sel:
            new = state.update(**{k: getattr(new, k) for k in ("models", "corpus", "text_column", "more_corpora",
                                                                 "max_tokens", "image_corpus", "audio_corpus", *adv)})
        specs = new.specs()
        cached = []
        for s in specs:
            try:
                if data.is_cached(s):
                    cached.append(s)
            except InputError:
                pass
        n_cached = len(cached)
        # The one place a Run click is handled, whatever the page: its jobs are queued before the page draws
        # (each page's job panel then shows them).
        if st.button("Run", type="primary", key="run", width="stretch", icon=":material/play_arrow:",
                     help="Extract hidden states for every selected model that is not cached yet."):
            run.run(new)
        st.caption(f"{n_cached} of {len(specs)} selected run{'s' if len(specs) > 1 else ''} already computed "
                   "(shown at once).")
        if n_cached:
            report_ui.export(new, cached)  # a job: its progress, Cancel, then the download
        _cache_panel()
    return new


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return ""


def _cache_panel() -> None:
    """The disk cache: its size against the limit, and a button to clear it (entries and uploads)."""
    store = get_store()
    box = lazy_expander("Cache", "cache_open", icon=":material/storage:")  # sizing walks the cache: only when open
    if box is None:
        return
    with box:
        shared = settings.current().shared
        st.caption(f"{_size(store.size_bytes())} used of {_size(store.size_limit)} (ANISO_CACHE_SIZE_GB); beyond "
                   "it the least recently stored results are evicted. " + (
                       "On this shared server, clearing removes only the files this browser uploaded: computed "
                       "results are shared (the whole cache is cleared with `python -m core cache clear`)."
                       if shared else "Clearing removes every computed result and every uploaded file."))
        if store.degraded:
            st.warning(markdown_text(store.degraded), icon=":material/warning:")
        if shared:
            if st.button("Clear my uploads", key="clear_cache", icon=":material/delete:"):
                mine = state.my_uploads()
                freed = delete_uploads(mine, owner=state.browser_token())  # shared bytes stay while owned
                st.session_state["_my_uploads"] = set()
                st.cache_data.clear()
                _forget_gone_uploads()
                st.toast(f"{len(mine)} upload(s) of this browser removed: {_size(freed)} freed.")
        elif st.button("Clear cache", key="clear_cache", icon=":material/delete:"):
            try:
                freed = store.clear()
            except InputError as e:  # a read-only cache: nothing was removed, and that is said
                st.error(markdown_text(str(e)), icon=":material/error:")
                return
            st.cache_data.clear()
            st.cache_resource.clear()
            _forget_gone_uploads()
            st.toast(f"Cache cleared: {_size(freed)} freed.")


def _forget_gone_uploads() -> None:
    """After a clear: the selection's uploads that are gone give way to the defaults (the page drawn next would
    otherwise fail on them)."""
    sel, default = state.selection(), type(state.selection())()

    def gone(entry: str) -> bool:
        base = entry.partition("#")[0]
        if not is_upload_id(base):
            return False
        try:
            resolve(base)
        except InputError:
            return True
        return False

    fields = {}
    if gone(sel.corpus):
        fields.update(corpus=default.corpus, text_column=None)
    for name in ("image_corpus", "audio_corpus"):
        if gone(getattr(sel, name)):
            fields[name] = getattr(default, name)
    kept = tuple(c for c in sel.more_corpora if not gone(c))
    if kept != sel.more_corpora:
        fields["more_corpora"] = kept
    if fields:
        state.forget_widgets(("w_corpus_src", "w_upload", "w_text_col", "w_more_corpora", "w_image_corpus",
                              "w_audio_corpus"))
        state.update(**fields)
        lg = state.log()
        lg.uploads = [u for u in lg.uploads if not gone(u)]
