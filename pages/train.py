"""Train: small Transformers trained from scratch here, with checkpoints along training, and the
presets that put the papers' questions to the data. Every checkpoint becomes a model
(`trained/<run>@step-<N>`) that every page, the CLI and the exports take."""

import streamlit as st

from core.base.errors import InputError
from core.inputs.access import check_corpus, split_corpus
from core.inputs.checkpoints import ident_of
from core.inputs.corpora import BUILTIN_CORPORA
from core.inputs.modalities import corpus_modality
from core.inputs.uploads import display_name
from core.studies.selection import TRAIN_LIMITS
from core.studies.train_spec import (
    ARCHS,
    OPTIMIZERS,
    PRESETS,
    TOKENIZERS,
    TrainSpec,
    default_lr,
    learned_note,
    matched_spec,
    preset_specs,
)
from ui import page, state, training

page.title("Train a model from scratch",
           "A small GPT-2-, LLaMA- or BERT-style Transformer, or a Mamba-2, RWKV or LSTM language model, trained with "
           "transformers' Trainer (seeded; bf16 on a GPU), checkpoints at steps 0, 1, 2, 4, … and the last, each a "
           "model of the registry. The default GPT-2's "
           "2,000 steps train in about 2 minutes on 2 quiet CPU cores (BENCHMARKS.md, Training).")

sel = state.selection()
d = sel.train  # the form shows the selection's training (a link's: tcorpus, tarch, ...; see core.studies.selection)
lim = TRAIN_LIMITS
with st.form("train_form"):
    c1, c2, c3 = st.columns(3)
    # The built-in text corpora, then the sidebar's own text corpora (uploads, data-directory files) by their names,
    # and the selection's training corpus when it is none of them
    own = [e for e in dict.fromkeys(sel.corpora)
           if split_corpus(e)[0] not in BUILTIN_CORPORA and corpus_modality(split_corpus(e)[0]) == "text"]
    chosen = d.corpus + (f"#{d.text_column}" if d.text_column else "")
    options = list(dict.fromkeys(list(BUILTIN_CORPORA)[:4] + own + [chosen]))
    corpus = c1.selectbox("Corpus", options, index=options.index(chosen), key="t_corpus",
                          format_func=lambda e: BUILTIN_CORPORA[e].label if e in BUILTIN_CORPORA
                          else display_name(*split_corpus(e)),
                          help="Your own corpus: upload it (or name it) in the sidebar first; it is listed here.")
    path = c1.text_input("…or a file in the data directory (data:<file>)", "", key="t_path",
                         help="The same rule as the sidebar: built-in and uploaded corpora, and files in the "
                              "server's data directory (ANISO_DATA_DIR). Any other file: `python -m core train "
                              "--corpus PATH`.")
    arch = c1.selectbox("Architecture", list(ARCHS), index=list(ARCHS).index(d.arch), format_func=ARCHS.get,
                        key="t_arch")
    tok = c2.selectbox("Tokenisation", list(TOKENIZERS), index=list(TOKENIZERS).index(d.tokenizer),
                       format_func=TOKENIZERS.get, key="t_tok")
    vocab = c2.number_input("BPE vocabulary size", *lim["vocab_size"], d.vocab_size, step=512, key="t_vocab")
    seed = c2.number_input("Seed", *lim["seed"], d.seed, key="t_seed")
    layers = c3.number_input("Layers", *lim["n_layers"], d.n_layers, key="t_layers")
    width = c3.number_input("Width (d_model)", *lim["d_model"], d.d_model, step=16, key="t_width")
    heads = c3.number_input("Heads", *lim["n_heads"], d.n_heads, key="t_heads")
    e1, e2, e3, e4, e5 = st.columns(5)
    steps = e1.number_input("Steps", *lim["steps"], d.steps, key="t_steps")
    batch = e2.number_input("Batch size", *lim["batch_size"], d.batch_size, key="t_batch")
    seq = e3.number_input("Sequence length", *lim["seq_len"], d.seq_len, key="t_seq")
    opt = e4.selectbox("Optimizer", list(OPTIMIZERS), index=list(OPTIMIZERS).index(d.optimizer), key="t_opt",
                       help="; ".join(f"{o}: {what}" for o, what in OPTIMIZERS.items()) + " (docs/training.md).")
    rates = "; ".join(f"{o} {r:g} ({'swept' if 'swept' in src else src})"
                      for o in OPTIMIZERS for r, src in [default_lr(d.arch, o)])
    lr = e5.number_input("Learning rate", *lim["lr"], float(d.lr), format="%.0e", key="t_lr",
                         help=f"The lab's rates for {d.arch} (`python -m bench lab-lr`, BENCHMARKS.md): {rates}.")
    f1, f2, f3 = st.columns(3)
    untied = f1.checkbox("Untied embeddings", not d.tied, key="t_untied",
                         help="A separate output matrix instead of the input embeddings (tie_word_embeddings=False).")
    gate = f2.checkbox("Attention output gate", d.attn_gate, key="t_gate",
                       help="LLaMA only: a sigmoid gate on each head's attention output (Qiu et al. 2025, G1).")
    matched = f3.checkbox("Match GPT-2's parameter counts", d.d_inner is not None,
                          key="t_matched", help="The family's inner width (MLP, RWKV channel mix, Mamba-2 expansion, "
                                                "LSTM MLP) chosen so that the total and non-embedding parameter counts "
                                                "are within 10% of the GPT-2 of the same depth and width.")
    b1, b2 = st.columns(2)
    go = b1.form_submit_button("Train", type="primary", icon=":material/model_training:")
    preset = b2.selectbox("Preset (same budget and seed, one setting changed)", list(PRESETS),
                          index=list(PRESETS).index(sel.train_preset), format_func=lambda k: PRESETS[k]["title"],
                          key="t_preset")
    go_preset = b2.form_submit_button("Train and analyse the preset", icon=":material/science:")

if go or go_preset:
    try:
        name, column = split_corpus(corpus)
        if path.strip():
            name, column = check_corpus(path), None
        spec = TrainSpec(corpus=name, text_column=column, arch=arch, tokenizer=tok, vocab_size=int(vocab),
                         n_layers=int(layers), d_model=int(width), n_heads=int(heads), seq_len=int(seq),
                         batch_size=int(batch), steps=int(steps), lr=float(lr), seed=int(seed),
                         optimizer=opt, tied=not untied, attn_gate=bool(gate))
        spec = matched_spec(spec) if matched else spec
        runs = preset_specs(preset, spec) if go_preset else {spec.run_name(): spec}
        # what was queued is the form's state in the selection (and the URL): a link opens the form on it
        state.update(train=spec, train_preset=preset)
        names = training.submit_training(runs, analyse=bool(go_preset))
    except InputError as e:  # a bad setting, an unknown corpus or file: say why
        st.error(page.md(str(e)), icon=":material/error:")
    except OSError as e:  # the queue's files could not be written
        st.error(page.md(f"The training could not be queued: {e}"), icon=":material/error:")
    else:
        if go_preset:
            state.log().dynamics_runs = names  # Dynamics opens on the preset's runs, by the preset's names
            state.log().dynamics_labels.update({n: label for n, label in zip(names, runs)})
        st.toast("Queued: the training runs as a job (navigating or closing the tab does not stop it).")

page.job_panel()
if go_preset and state.log().dynamics_runs:
    st.info("When the preset's jobs are done, open **Dynamics** to see what the curves show.",
            icon=":material/science:")

st.subheader("Trained runs")
runs_here = training.runs_on_disk()
if not runs_here:
    st.info("No trained run yet: train one above (or `python -m core train`).", icon=":material/info:")
for run in runs_here:
    rec = training.record(run)
    ck = rec.get("checkpoints", [])
    s = rec["spec"]
    status = rec.get("status", "?")
    with st.expander(f"{run} — {status}, {len(ck)} checkpoints", expanded=False):
        st.caption(f"{ARCHS[s['arch']]}, {s['n_layers']} layers × d={s['d_model']}, {s['n_heads']} heads, "
                   f"{TOKENIZERS[s['tokenizer']]}, {s['steps']:,} steps of {s['batch_size']}×{s['seq_len']} tokens on "
                   f"{rec.get('data', {}).get('corpus', s['corpus'])}; "
                   f"{rec.get('timing', {}).get('tokens_per_s', 0):,.0f} tokens/s on {rec.get('device')}"
                   + (f"; {pc['total']:,} parameters ({pc['non_embedding']:,} non-embedding)"
                      if (pc := rec.get("params")) else "")
                   + ("; untied embeddings" if s.get("tied") is False else "")
                   + ("; attention output gate" if s.get("attn_gate") else ""))
        st.dataframe([{"model": ident_of(run, c["step"]), "step": c["step"], "tokens seen": c["tokens_seen"],
                       "held-out loss": round(c["held_out_loss"], 4),
                       "training loss": None if c["train_loss"] is None else round(c["train_loss"], 4)}
                      for c in ck], hide_index=True, key=f"ck_{run}")
        if note := learned_note(rec):  # a run that did not learn is not evidence: said where its losses are
            st.warning(note, icon=":material/warning:")
        st.caption("Any of these identifiers works as a model in the sidebar (type it), in "
                   "`python -m core analyze --model …` and in Compare.")
