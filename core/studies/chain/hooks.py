"""Hooks of the chain pass: per block, the MLP output projection's largest |input| and |output|
channels (super weights), the LLM.int8 counts on the inputs of the attention and MLP projections,
and alpha_1 (attention to the first position) per head.

Where each architecture keeps these modules (the MLP output projection, the attention and MLP inputs) is its
entry in core/inputs/anatomy.py (`mlp_modules`): LLaMA-type `mlp.down_proj`, GPT-2 `mlp.c_proj` (Conv1D: weight is
in x out), GPT-NeoX `mlp.dense_4h_to_h`, BERT `output.dense`, ViT / DINOv2 `mlp.fc2`, Whisper and OPT `fc2`.

Blocks are numbered from 0 as the model's module list numbers them: block b reads hidden_states[b]
and writes hidden_states[b + 1] (layer 0 = embeddings). Hooks never outlive `ChainHooks.hooks()`.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import numpy as np

from ...inputs.anatomy import MlpSites, mlp_sites
from ..attention.arch import hook_handles, probabilities


def mlp_modules(model) -> list[MlpSites]:
    """Every block's MLP output projection and the first projections reading the residual stream
    (core.inputs.anatomy.mlp_sites). Raises ValueError when the model has no recognised blocks."""
    return mlp_sites(model)


def out_proj_weight(mod):
    """The output projection's weight as (out, in) (GPT-2's Conv1D stores in x out)."""
    W = mod.weight.detach()
    return W.T if type(mod).__name__ == "Conv1D" else W


def window_masks(windows, b: list[int], T: int) -> np.ndarray:
    """(len(b), T) the real positions of windows `b` (text: not padding; items: the valid positions)."""
    valid = getattr(windows, "valid", None)
    m = np.zeros((len(b), T), dtype=bool)
    for r, i in enumerate(b):
        n = len(windows.ids[i])
        m[r, :n] = True if valid is None else np.asarray(valid[i])[:n]
    return m


class ChainHooks:
    """Accumulators of the chain pass, on the device, updated by forward hooks.

    Per block b (B blocks): ``max_in`` (B, d_in) max over counted positions of |input channel| of the
    MLP output projection, ``max_out`` (B, d_out) of |output channel|; per site s in ("attention",
    "mlp") ``int8_<s>`` (B, d) the counted positions with |x_d| >= `threshold` on that input and
    ``n_<s>`` (B,) the counted positions; with `attention` (eager attention), ``alpha_sum`` (B_attn, H)
    the sum over windows of alpha_1 and ``alpha_n`` the windows.

    Set `mask` (a (batch, T) bool tensor of the positions to count) before each forward; positions
    beyond it (or all, when the hook's T differs from the mask's) are counted as the mask says or all.
    """

    def __init__(self, model, threshold: float = 6.0, attention=None):
        self.blocks = mlp_modules(model)
        self.threshold = float(threshold)
        self.attention = attention  # core.studies.attention.arch.Arch, or None
        self.mask = None
        self.n_real = None  # (batch,) real positions per window, for alpha_1
        self.acc: dict = {}

    def _masked_abs(self, x):
        # lazy: keeps torch out of a cache hit
        import torch

        a = x.detach().abs().float()
        if a.dim() == 2:  # (T, C): one unbatched window
            a = a.unsqueeze(0)
        m = self.mask
        if m is not None and tuple(m.shape) == tuple(a.shape[:2]):
            a = torch.where(m.unsqueeze(-1), a, torch.zeros((), dtype=a.dtype, device=a.device))
            n = m.sum()
        else:
            n = torch.tensor(a.shape[0] * a.shape[1], device=a.device)
        return a, n

    def _put_max(self, key: str, b: int, v, n_blocks: int) -> None:
        # lazy: keeps torch out of a cache hit
        import torch

        if key not in self.acc:
            self.acc[key] = torch.zeros(n_blocks, v.shape[-1], dtype=torch.float64, device=v.device)
        self.acc[key][b] = torch.maximum(self.acc[key][b], v.double())

    def _out_hook(self, b: int):
        def hook(_mod, args, out):
            a_in, _ = self._masked_abs(args[0])
            a_out, _ = self._masked_abs(out[0] if isinstance(out, tuple) else out)
            self._put_max("max_in", b, a_in.amax((0, 1)), len(self.blocks))
            self._put_max("max_out", b, a_out.amax((0, 1)), len(self.blocks))
        return hook

    def _in_hook(self, b: int, site: str):
        def hook(_mod, args):
            # lazy: keeps torch out of a cache hit
            import torch

            a, n = self._masked_abs(args[0])
            big = (a >= self.threshold).sum((0, 1)).double()
            key = f"int8_{site}"
            if key not in self.acc:
                self.acc[key] = torch.zeros(len(self.blocks), big.shape[-1], dtype=torch.float64, device=big.device)
                self.acc[f"n_{site}"] = torch.zeros(len(self.blocks), dtype=torch.float64, device=big.device)
            self.acc[key][b] += big
            self.acc[f"n_{site}"][b] += n.double()
        return hook

    def _attn_hook(self, l: int):
        def hook(_mod, _args, out):
            # lazy: keeps torch out of a cache hit
            import torch

            w = probabilities(out)
            B, H, T, _ = w.shape
            n = self.n_real if self.n_real is not None and len(self.n_real) == B else torch.full((B,), T, device=w.device)
            real = (torch.arange(T, device=w.device)[None, :] < n[:, None]).to(torch.float64)  # (B, T) real queries
            alpha = torch.einsum("bht,bt->bh", w[:, :, :, 0].double(), real) / n.clamp_min(1)[:, None].double()
            if "alpha_sum" not in self.acc:
                L = len(self.attention.layers)
                self.acc["alpha_sum"] = torch.zeros(L, H, dtype=torch.float64, device=w.device)
                self.acc["alpha_n"] = torch.zeros(L, dtype=torch.float64, device=w.device)
            self.acc["alpha_sum"][l] += alpha.sum(0)
            self.acc["alpha_n"][l] += B
            return None
        return hook

    @contextmanager
    def hooks(self) -> Iterator[None]:
        with hook_handles() as handles:
            for bm in self.blocks:
                handles.append(bm.out_proj.register_forward_hook(self._out_hook(bm.block)))
                if bm.attn_in is not None:
                    handles.append(bm.attn_in.register_forward_pre_hook(self._in_hook(bm.block, "attention")))
                if bm.mlp_in is not None:
                    handles.append(bm.mlp_in.register_forward_pre_hook(self._in_hook(bm.block, "mlp")))
            if self.attention is not None:
                for l, al in enumerate(self.attention.layers):
                    handles.append(al.module.register_forward_hook(self._attn_hook(l)))
            yield

    def numpy(self) -> dict:
        return {k: v.cpu().numpy() for k, v in self.acc.items()}
