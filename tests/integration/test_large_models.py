"""Models of real sizes from configs (counted on the meta device, never built here) and device_map="auto"."""

import pytest

from core.base.errors import InputError
from core.base.spec import RunSpec
from core.compute.pipeline import analyze
from core.inputs import models
from core.inputs.models import BUILTIN_MODELS, count_parameters, load_model

# Parameter counts of the published models these shapes copy (base model, embeddings included;
# the LLaMA ones with their LM head, tied in the 1B).
PUBLISHED = {"untrained-bert-base": 109_482_240, "untrained-gpt2": 124_439_808,
             "untrained-llama-1b": 1_235_814_400, "untrained-llama-8b": 8_030_261_248}


@pytest.mark.parametrize("ident", sorted(PUBLISHED))
def test_real_size_configs_have_the_published_parameter_counts(ident):
    assert count_parameters(ident) == PUBLISHED[ident]
    assert BUILTIN_MODELS[ident].large == (ident in ("untrained-llama-1b", "untrained-llama-8b"))


def test_a_model_that_does_not_fit_is_refused_before_it_is_built(monkeypatch):
    monkeypatch.setattr(models, "available_memory", lambda device: 4 * 2**30)
    built = []
    monkeypatch.setattr(models, "untrained_config", lambda ident, f=models.untrained_config: built.append(ident) or f(ident))
    with pytest.raises(InputError, match=r"untrained-llama-8b needs 15\.0 GiB .* bfloat16; cpu has 4\.0 GiB free"):
        load_model("untrained-llama-8b", device="cpu", dtype="bfloat16")
    assert built == ["untrained-llama-8b"]  # the config only (counted on the meta device), no weights


def test_device_map_auto_runs_on_cpu_and_equals_the_plain_run(tiny_gpt2_dir, varied_txt, tmp_path):
    spec = RunSpec(model=str(tiny_gpt2_dir), corpus=str(varied_txt), max_seq_len=24, batch_size=4, sample=60,
                   device="cpu")
    plain = analyze(spec, cache_dir=tmp_path)
    mapped = analyze(spec.replace(device_map="auto"), cache_dir=tmp_path, force=True)
    assert mapped["manifest"]["cache_key"] == plain["manifest"]["cache_key"]  # placement is not in the key
    assert mapped["manifest"]["device_map"] == "auto" and not mapped["manifest"]["cache_hit"]
    for a, b in zip(plain["layers"], mapped["layers"]):
        assert b["mean_cosine"] == pytest.approx(a["mean_cosine"], rel=1e-9)
        assert b["isoscore"] == a["isoscore"] and b["outlier_dims"] == a["outlier_dims"]


@pytest.mark.slow
def test_device_map_auto_spreads_a_built_in_control():
    lm = load_model("untrained-bert-base", device_map="auto")
    assert set(lm.model.hf_device_map.values()) == {"cpu"}  # no GPU here: every block on the CPU
    assert lm.info["n_params"] == PUBLISHED["untrained-bert-base"]
