"""Every architecture family of core/inputs/anatomy.py, end to end from the loopback hub: a tiny random model of each
(tests/families.py) served as `testorg/tiny-<family>`, fetched and analysed like a researcher's own model. Each
gets the per-layer statistics and the norm-parameter outliers of its declared norm; the attention statistics,
the outlier chain and the logit lens where its entry declares their modules; and where they do not apply, the
analysis says why (the entry's reason), never an empty section."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from core.base.errors import InputError
from core.base.spec import RunSpec
from core.compute import pipeline
from core.inputs import anatomy
from core.studies.attention import run_attention
from core.studies.chain.run import chain_section
from tests import families as F
from tests import hub_repos

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(hub_server, hub_work):
    return {f: hub_server.add(hub_repos.family_repo(f, hub_work)) for f in F.FAMILIES}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """A text file, a folder of two pictures, a folder of one 1.5 s clip."""
    import soundfile
    from PIL import Image

    d = tmp_path_factory.mktemp("family-corpora")
    text = d / "c.txt"
    text.write_text("\n\n".join(f"Document {i}: the cat sat on the mat and the dog ran to the {w}." for i, w in
                                enumerate(["door", "tree", "river", "house", "garden", "field"] * 3)))
    rng = np.random.default_rng(0)
    (d / "pictures").mkdir()
    for i in range(2):
        Image.fromarray(rng.integers(0, 255, (64, 80, 3), dtype=np.uint8)).save(d / "pictures" / f"p{i}.png")
    (d / "clips").mkdir()
    soundfile.write(d / "clips" / "noise.wav", (0.1 * rng.standard_normal(24000)).astype(np.float32), 16000)
    return {"text": str(text), "image": str(d / "pictures"), "audio": str(d / "clips")}


@pytest.mark.parametrize("family", F.FAMILIES)
def test_a_family_from_the_hub_end_to_end(family, served, corpora, hub, tmp_path):
    repo = served[family]
    e = anatomy.FAMILIES[[x.family for x in anatomy.FAMILIES].index(F.NAMES[family])]
    modality = F.modality(family)
    lens = e.unembedding is not None and e.final_norm is not None
    spec = RunSpec(model=repo.id, corpus=corpora[modality], max_tokens=160, max_seq_len=32, sample=32,
                   batch_size=4, device="cpu", dtype="float32", logit_lens=lens)
    cache = tmp_path / "cache"
    res = pipeline.analyze(spec, cache_dir=cache)
    m = res["manifest"]["model"]
    assert m["commit"] == repo.branches["main"] and m["modality"] == modality
    assert len(res["layers"]) == 3 and all(math.isfinite(row["mean_cosine"]) for row in res["layers"])
    norms = res["outliers"]["norm_parameters"]
    if modality != "text":  # Puccetti et al.'s norm outliers are a text statistic: said, not drawn empty
        assert norms == {"error": "LayerNorm-parameter outliers are computed for text models only."}
    else:
        assert len(norms["modules"]) == 2
    if e.norm and modality == "text":  # the entry's norm, in each block
        assert all(name.endswith(f"{b}.{e.norm}") for b, name in enumerate(norms["modules"])), norms["modules"]
    if lens:  # the lens reads every layer; the last one is the model's own output
        kl = [row["logit_lens_kl"] for row in res["layers"]]
        assert all(math.isfinite(k) for k in kl) and abs(kl[-1]) < 1e-5, kl
    if modality != "text":
        with pytest.raises(InputError, match=f"computed on text runs; .* reads {modality}"):
            run_attention(spec, cache_dir=cache)
    else:
        if e.attention is not None:
            att = run_attention(spec, cache_dir=cache)
            assert att["n_blocks"] == 2 and att["n_heads"] == 2
        else:
            with pytest.raises(InputError, match=f"not available for .*{re.escape(e.not_applicable['attention'])}"):
                run_attention(spec, cache_dir=cache)
    if e.mlp_out is not None and (modality != "text" or e.attention is None or family in ("opt", "llama")):
        sec = chain_section(spec, cache_dir=cache)  # image, audio and the families new to the chain
        assert sec["super_weight_scan"]["modules"] == [e.mlp_out] * 2
    elif e.mlp_out is None:
        with pytest.raises(InputError, match=f"chain pass is not available for .*{re.escape(e.not_applicable['chain'])}"):
            chain_section(spec, cache_dir=cache)
