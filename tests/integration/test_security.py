"""What a lab server must refuse: a model folder's own code without --trust-remote-code, pickled
.bin weights that run code, path traversal in upload names (core/inputs/models.py, core/inputs/uploads.py)."""

from __future__ import annotations

import json
import shutil

import pytest

from core.base.errors import InputError
from core.inputs.models import load_model
from core.inputs.uploads import save_upload, upload_id


def test_remote_code_runs_only_when_asked(tmp_path, tiny_bert_dir):
    d = tmp_path / "custom"
    shutil.copytree(tiny_bert_dir, d)
    marker = tmp_path / "custom-code-ran"
    (d / "configuration_evil.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "from transformers import BertConfig\n\nclass EvilConfig(BertConfig):\n    model_type = 'evil'\n")
    cfg = json.loads((d / "config.json").read_text())
    cfg["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig"}
    cfg["model_type"] = "evil"  # only the folder's own code knows it
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="custom code"):
        load_model(str(d))
    assert not marker.exists()
    with pytest.raises(InputError):  # asked for: the code runs (then fails: it defines no model)
        load_model(str(d), trust_remote_code=True)
    assert marker.exists()


class _Boom:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickled_bin_weights_are_refused(tmp_path, tiny_bert_dir):
    import torch

    d = tmp_path / "binmodel"
    shutil.copytree(tiny_bert_dir, d)
    (d / "model.safetensors").unlink()
    marker = tmp_path / "pickle-ran"
    torch.save({"evil": _Boom(marker)}, d / "pytorch_model.bin")
    with pytest.raises(InputError, match="weights"):
        load_model(str(d))
    assert not marker.exists()


@pytest.mark.parametrize("name", ["../../../etc/evil.txt", "/etc/passwd.txt", "..\\..\\win.txt", "a/../../b.csv",
                                  "x.txt\x00.sh", "....//....//c.md"])
def test_upload_names_cannot_place_files(tmp_path, name):
    cache = tmp_path / "cache"
    try:
        p = save_upload(b"some text\n", name, cache)
    except InputError:
        return  # refused (e.g. no supported suffix): also fine
    assert p.parent == cache / "uploads" and p.resolve().is_relative_to((cache / "uploads").resolve())
    assert upload_id(p).startswith("upload:") and "/" not in upload_id(p) and ".." not in upload_id(p)
    written = [q for q in tmp_path.rglob("*") if q.is_file()]
    assert written and all(q.parent == cache / "uploads" for q in written)  # the file and its name sidecar


def test_uploads_are_refused_above_the_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("ANISO_MAX_UPLOAD_MB", "1")
    with pytest.raises(InputError, match="upload limit of 1 MiB"):
        save_upload(b"x" * (2**20 + 1), "big.txt", tmp_path)
    assert save_upload(b"x" * 100, "small.txt", tmp_path).exists()


def test_a_config_transformers_does_not_know(tmp_path, tiny_bert_dir):
    d = tmp_path / "future"
    shutil.copytree(tiny_bert_dir, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = "an-architecture-from-the-future"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="Could not load model"):
        load_model(str(d))
