"""Super-weight candidates confirmed by ablation on the probe input (issue 35): Yu et al. 2024 call a weight
a super weight when zeroing it suppresses the massive activation. Each candidate is zeroed alone, one
forward of the probe each, and classified by `core.stats.chain_rules.classify_candidate`; the onset search finds
the block that first makes the massive dim massive and what writes it there.

Hidden state i is the output of block i - 1, taken on the block itself (forward hooks), so that the last
block's state is compared before the final norm; state 0 is block 0's input (the embeddings).
"""

from __future__ import annotations

import numpy as np

from ...inputs.anatomy import blocks
from ...stats import chain_rules as C
from .ablate_links import mark_conv1d, stored_coords, weight_matrix, zeroed_weights
from .hooks import mlp_modules, out_proj_weight, window_masks

MASSIVE = 100.0  # Sun et al. 2024: a value > 100x the median |x| is massive
TOP_CHANNELS = 3  # the onset block's input channels of the output projection reported, by contribution


def _first(x):
    return x[0] if isinstance(x, tuple) else x


def probe_states(model, windows, adapter, device: str, pad_id: int = 0, record: tuple[int, ...] = ()) -> dict:
    """One forward of window 0 of `windows`: ``states`` (hidden states 0..L as (T, d) float64 arrays of the
    real positions, each block's output taken on the block: before a final norm) and, for the blocks in
    `record`, ``mlp_in`` / ``mlp_out`` (the MLP output projection's input (T, d_in) and output (T, d))."""
    # lazy: keeps torch out of a cache hit
    import torch

    mods = blocks(model, "mlp_out")[1]
    sites = mlp_modules(model) if record else []
    T = len(windows.ids[0])
    keep = window_masks(windows, [0], T)[0]
    outs: dict = {}
    ins: dict = {}
    mlp_in: dict = {}
    mlp_out: dict = {}
    handles = [
        mods[0].register_forward_pre_hook(
            lambda _m, a, kw: ins.__setitem__(0, (a[0] if a else kw["hidden_states"])), with_kwargs=True
        )
    ]
    handles += [m.register_forward_hook(lambda _m, _a, o, b=b: outs.__setitem__(b, _first(o))) for b, m in enumerate(mods)]

    def keep_mlp(b: int):
        def hook(_m, a, o):
            mlp_in[b], mlp_out[b] = a[0], _first(o)

        return hook

    for b in record:
        handles.append(sites[b].out_proj.register_forward_hook(keep_mlp(b)))
    try:
        with torch.inference_mode():
            adapter.forward(model, windows, [0], torch.device(device), pad_id)
    finally:
        for h in handles:
            h.remove()

    def rows(x):
        x = x.detach().double().cpu()
        x = x[0] if x.dim() == 3 else x
        return x[: len(keep)][torch.as_tensor(keep[: x.shape[0]])].numpy()

    states = [rows(ins[0])] + [rows(outs[b]) for b in range(len(mods))]
    return {
        "states": states,
        "mlp_in": {b: rows(v) for b, v in mlp_in.items()},
        "mlp_out": {b: rows(v) for b, v in mlp_out.items()},
    }


def _zeroed(model, c: dict):
    w = weight_matrix(model, int(c["block"]), str(c["module"]))
    return zeroed_weights([(w, stored_coords(w, [(int(c["row"]), int(c["col"]))]))])


def _contribution(W: np.ndarray, a_in: np.ndarray, row: int, col: int, t: int) -> float:
    return float(W[row, col] * a_in[t, col])


def confirm(model, windows, adapter, device: str, candidates: list[dict], pad_id: int = 0) -> dict:
    """Each candidate ({block, module, row, col}) zeroed alone on the probe, classified; and the onset search.

    Returns ``candidates`` (each input dict with ``class``, the evidence of `classify_candidate`, and
    ``sign``: the weight's contribution W[row, col] x input_col to its dim at the token holding the dim's
    largest |x| at the block's output (at its input where the ratio falls), beside the dim's value there before
    and after the block), ``probe`` (per hidden state the top-1 ratio and its dim) and
    ``onset`` (see `onset_search`)."""
    mark_conv1d(model)
    sites = mlp_modules(model)
    rec = tuple(sorted({int(c["block"]) for c in candidates}))
    base = probe_states(model, windows, adapter, device, pad_id, record=rec)
    S = base["states"]
    med = [float(np.median(np.abs(h))) for h in S]
    top_dim = [int(np.abs(h).max(0).argmax()) for h in S]
    top_ratio = [float(np.abs(h).max() / m) if m > 0 else float("inf") for h, m in zip(S, med)]
    out = []
    for c in candidates:
        b, r, col = int(c["block"]), int(c["row"]), int(c["col"])
        before = C.dim_ratios(S, r)
        with _zeroed(model, c):
            after = C.dim_ratios(probe_states(model, windows, adapter, device, pad_id)["states"], r)
        got = {**c, **C.classify_candidate(before, after, b, MASSIVE), "ratios": before.tolist(), "ratios_zeroed": after.tolist()}
        W = out_proj_weight(sites[b].out_proj).double().cpu().numpy()
        # the token where the dim is largest: at the block's output, or at its input where the ratio falls
        t = int(np.abs(S[b if got["change"] == "falls" else b + 1][:, r]).argmax())
        got["sign"] = {
            "token_position": t,
            "contribution": _contribution(W, base["mlp_in"][b], r, col, t),
            "dim_value_in": float(S[b][t, r]),
            "dim_value_out": float(S[b + 1][t, r]),
        }
        out.append(got)
    peak = int(np.argmax(top_ratio))
    return {
        "candidates": out,
        "probe": {"top_ratio": top_ratio, "top_dim": top_dim, "median": med},
        "onset": onset_search(model, windows, adapter, device, S, top_dim[peak], pad_id),
    }


def onset_search(model, windows, adapter, device: str, states: list[np.ndarray], dim: int, pad_id: int = 0) -> dict:
    """The first hidden state at which `dim` is massive on the probe, the block that writes it, and what is
    there: at the token holding the dim's largest |x|, the dim's value before and after the block, the MLP
    output projection's part of the change (the rest: attention and anything else in the block), the input
    channels whose W[dim, c] x input_c contribute most, and the largest of them zeroed alone and classified as
    a candidate."""
    r = C.dim_ratios(states, dim)
    i = C.onset(r, MASSIVE)
    got = {"dim": int(dim), "ratios": r.tolist(), "hidden_state": i, "massive": MASSIVE}
    if i is None:
        got["what"] = f"dim {dim} is never {MASSIVE:g}x the median on the probe"
        return got
    if i == 0:
        got.update({"block": None, "what": f"dim {dim} is massive in the embeddings already (hidden state 0)"})
        return got
    b = i - 1
    sites = mlp_modules(model)
    base = probe_states(model, windows, adapter, device, pad_id, record=(b,))
    t = int(np.abs(states[i][:, dim]).argmax())
    W = out_proj_weight(sites[b].out_proj).double().cpu().numpy()
    a = base["mlp_in"][b]
    contrib = W[dim] * a[t]  # (d_in,)
    order = np.argsort(-np.abs(contrib), kind="stable")[:TOP_CHANNELS]
    mlp = float(base["mlp_out"][b][t, dim])
    change = float(states[i][t, dim] - states[b][t, dim])
    top = {"block": b, "module": sites[b].out_rel, "row": int(dim), "col": int(order[0])}
    with _zeroed(model, top):
        after = C.dim_ratios(probe_states(model, windows, adapter, device, pad_id)["states"], dim)
    got.update(
        {
            "block": b,
            "module": sites[b].out_rel,
            "token_position": t,
            "value_in": float(states[b][t, dim]),
            "value_out": float(states[i][t, dim]),
            "change": change,
            "mlp_part": mlp,
            "rest_part": change - mlp,
            "top_channels": [
                {
                    "col": int(c),
                    "weight": float(W[dim, c]),
                    "input": float(a[t, c]),
                    "contribution": float(contrib[c]),
                    "share_of_mlp": float(contrib[c] / mlp) if mlp else None,
                }
                for c in order
            ],
            "top_weight": {
                **top,
                "value": float(W[dim, order[0]]),
                **C.classify_candidate(r, after, b, MASSIVE),
                "ratios_zeroed": after.tolist(),
            },
        }
    )
    return got
