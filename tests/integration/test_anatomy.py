"""core/inputs/anatomy.py against the models themselves: every declared module exists in a tiny model of its family, and
the declared look-ups find the modules that the generic discovery (no entry: candidate names, transformers'
record of its attentions, the longest block list) finds, so the statistics read what they read before the table.
"""

from __future__ import annotations

import pytest

from core.inputs import anatomy as A
from tests import families as F

# Where the declared look-up finds more than the generic discovery did (nothing that was found changes):
# OPT's blocks sit under model.decoder (the generic chain skips decoders) and its final norm under it too;
# encoders' final norms are declared (the lens never reads them: no LM head).
MORE_THAN_GENERIC = {("opt", "chain"), ("opt", "final_norm"), ("vit", "final_norm"), ("dinov2", "final_norm"),
                     ("whisper", "final_norm"), ("t5", "final_norm")}


def _model(family):
    m = F.build(family)
    return m.get_encoder() if family == "whisper" else m  # the loader analyses an encoder-decoder's encoder


def _names(model):
    return {id(m): n for n, m in model.named_modules()}


def _lookups(model) -> dict:
    """What each statistic finds, as qualified names (an error's message where it finds nothing)."""
    nm = _names(model)
    out = {}
    for key, fn in (("norms", lambda: [(n, p) for _, n, _, p in A.block_norms(model)]),
                    ("chain", lambda: [(s.out_name, nm.get(id(s.attn_in)), nm.get(id(s.mlp_in)))
                                       for s in A.mlp_sites(model)]),
                    ("attention", lambda: [(nm[id(m)], nm[id(q)], nm.get(id(k)), f)
                                           for m, q, k, f in A.attention_sites(model)]),
                    ("final_norm", lambda: nm.get(id(A.final_norm(model)))),
                    ("blocks", lambda: A.blocks(model)[0])):
        try:
            out[key] = fn()
        except ValueError as e:
            out[key] = f"error: {e}"
    return out


@pytest.fixture(scope="module")
def models():
    return {f: _model(f) for f in F.FAMILIES}


@pytest.mark.parametrize("family", F.FAMILIES)
def test_every_declared_module_exists(models, family):
    model = models[family]
    e = A.entry(model)
    assert e is not None and e.family == F.NAMES[family]
    name, mods = A.blocks(model)
    assert len(mods) == 2 and (name == e.blocks or name.endswith("." + e.blocks))
    for blk in mods:
        for rel in (e.norm, e.attention, e.mlp_out, e.attn_in, e.mlp_in):
            assert rel is None or A.get(blk, rel) is not None, (family, rel)
        att = A.get(blk, e.attention)
        assert e.attention is None or (A.get(att, e.q) is not None and (e.k is None) == bool(e.fused))
    base = getattr(model, "base_model", model)
    assert e.final_norm is None or A.get(base, e.final_norm) is not None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    assert (e.unembedding is not None) == (head is not None)
    if e.unembedding:
        assert _names(model)[id(head)] == e.unembedding
    # what does not apply is said, with the reason, by the statistic that needs it
    for stat, why in e.not_applicable.items():
        got = _lookups(model)[{"attention": "attention", "chain": "chain"}.get(stat, "norms")]
        if stat in ("attention", "chain"):
            assert got == f"error: {type(model).__name__}: {why}"


@pytest.mark.parametrize("family", F.FAMILIES)
def test_declared_lookups_find_what_the_generic_discovery_finds(models, family, monkeypatch):
    model = models[family]
    declared = _lookups(model)
    monkeypatch.setattr(A, "_BY_TYPE", {})  # no entries: the generic discovery alone
    generic = _lookups(model)
    for key, got in declared.items():
        was = generic[key]
        if (family, key) in MORE_THAN_GENERIC:
            assert (was is None or str(was).startswith("error") or was == "") and got and "error" not in str(got)
        elif str(was).startswith("error"):  # nothing was found before: the entry says why
            assert str(got).startswith("error"), (family, key, got)
        else:
            assert got == was, (family, key)


def test_an_architecture_without_an_entry_gets_what_applies():
    """Bloom has no entry: its blocks, norms and MLP are found by the entries' names, its fused attention layout is
    refused by name."""
    import torch
    from transformers import BloomConfig, BloomForCausalLM

    torch.manual_seed(0)
    m = BloomForCausalLM(BloomConfig(vocab_size=F.VOCAB, hidden_size=32, n_layer=2, n_head=2))
    assert A.entry(m) is None
    assert [n for _, n, _, _ in A.block_norms(m)] == ["transformer.h.0.input_layernorm", "transformer.h.1.input_layernorm"]
    with pytest.raises(ValueError, match="BloomAttention: the layout of its fused query/key/value"):
        A.attention_sites(m)
    assert [s.out_name for s in A.mlp_sites(m)] == ["transformer.h.0.mlp.dense_4h_to_h", "transformer.h.1.mlp.dense_4h_to_h"]
    assert A.final_norm(m) is not None  # ln_f: a candidate name of GPT-2's entry


def test_candidates_are_every_entrys_names():
    c = A.candidates()
    for e in A.FAMILIES:
        assert e.mlp_out is None or e.mlp_out in c["mlp_out"]
        assert e.norm is None or (e.norm, e.placement) in c["norm"]
    assert [r["family"] for r in A.family_table()] == [e.family for e in A.FAMILIES]
