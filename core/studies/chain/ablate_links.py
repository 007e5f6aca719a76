"""The outlier chain broken link by link (issue 24): temporary changes to a model, and what each does
to the loss and to every layer's geometry.

Ablations (each restores the model bit-exactly on exit, also on error):
- `super_weights`: zero the super weight(s) W[row, col] of the MLP output projection (Yu et al. 2024);
  controls `super_random` (as many random weights of the same matrices, seeded) and `super_largest`
  (the largest-magnitude weights of the same matrices other than the super weights);
- `single:<block>:<row>:<col>`: zero one candidate alone, with its own controls `single_random:...` (one random
  weight of its matrix) and `single_largest:...` (its matrix's largest weight that is no candidate);
- `massive_dims`: zero the massive dim(s) of the residual stream (Sun et al. 2024) at every position,
  on the output of every block from the one that produces the first massive layer on; control
  `massive_random` (as many random other dims, the same blocks);
- `outlier_dims`: zero the outlier dims in every norm (Puccetti et al. 2022, `core.compute.ablation.zeroed_dims`);
  control `outlier_random`.

`profile(...)` measures, on the same inputs, before and after each ablation:
- `loss`: the next-token loss of a causal LM, the masked-token loss of a masked LM (15% of the
  positions masked, seeded); None (not applicable) for a model without an LM head, images, speech;
- per hidden layer (0 = embeddings): `mean_cosine` over the analysed positions, `outlier_count`
  (the 3-sigma activation rule on m_d = mean |x_d|), `top1_median` (the largest |x| over the median |x|
  of that layer's values);
- per block: `sink_share`, the attention paid to the first position, averaged over heads and over the
  queries after it (eager attention).

torch, and core.compute.ablation (which imports it), are imported inside the functions that change or run a model:
this module is imported on a cache hit (core.entry.cli, through core.studies.chain.run) and by the app's first page
(core.views.report and ui.data read stored chain ablations here: `cached_chain_ablation`, `default_targets`).
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Any, Callable, Iterator

import numpy as np

from ...base.config import CONFIG, key_code
from ...base.errors import InputError
from ...base.progress import Progress
from ...base.spec import stable_hash
from ...compute import pipeline as P
from ...inputs.anatomy import blocks
from ...stats.outliers import run_outlier_dims
from ..attention import eager_attention

ABLATIONS = {  # key -> (label, the ablation it controls or None)
    "super_weights": ("the super-weight candidates zeroed together", None),
    "super_random": ("as many random weights of the same matrix zeroed", "super_weights"),
    "super_largest": ("as many largest-magnitude non-super weights zeroed", "super_weights"),
    "massive_dims": ("massive dim(s) zeroed in the residual stream", None),
    "massive_random": ("as many random dims zeroed in the residual stream", "massive_dims"),
    "outlier_dims": ("outlier dims zeroed in every norm", None),
    "outlier_random": ("as many random dims zeroed in every norm", "outlier_dims"),
}
SINGLE = ("single", "single_random", "single_largest")  # one candidate alone, and its controls (keys end :b:r:c)
CURVES = ("mean_cosine", "outlier_count", "top1_median")  # per hidden layer


def single_key(kind: str, s: dict) -> str:
    """The key of one candidate's ablation (`kind` in SINGLE): "single:11:507:1229"."""
    return f"{kind}:{int(s['block'])}:{int(s['row'])}:{int(s['col'])}"


def describe(key: str, module: str = "") -> tuple[str, str | None]:
    """(label, the key it controls or None) of an ablation key, the per-candidate ones included."""
    if key in ABLATIONS:
        return ABLATIONS[key]
    kind, b, r, c = key.split(":")
    at = f"block {b} {module}[{r}, {c}]" if module else f"block {b} weight [{r}, {c}]"
    if kind == "single":
        return f"{at} zeroed alone", None
    what = "a random weight of its matrix" if kind == "single_random" else "its matrix's largest non-candidate weight"
    return f"{what} zeroed (control of {at})", f"single:{b}:{r}:{c}"
MLM_MASK_SHARE = 0.15


# ----------------------------------------------------------------------------- the changes
def weight_matrix(model: Any, block: int, module: str):
    """The weight of `module` (a name relative to block `block`, e.g. "mlp.down_proj", or a full name)."""
    try:
        mod = model.get_submodule(module)
    except AttributeError:
        mod = blocks(model)[1][int(block)].get_submodule(module)
    w = getattr(mod, "weight", None)
    if w is None or w.ndim != 2:
        raise ValueError(f"{module!r} of block {block} has no 2-D weight")
    return w


@contextmanager
def zeroed_weights(targets: list[tuple[Any, list[tuple[int, int]]]]) -> Iterator[None]:
    """Zero W[row, col] for each (weight, [(row, col), ...]); restore them bit-exactly on exit."""
    # lazy: keeps torch out of a cache hit and the app's first page (see the module's doc)
    import torch

    saved = []
    try:
        with torch.no_grad():
            for w, coords in targets:
                r, c = (torch.as_tensor(v, dtype=torch.long, device=w.device) for v in zip(*coords))
                saved.append((w, r, c, w[r, c].clone()))
                w[r, c] = 0
        yield
    finally:
        with torch.no_grad():
            for w, r, c, old in reversed(saved):
                w[r, c] = old


@contextmanager
def zeroed_residual(model: Any, dims: list[int], from_block: int) -> Iterator[None]:
    """Zero `dims` of the hidden state on the output of every block >= `from_block`, at every position
    (forward hooks, removed on exit)."""
    # lazy: keeps torch out of a cache hit and the app's first page (see the module's doc)
    import torch

    block_list = blocks(model)[1]
    idx = torch.as_tensor(sorted(int(d) for d in dims), dtype=torch.long)

    def hook(_mod, _inp, out):
        h = out[0] if isinstance(out, tuple) else out
        h = h.clone()
        h[..., idx.to(h.device)] = 0
        return (h, *out[1:]) if isinstance(out, tuple) else h

    # prepend: before the hooks with which transformers records hidden_states, so that they record the change
    handles = [b.register_forward_hook(hook, prepend=True) for b in block_list[max(0, int(from_block)):]]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


# ----------------------------------------------------------------------------- the measurements
def _loss_kind(model: Any) -> str | None:
    name = type(model).__name__
    if name.endswith(("ForCausalLM", "LMHeadModel")):
        return "causal"
    if name.endswith("ForMaskedLM"):
        return "masked"
    return None


def layer_curves(hs: list[np.ndarray]) -> dict:
    """Per hidden layer, from its analysed vectors (N, d) (float64): mean cosine (exact over ordered
    pairs), the 3-sigma activation-outlier count, top-1 |x| over the median |x|.

    >>> x = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    >>> c = layer_curves([x]); c["mean_cosine"][0], c["top1_median"][0]  # median of |x| over (0, 0, 0, 1, 1, 1): 0.5
    (0.3333333333333333, 2.0)
    """
    out = {k: [] for k in CURVES}
    for x in hs:
        n = len(x)
        u = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-300)
        s = u.sum(0)
        out["mean_cosine"].append(float((s @ s - n) / (n * (n - 1))) if n > 1 else float("nan"))
        m = np.abs(x).mean(0)
        out["outlier_count"].append(int(np.count_nonzero(m - m.mean() > CONFIG.outlier_sigma * m.std())))
        a = np.abs(x)
        med = float(np.median(a))
        out["top1_median"].append(float(a.max() / med) if med > 0 else float("inf"))
    return out


def profile(model: Any, batches: list[dict], seed: int = 0, attentions: bool = True) -> dict:
    """One pass over `batches` (keyword inputs of the model's forward; text batches carry
    `attention_mask`): the loss and the per-layer curves described in the module docstring."""
    # lazy: keeps torch out of a cache hit and the app's first page (see the module's doc)
    import torch

    kind = _loss_kind(model)
    base = getattr(model, "base_model", model) or model
    hs_all: list[list[np.ndarray]] = []
    sink_num: list[float] = []
    sink_den = 0
    total, count = 0.0, 0
    gen = torch.Generator().manual_seed(int(seed))
    with ExitStack() as stack:
        if attentions:
            stack.enter_context(eager_attention(model))
        stack.enter_context(torch.inference_mode())
        for batch in batches:
            mask = batch.get("attention_mask")
            run = model if kind == "causal" else base
            out = run(**batch, output_hidden_states=True, output_attentions=attentions)
            hs = getattr(out, "encoder_hidden_states", None) or out.hidden_states
            B, T = hs[0].shape[:2]
            keep = (mask.bool() if mask is not None else torch.ones(B, T, dtype=torch.bool, device=hs[0].device))
            for i, h in enumerate(hs):
                if len(hs_all) <= i:
                    hs_all.append([])
                hs_all[i].append(h[keep.to(h.device)].double().cpu().numpy())
            att = getattr(out, "encoder_attentions", None) or getattr(out, "attentions", None)
            if attentions and att:
                q = keep.clone()
                q[:, 0] = False  # the queries after the first position
                qf = q.double()
                for li, a in enumerate(att):  # (B, H, T, T)
                    v = float((a[:, :, :, 0].double() * qf[:, None, :].to(a.device)).sum() / a.shape[1])
                    if len(sink_num) <= li:
                        sink_num.append(0.0)
                    sink_num[li] += v
                sink_den += int(q.sum())
            if kind == "causal":
                ids = batch["input_ids"]
                labels = ids.masked_fill(~keep.to(ids.device), -100)[:, 1:]
                logits = out.logits[:, :-1].float()
                total += float(torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100, reduction="sum"))
                count += int((labels != -100).sum())
            elif kind == "masked":
                ids = batch["input_ids"]
                pick = (torch.rand(ids.shape, generator=gen) < MLM_MASK_SHARE).to(ids.device) & keep.to(ids.device)
                if pick.any():
                    mask_id = getattr(model.config, "mask_token_id", None) or 103
                    masked = ids.masked_fill(pick, int(mask_id))
                    logits = model(**{**batch, "input_ids": masked}).logits.float()
                    total += float(torch.nn.functional.cross_entropy(logits[pick], ids[pick], reduction="sum"))
                    count += int(pick.sum())
    curves = layer_curves([np.concatenate(parts) for parts in hs_all])
    return {"loss": (total / count) if count else None, "loss_kind": kind, "loss_tokens": count,
            **curves, "sink_share": [x / sink_den for x in sink_num] if sink_den else None,
            "n_positions": int(sum(len(p) for p in hs_all[0])) if hs_all else 0}


# ----------------------------------------------------------------------------- the plan
def _draw(rng, pool_size: int, k: int, exclude: set) -> list[int]:
    got: list[int] = []
    while len(got) < k:
        i = int(rng.integers(pool_size))
        if i not in exclude and i not in got:
            got.append(i)
    return got


def plan(model: Any, super_weights: list[dict], massive: dict | None, outlier_dims: list[int],
         seed: int = 0, single: list[dict] | None = None) -> dict[str, dict]:
    """Every ablation that the targets allow: key -> {"what", "targets", "enter": () -> context manager}.

    `super_weights`: [{block, module, row, col}] (W as out x in), zeroed together; `single`: the same kind,
    each zeroed alone beside its own controls (`SINGLE`); `massive`: {"dims", "from_block"};
    `outlier_dims`: dims to zero in every norm. Controls are drawn with `seed`."""
    # lazy: core.compute.ablation imports torch; keeps it out of a cache hit and the app's first page (see the module's doc)
    from ...compute.ablation import ablation_modules, zeroed_dims

    rng = np.random.default_rng(seed)
    out: dict[str, dict] = {}
    if super_weights:
        by_mat: dict[tuple, list[tuple[int, int]]] = {}
        for s in super_weights:
            by_mat.setdefault((int(s["block"]), str(s["module"])), []).append((int(s["row"]), int(s["col"])))
        mats = {k: weight_matrix(model, *k) for k in by_mat}
        rnd, big = {}, {}
        for k, coords in by_mat.items():
            w = mats[k]
            n_out, n_in = _out_in(w)
            flat_super = {r * n_in + c for r, c in coords}
            rnd[k] = [divmod(i, n_in) for i in _draw(rng, n_out * n_in, len(coords), flat_super)]
            a = _as_out_in(w).abs().flatten()
            order = a.argsort(descending=True).tolist()
            big[k] = [divmod(i, n_in) for i in [i for i in order[:len(coords) + len(flat_super)]
                                                if i not in flat_super][:len(coords)]]

        def targets(chosen):
            return [(mats[k], stored_coords(mats[k], coords)) for k, coords in chosen.items()]

        def listing(chosen):
            return [{"block": k[0], "module": k[1], "row": int(r), "col": int(c)} for k, cs in chosen.items() for r, c in cs]

        out["super_weights"] = {"targets": listing(by_mat), "enter": lambda: zeroed_weights(targets(by_mat))}
        out["super_random"] = {"targets": listing(rnd), "enter": lambda: zeroed_weights(targets(rnd))}
        out["super_largest"] = {"targets": listing(big), "enter": lambda: zeroed_weights(targets(big))}
    taken: dict[tuple, set] = {}  # per matrix, every candidate's flat index: no control is a candidate
    for s in [*(super_weights or []), *(single or [])]:
        taken.setdefault((int(s["block"]), str(s["module"])), set()).add((int(s["row"]), int(s["col"])))
    for s in single or []:
        k = (int(s["block"]), str(s["module"]))
        w = weight_matrix(model, *k)
        n_out, n_in = _out_in(w)
        flat = {r * n_in + c for r, c in taken[k]}
        rnd1 = divmod(_draw(rng, n_out * n_in, 1, flat)[0], n_in)
        order = _as_out_in(w).abs().flatten().argsort(descending=True)[:len(flat) + 1].tolist()
        big1 = divmod(next(i for i in order if i not in flat), n_in)
        for kind, (r, c) in zip(SINGLE, ((int(s["row"]), int(s["col"])), rnd1, big1)):
            out[single_key(kind, s)] = {
                "targets": [{"block": k[0], "module": k[1], "row": int(r), "col": int(c)}],
                "enter": (lambda w=w, r=r, c=c: zeroed_weights([(w, stored_coords(w, [(int(r), int(c))]))])),
                "module": k[1]}
    if massive and massive.get("dims"):
        dims, fb = sorted(int(d) for d in massive["dims"]), int(massive["from_block"])
        d = int(ablation_modules(model)[0][1].weight.shape[0])
        rd = sorted(_draw(rng, d, len(dims), set(dims)))
        out["massive_dims"] = {"targets": {"dims": dims, "from_block": fb}, "enter": lambda: zeroed_residual(model, dims, fb)}
        out["massive_random"] = {"targets": {"dims": rd, "from_block": fb}, "enter": lambda: zeroed_residual(model, rd, fb)}
    if outlier_dims:
        mods = [m for _, m in ablation_modules(model)]
        od = sorted(int(x) for x in outlier_dims)
        rd2 = sorted(_draw(rng, int(mods[0].weight.shape[0]), len(od), set(od)))
        out["outlier_dims"] = {"targets": {"dims": od}, "enter": lambda: zeroed_dims(mods, od)}
        out["outlier_random"] = {"targets": {"dims": rd2}, "enter": lambda: zeroed_dims(mods, rd2)}
    for k, v in out.items():
        v["what"], v["control_of"] = describe(k, v.pop("module", ""))
    return out


def _is_conv1d(w) -> bool:
    return bool(getattr(w, "_chain_conv1d", False))


def _out_in(w) -> tuple[int, int]:
    return tuple(_as_out_in(w).shape)


def _as_out_in(w):
    return w.detach().T if _is_conv1d(w) else w.detach()


def stored_coords(w, coords: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(c, r) for r, c in coords] if _is_conv1d(w) else [(int(r), int(c)) for r, c in coords]


def run_all(model: Any, batches: list[dict], chosen: dict[str, dict], seed: int = 0, attentions: bool = True,
            on_pass: Callable[[int, int, str], None] | None = None) -> dict:
    """The baseline profile, then each ablation's, on the same batches; the model is restored after each.

    Returns {"baseline": profile, "ablations": {key: {"what", "control_of", "targets", "after": profile,
    "loss_before", "loss_after", "loss_delta", "mean_cosine_before", "mean_cosine_after", ...}}}."""
    step = on_pass or (lambda i, n, what: None)
    n = 1 + len(chosen)
    was_training = model.training
    model.eval()
    try:
        step(0, n, "as is")
        base = profile(model, batches, seed, attentions)
        out = {}
        for i, (k, a) in enumerate(chosen.items()):
            step(1 + i, n, a["what"])
            with a["enter"]():
                after = profile(model, batches, seed, attentions)
            out[k] = {"what": a["what"], "control_of": a["control_of"], "targets": a["targets"],
                      **summary(base, after)}
    finally:
        model.train(was_training)
    return {"baseline": base, "ablations": out}


def summary(before: dict, after: dict) -> dict:
    """The before/after pairs of one ablation (the `ablations` section's entry)."""
    out = {"loss_before": before["loss"], "loss_after": after["loss"],
           "loss_delta": (after["loss"] - before["loss"]) if before["loss"] is not None else None}
    for k in (*CURVES, "sink_share"):
        out[f"{k}_before"], out[f"{k}_after"] = before[k], after[k]
    return out


def mark_conv1d(model: Any) -> None:
    """Tag the weights of GPT-2's Conv1D modules (stored in x out) so that W[row, col] reads out x in."""
    for m in model.modules():
        if type(m).__name__ == "Conv1D" and getattr(m, "weight", None) is not None:
            m.weight._chain_conv1d = True


# ----------------------------------------------------------------------------- a run's ablations (cached, a job)
MASSIVE_RATIO = 100.0  # a layer is massive when its top-1 |x| is > 100x the median |x| (Sun et al. 2024)
MAX_MASSIVE_DIMS = 4
MAX_ITEMS = 8  # images or clips the ablations of an image or audio run are measured on


def default_targets(res: dict) -> dict:
    """What a run's results say to ablate: the super-weight candidates of its `chain` section (core chain):
    the corpus's together (`super_weights`) and each of those and of the confirmed ones alone (`single`), the
    massive dims (the top-1 dims of the layers whose top-1/median > 100, from the first such layer's
    block on) and the run's outlier dims (either definition, persistent)."""
    chain = res.get("chain") or {}
    cands = chain.get("super_weight_candidates")
    if cands is None:  # a chain section stored before issue 35: its super weights were the corpus's candidates
        cands = [{**s, "found_on": "corpus", "class": None} for s in chain.get("super_weights") or []]
    # together: the corpus's candidates (as before issue 35); alone: those and every confirmed one
    joint = [c for c in cands if c.get("found_on") in ("corpus", "both")]
    alone = [c for c in cands if c in joint or c.get("class") == "confirmed"]
    sw = [{k: s[k] for k in ("block", "module", "row", "col")} for s in joint]
    single = [{k: s[k] for k in ("block", "module", "row", "col")} for s in alone]
    ma = res["outliers"].get("massive_activations") or []
    layers = [m for m in ma if m.get("ratio") is not None and m["ratio"] > MASSIVE_RATIO and m.get("dims")]
    massive = None
    if layers:
        counts: dict[int, int] = {}
        for m in layers:
            counts[int(m["dims"][0])] = counts.get(int(m["dims"][0]), 0) + 1
        dims = sorted(sorted(counts, key=lambda d: -counts[d])[:MAX_MASSIVE_DIMS])
        first = int(layers[0]["layer"])
        massive = {"dims": dims, "from_block": max(first - 1, 0), "first_layer": first}
    return {"super_weights": sw, "single": single, "massive": massive, "outlier_dims": run_outlier_dims(res["outliers"])}


def _key(run_key: str, targets: dict, held_out_tokens: int, seed: int) -> str:
    return "chain-ablation:" + stable_hash({"run": run_key, "targets": targets, "held_out": held_out_tokens,
                                            "seed": seed, "code": key_code("chain-ablation")})


def cached_chain_ablation(spec, targets: dict | None = None, held_out_tokens: int | None = None, cache_dir=None) -> dict | None:
    """The stored chain ablations of a computed run, or None (never computes, never loads a model)."""
    run = P.resolve(spec, cache_dir)
    if not P.is_cached(run, cache_dir):
        return None
    res = P.analyze(run, cache_dir)
    targets = default_targets(res) if targets is None else _check_targets(targets)
    held = CONFIG.ablation_held_out_tokens if held_out_tokens is None else int(held_out_tokens)
    return P.get_store(cache_dir).get_json(_key(run.key, targets, held, run.spec.seed))


def run_chain_ablation(spec, targets: dict | None = None, held_out_tokens: int | None = None, cache_dir=None,
                       progress=None, cancel=None, memo: dict | None = None) -> dict:
    """Every ablation of the chain on a run (default targets: `default_targets`), before/after, cached.

    Text: measured on held-out windows (the documents after the analysed ones, as the outlier-dim
    ablation); images and audio: on the run's first MAX_ITEMS items (no loss: not applicable). Nothing
    is stored when it is cancelled (`cancel` is polled between forward passes). `memo`: see
    `core.compute.prepare.prepare` (`core chain` shares its model and documents)."""
    # lazy: core.stats.assemble imports pandas; only what computes the ablations pays for it
    from ...stats.assemble import json_safe

    run = P.resolve(spec, cache_dir)
    spec = run.spec
    res = P.analyze(run, cache_dir, progress, cancel, memo=memo)
    targets = default_targets(res) if targets is None else _check_targets(targets)
    held_tokens = CONFIG.ablation_held_out_tokens if held_out_tokens is None else int(held_out_tokens)
    key = _key(run.key, targets, held_tokens, spec.seed)

    def compute() -> dict:
        # lazy: keeps torch out of a cache hit and the app's first page (see the module's doc)
        from ...compute.forward_run import held_out_batches

        prep = P.prepare_for_ablation(spec, res, cache_dir, progress, "for the chain ablations", memo=memo)
        lm, info = prep.lm, res["manifest"]["model"]
        if prep.modality == "text":
            model = lm.model
            batches, held = held_out_batches(prep, held_tokens, device=lm.base.device)
            where = {"held_out_tokens": held.n_content_tokens, "held_out_documents": held.n_documents}
        else:
            model = lm.base
            n = min(MAX_ITEMS, len(prep.windows.payload))
            batches = [prep.adapter.inputs(model, prep.windows, list(range(i, min(i + 4, n))), model.device)
                       for i in range(0, n, 4)]
            where = {"items": n}
        mark_conv1d(model)
        on_pass = P.pass_reporter(progress, cancel, "The chain ablations were cancelled; nothing partial was stored.")
        try:
            chosen = plan(model, targets["super_weights"], targets["massive"], targets["outlier_dims"], seed=spec.seed,
                          single=targets.get("single"))
            if not chosen:
                raise InputError("Nothing to ablate: the run has no super weight, no massive dim and no outlier dim.")
            got = run_all(model, batches, chosen, seed=spec.seed, on_pass=on_pass)
        except (ValueError, IndexError, AttributeError) as e:
            raise InputError(f"The chain ablations cannot run on {info['label']}: {e}") from None
        return json_safe({**got, "targets": targets, **where, "modality": prep.modality, "model": info["label"],
                          "corpus": res["manifest"]["corpus"]["id"], "run_key": run.key,
                          "loss": got["baseline"]["loss_kind"] or "not applicable"})

    got, hit = P.get_store(cache_dir).get_or_compute(key, compute)
    if progress and not hit:
        progress(Progress("ablation", 1, 1, message="ablations stored"))
    return got


def _check_targets(t: dict) -> dict:
    """Targets given by hand (CLI, URL, job), validated into the stored form."""
    try:
        sw, single = ([{"block": int(s["block"]), "module": str(s["module"]), "row": int(s["row"]), "col": int(s["col"])}
                       for s in t.get(k) or []] for k in ("super_weights", "single"))
        m = t.get("massive")
        massive = ({"dims": sorted(int(d) for d in m["dims"]), "from_block": int(m["from_block"]),
                    **({"first_layer": int(m["first_layer"])} if "first_layer" in m else {})} if m else None)
        od = sorted({int(d) for d in t.get("outlier_dims") or []})
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"Ablation targets not understood ({e}): super_weights [{{block, module, row, col}}], "
                         f"massive {{dims, from_block}}, outlier_dims [ints].") from None
    if any(v < 0 for s in [*sw, *single] for v in (s["block"], s["row"], s["col"])) or any(d < 0 for d in od):
        raise InputError("Ablation targets are non-negative indices.")
    return {"super_weights": sw, "single": single, "massive": massive, "outlier_dims": od}


def job_chain_ablation_key(params: dict) -> str:
    t = params.get("targets")
    return _key(P.run_key(P.run_of(params)), _check_targets(t) if t is not None else {"default": True},
                int(params.get("held_out_tokens") or CONFIG.ablation_held_out_tokens), int(params["spec"].get("seed", 0)))


def job_chain_ablation(params: dict, progress, cancel) -> dict:
    """The "chain-ablation" job: every ablation of the chain on a run (computes the run first if needed)."""
    got = run_chain_ablation(P.run_of(params), params.get("targets"), params.get("held_out_tokens"),
                             progress=progress, cancel=cancel)
    return {k: a["loss_delta"] for k, a in got["ablations"].items()}
