"""How much of each random-init text control's anisotropy is construction (issue 35; method and results:
docs/findings.md). Per control: mean cosine and centred mean cosine per layer (a) as built, (b) with the input
components it adds alike to every token zeroed (BERT, CANINE: the token-type table), (c) with its learned position
table zeroed too; a control that adds nothing alike (LLaMA, T5) has (a) only. Prints one markdown table.

    python -m bench.shared_inputs [--max-tokens 4096] [--models untrained-minilm-l6,...] [--out shared.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench.common import table
from core.base import settings

settings.export_env(HF_HUB_OFFLINE="1")
settings.env_default(TOKENIZERS_PARALLELISM="false")

from core.base.spec import RunSpec  # noqa: E402
from core.compute.pipeline import analyze  # noqa: E402
from core.inputs.models import load_model, zero_shared_inputs  # noqa: E402

# control -> (what its init adds to every token, (its token-type table, its learned position table): zeroed in turn)
_BERT = ("token-type row 0 (one vector, every token); LayerNorm beta and Linear biases are 0 at init",
         ("embeddings.token_type_embeddings.weight", "embeddings.position_embeddings.weight"))
STATES = {
    "untrained-minilm-l6": _BERT, "untrained-bert-base": _BERT,
    "untrained-canine-s": ("token-type row 0 (one vector, every character); learned character positions",
                           ("char_embeddings.token_type_embeddings.weight", "char_embeddings.char_position_embeddings.weight")),
    "untrained-smollm2": ("nothing: no biases, RMSNorm has no offset, rotary positions", ()),
    "untrained-byt5-small": ("nothing: no biases, T5 norm has no offset, relative positions inside attention", ()),
}
ZEROED = ("token type zeroed", "position table zeroed too")  # the states after "as built", tables zeroed cumulatively


def _folder(control: str, names: tuple[str, ...], root: Path) -> Path:
    lm = load_model(control, device="cpu", dtype="float32")
    zero_shared_inputs(lm.model, names)
    d = root / f"{control}-{len(names)}"
    lm.model.save_pretrained(d)
    lm.tokenizer.save_pretrained(d)
    return d


def measure(control: str, max_tokens: int, sample: int, cache_dir: Path, work: Path) -> dict:
    def run(model: str) -> dict:  # the curves of one analysis
        res = analyze(RunSpec(model=model, corpus="wiki-en", max_tokens=max_tokens, sample=sample, seed=0), cache_dir=cache_dir)
        return {k: [lay[k] for lay in res["layers"]] for k in ("mean_cosine", "centred_mean_cosine")} | {
            "n_tokens": int(res["manifest"]["tokens"]["analysed"])}

    what, tables = STATES[control]
    out = {"control": control, "shared": what, "states": {"as built": run(control)}}
    for i, name in enumerate(ZEROED[:len(tables)]):
        out["states"][name] = {**run(str(_folder(control, tables[:i + 1], work))), "zeroed": list(tables[:i + 1])}
    return out


def _span(v: list) -> str:
    v = [x for x in v[1:] if x is not None] or v  # the non-input layers 1..L
    return f"{min(v):.3f}-{max(v):.3f}" if len(v) > 1 else f"{v[0]:.3f}"


def render(rows: list[dict]) -> str:
    return table(["control", "state", "mean cosine, layers 1..L", "centred, layers 1..L", "layer 0 raw / centred"],
                 [[f"`{r['control']}`", name, _span(c["mean_cosine"]), _span(c["centred_mean_cosine"]),
                   f"{c['mean_cosine'][0]:.3f} / {c['centred_mean_cosine'][0]:.3f}"]
                  for r in rows for name, c in r["states"].items()])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--sample", type=int, default=2000)
    ap.add_argument("--models", default=",".join(STATES))
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    cache = Path(a.cache_dir) if a.cache_dir else settings.default_cache_dir()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for m in a.models.split(","):
            t = time.perf_counter()
            rows.append(measure(m, a.max_tokens, a.sample, cache, Path(work)))
            print(f"{m}: {time.perf_counter() - t:.0f} s", flush=True)
    print(render(rows))
    if a.out:
        Path(a.out).write_text(json.dumps({"max_tokens": a.max_tokens, "sample": a.sample, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
