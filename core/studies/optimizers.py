"""The optimizers a training can use (`TrainSpec.optimizer`), the torch side.

- `adamw`: transformers' default (the Trainer builds torch's fused AdamW itself; nothing here changes it,
  so every cached AdamW run keeps its weights);
- `sgd`: `torch.optim.SGD` with momentum 0.9 on the Trainer's two parameter groups (weight decay on the
  matrices, none on biases and norms: the same coefficient, as torch's SGD applies it, L2 added to the
  gradient), under the same cosine schedule, warm-up and gradient clipping;
- `coupled-adam`: `CoupledAdamW` below.

All three reach the Trainer through `optimizer_cls_and_kwargs` (`trainer_optimizer`), so its schedule, its
clipping and its optimizer.pt (saved with every resumable checkpoint, loaded on resume) stay the Trainer's.
"""

from __future__ import annotations

import torch
from torch import nn

from .train_spec import TrainSpec

SGD_MOMENTUM = 0.9


class CoupledAdamW(torch.optim.AdamW):
    """AdamW whose second moment is coupled across the vocabulary for the embedding matrices
    (Stollenwerk & Stollenwerk, ACL 2025, "Better Embeddings with Coupled Adam", arXiv 2502.08441).

    For an embedding matrix E (V x d: the input embeddings, and the output matrix when it is not tied to
    them), row i = token i, with gradient g_{i,t} (a d-vector) at step t, Adam's moments are kept per row
    as usual,

        m_{i,t} = b1 m_{i,t-1} + (1 - b1) g_{i,t}          m^_{i,t} = m_{i,t} / (1 - b1^t)
        v_{i,t} = b2 v_{i,t-1} + (1 - b2) g_{i,t}^2        v^_{i,t} = v_{i,t} / (1 - b2^t)

    and Coupled Adam replaces every row's bias-corrected second moment by its mean over the vocabulary
    (the mean over rows, per hidden component), so that every token's update has the same scale:

        v^_t = (1 / V) sum_j v^_{j,t}                      (one d-vector shared by all V rows)
        E_i <- E_i (1 - lr wd) - lr m^_{i,t} / (sqrt(v^_t) + eps)

    (weight decay decoupled, as in AdamW). Every other parameter is plain AdamW: torch's own step, fused
    when asked. The per-row v is what is stored (its mean is taken at each step; the moving average is
    linear, so this equals storing the mean), in torch's state keys: `state_dict` / `load_state_dict` are
    torch's, so a killed run resumes from the Trainer's optimizer.pt.

    Parameters
    ----------
    params : iterable of parameters or of parameter groups (dicts), as torch.optim.AdamW takes
    coupled : the embedding matrices (V x d tensors, rows = tokens) whose second moment is coupled
    **kw : AdamW's keywords (lr, betas, eps, weight_decay, fused...)
    """

    def __init__(self, params, coupled=(), **kw):
        ids = {id(p) for p in coupled}
        groups = list(params)
        if groups and not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        split = []
        for g in groups:
            ps = list(g["params"])
            for flag in (False, True):
                mine = [p for p in ps if (id(p) in ids) == flag]
                if mine:
                    split.append({**g, "params": mine, "coupled": flag})
        for g in split:
            if g["coupled"] and any(p.ndim != 2 for p in g["params"]):
                raise ValueError(
                    f"Coupled Adam couples V x d embedding matrices; got shapes {[tuple(p.shape) for p in g['params']]}"
                )
        super().__init__(split, **kw)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        groups = self.param_groups
        try:  # torch's AdamW step over the plain groups only
            self.param_groups = [g for g in groups if not g.get("coupled")]
            super().step()
        finally:
            self.param_groups = groups
        for g in groups:
            if g.get("coupled"):
                self._coupled_step(g)
        return loss

    def _coupled_step(self, group: dict) -> None:
        b1, b2 = group["betas"]
        lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
        for p in group["params"]:
            if p.grad is None:
                continue
            g = p.grad  # (V, d)
            st = self.state[p]
            if not st:  # torch's keys and types, so the state dict reads like AdamW's
                st["step"] = torch.tensor(0.0, dtype=torch.float32)
                st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            st["step"] += 1
            t = float(st["step"])
            m, v = st["exp_avg"], st["exp_avg_sq"]
            p.mul_(1 - lr * wd)
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            v_shared = v.mean(dim=0, keepdim=True) / (1 - b2**t)  # (1, d): the mean over the V rows
            p.addcdiv_(m, v_shared.sqrt().add_(eps), value=-lr / (1 - b1**t))


def embedding_matrices(model: nn.Module) -> list[nn.Parameter]:
    """The model's V x d token matrices: the input embeddings, and the output matrix when it is a separate
    parameter (untied). Position embeddings and biases are not among them."""
    out = []
    for get in ("get_input_embeddings", "get_output_embeddings"):
        mod = getattr(model, get, lambda: None)()
        w = getattr(mod, "weight", None)
        if isinstance(w, nn.Parameter) and w.ndim == 2 and all(w is not o for o in out):
            out.append(w)
    if not out:
        raise ValueError(f"{type(model).__name__} exposes no input embedding matrix for Coupled Adam.")
    return out


def trainer_optimizer(spec: TrainSpec, model: nn.Module, args) -> tuple[type, dict] | None:
    """The Trainer's `optimizer_cls_and_kwargs` for `spec.optimizer` (None for AdamW: the Trainer's own,
    unchanged). `args`: the TrainingArguments (lr, betas and eps come from them, as the Trainer's AdamW
    takes them; the Trainer adds the parameter groups with their weight decay)."""
    if spec.optimizer == "adamw":
        return None
    if spec.optimizer == "sgd":
        return torch.optim.SGD, {"lr": args.learning_rate, "momentum": SGD_MOMENTUM}
    # the Trainer's default AdamW is torch's fused kernel: the plain parameters take the same one
    fused = args.optim == "adamw_torch_fused"
    return CoupledAdamW, {
        "lr": args.learning_rate,
        "betas": (args.adam_beta1, args.adam_beta2),
        "eps": args.adam_epsilon,
        "fused": fused or None,
        "coupled": embedding_matrices(model),
    }
