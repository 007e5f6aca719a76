"""A local model folder is a first-class model: it runs, and its fingerprint follows its weights."""

import os
import shutil

import pytest
from safetensors.torch import load_file, save_file

from core.base.errors import InputError
from core.base.spec import RunSpec
from core.compute.pipeline import analyze, get_stats
from core.inputs.models import check_model_ident, load_model, model_fingerprint


@pytest.mark.parametrize("kind", ["bert", "gpt2", "llama"])
def test_local_folder_runs(request, kind, cache_dir, varied_txt):
    folder = request.getfixturevalue(f"tiny_{kind}_dir")
    check_model_ident(str(folder))
    # max_seq_len above the model's 128 positions: capped, documents split at 128 (not an IndexError)
    res = analyze(RunSpec(model=str(folder), corpus=str(varied_txt), max_tokens=2000, max_seq_len=512,
                          sample=100, device="cpu"), cache_dir)
    m = res["manifest"]
    assert m["model"]["label"] == folder.name and m["model"]["description"] == "local folder"
    assert m["model"]["causal_lm"] is (kind != "bert")
    assert m["model"]["fingerprint"] == model_fingerprint(str(folder), cache_dir)
    assert m["tokens"]["max_seq_len"] == 128
    assert len(res["layers"]) == 3


def test_long_documents_are_capped_at_the_model_positions(tmp_path, cache_dir, tiny_bert_dir):
    corpus = tmp_path / "long.txt"
    corpus.write_text(" ".join(["word"] * 400) + "\n\nshort document.\n")
    stats = get_stats(RunSpec(model=str(tiny_bert_dir), corpus=str(corpus), max_tokens=10_000, sample=100,
                              device="cpu"), cache_dir)
    assert stats.manifest["tokens"]["max_seq_len"] == 128
    assert stats.manifest["corpus"]["n_windows"] == 5  # 400 words in windows of 126 + 1 short document
    assert stats.n_tokens == 403


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_fingerprint_follows_the_weights(tmp_path, tiny_bert_dir, cache_dir):
    folder = _copy(tiny_bert_dir, tmp_path / "m")
    weights = folder / "model.safetensors"
    fp0 = model_fingerprint(str(folder), cache_dir)
    assert model_fingerprint(str(folder), cache_dir) == fp0  # stable (and memoised)
    assert model_fingerprint(str(_copy(folder, tmp_path / "same")), cache_dir) == fp0  # content, not path

    st = weights.stat()
    tensors = load_file(str(weights))
    name = sorted(tensors)[0]
    tensors[name] = tensors[name].clone()
    tensors[name].view(-1)[0] += 1.0
    save_file(tensors, str(weights), metadata={"format": "pt"})
    assert weights.stat().st_size == st.st_size
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size AND same mtime (cp -p, rsync -a)
    fp1 = model_fingerprint(str(folder), cache_dir)
    assert fp1 != fp0
    # the spec key of a run follows: a new fingerprint is a new cache entry
    lm = load_model(str(folder))
    assert float(dict(lm.model.named_parameters())[name.removeprefix("bert.")].detach().view(-1)[0]) == pytest.approx(
        float(tensors[name].view(-1)[0]))

    cfg = folder / "config.json"
    cfg.write_text(cfg.read_text().replace('"hidden_act": "gelu"', '"hidden_act": "relu"'))
    assert model_fingerprint(str(folder), cache_dir) not in (fp0, fp1)


def test_folder_without_tokenizer_is_refused(tmp_path, tiny_bert_dir):
    folder = tmp_path / "notok"
    folder.mkdir()
    for f in ("config.json", "model.safetensors"):
        shutil.copy(tiny_bert_dir / f, folder / f)
    with pytest.raises(InputError, match="no tokenizer"):
        check_model_ident(str(folder))


def test_folder_with_unreadable_weights_is_an_input_error(tmp_path, tiny_bert_dir):
    folder = _copy(tiny_bert_dir, tmp_path / "bad")
    (folder / "model.safetensors").write_bytes(os.urandom(2000))
    with pytest.raises(InputError, match="Could not load the weights"):
        load_model(str(folder))
