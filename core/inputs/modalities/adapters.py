"""Modality adapters: one batch of items in, the hidden states of every layer out.

Every adapter returns a list of (B, T, d) tensors (layer 0 first) on the positions its `Items`
describe, so the streaming statistics, the sample and their exactness are the same code for
text, images and audio.

- `TextAdapter`: token windows through a transformers model (input_ids, attention_mask).
- `CanineAdapter`: characters through CANINE, whose deep layers run on molecules (blocks of 4
  characters): every character reads the molecule CANINE itself gives it when it upsamples.
- `ViTAdapter`: pictures resized to 224x224, ImageNet-normalised, through a ViT/DINOv2; position 0
  is CLS, then the 16x16 patches row by row.
- `WhisperEncoderAdapter`: 30 s log-mel windows through the Whisper encoder (1500 frames of 20 ms).
- `CNNAdapter`: pictures through a CNN; at every stage the feature vectors (channels = dims) at the
  7x7 grid of image locations (cell centres), zero-padded to the widest stage (zeros change no
  cosine and no norm; `layer_dims` says how many channels each stage really has).
"""

from __future__ import annotations

import numpy as np

from ...base.errors import InputError
from ...stats.batching import pad_batch
from ..convert.dinov2 import preprocess
from ..convert.whisper import log_mel
from .items import CNN_GRID, WHISPER_SECONDS
from .zoo import model_channels

IMAGE_SIZE = 224


def hidden_states_of(out):
    """The per-layer hidden states of a forward's output, or a clear error when it has none."""
    hs = getattr(out, "hidden_states", None)
    if hs is None and isinstance(out, dict):
        hs = out.get("hidden_states")
    if not hs:
        raise InputError("The model returned no hidden states (asked with output_hidden_states=True): the "
                         "workbench reads the output of every layer, so it needs a model whose forward returns "
                         "`hidden_states` (transformers base models do; a custom head or an exported graph may not).")
    return hs


def pixel_array(pictures) -> np.ndarray:
    return np.stack([preprocess(p.pixels, IMAGE_SIZE) for p in pictures])


class TextAdapter:
    modality = "text"

    def dims(self, model) -> tuple[int, int]:
        cfg = model.config
        return (int(getattr(cfg, "num_hidden_layers", 0) or cfg.n_layer) + 1,
                int(getattr(cfg, "hidden_size", 0) or cfg.n_embd))

    def forward(self, model, windows, b, dev, pad_id: int = 0):
        # lazy: keeps torch out of a cache hit
        import torch

        ids, att = pad_batch([windows.ids[i] for i in b], pad_id)
        ids_t = torch.as_tensor(ids).to(dev, non_blocking=True)
        out = model(input_ids=ids_t, attention_mask=torch.as_tensor(att).to(dev, non_blocking=True),
                    output_hidden_states=True)
        return hidden_states_of(out), ids_t


class CanineAdapter(TextAdapter):
    """CANINE (Clark et al. 2022): positions are characters (Unicode code points) at every layer.

    Its hidden states are: the character embeddings and the initial local character layer (one
    state per character), the 12 deep layers' input and outputs on *molecules* (the [CLS] molecule,
    then one per block of `downsampling_rate` characters, from a strided convolution), then the
    upsampled projection and the final character layer (one state per character again). A deep
    state is read, for each character, at the molecule the model itself repeats onto that
    character before its final layer (`CanineModel._repeat_molecules`): the statistics of every
    layer are over the same analysed characters, and a molecule counts once per character it
    covers. 2 + (layers + 1) + 2 hidden states in all.
    """

    def dims(self, model) -> tuple[int, int]:
        return int(model.config.num_hidden_layers) + 5, int(model.config.hidden_size)

    def forward(self, model, windows, b, dev, pad_id: int = 0):
        hs, ids_t = super().forward(model, windows, b, dev, pad_id)
        T = ids_t.shape[1]
        return [h if h.shape[1] == T else model._repeat_molecules(h, char_seq_length=T) for h in hs], ids_t


class ViTAdapter:
    modality = "image"

    def dims(self, model) -> tuple[int, int]:
        return int(model.config.num_hidden_layers) + 1, int(model.config.hidden_size)

    @staticmethod
    def layout(model) -> tuple[int, int, tuple[int, int]]:
        """(positions, prefix tokens, patch grid) of one 224x224 image."""
        g = IMAGE_SIZE // int(model.config.patch_size)
        prefix = 1 + int(getattr(model.config, "num_register_tokens", 0) or 0)
        return prefix + g * g, prefix, (g, g)

    def inputs(self, model, items, b, dev) -> dict:
        """The forward's keyword inputs for items `b` (the chain ablations run the same inputs)."""
        # lazy: keeps torch out of a cache hit
        import torch

        return {"pixel_values": torch.as_tensor(pixel_array([items.payload[i] for i in b])).to(dev)}

    def forward(self, model, items, b, dev, pad_id: int = 0):
        out = model(**self.inputs(model, items, b, dev), output_hidden_states=True)
        return hidden_states_of(out), None


class WhisperEncoderAdapter:
    modality = "audio"

    def dims(self, model) -> tuple[int, int]:
        return int(model.config.encoder_layers) + 1, int(model.config.d_model)

    def inputs(self, model, items, b, dev) -> dict:
        """The forward's keyword inputs for items `b` (the chain ablations run the same inputs)."""
        # lazy: keeps torch out of a cache hit
        import torch

        feats = []
        for i in b:
            clip, start = items.payload[i]
            feats.append(log_mel(clip.load(start, WHISPER_SECONDS)))  # only this window is decoded
        return {"input_features": torch.as_tensor(np.stack(feats)).to(dev)}

    def forward(self, model, items, b, dev, pad_id: int = 0):
        out = model(**self.inputs(model, items, b, dev), output_hidden_states=True)
        return hidden_states_of(out), None


class CNNAdapter:
    modality = "image"

    def __init__(self, model):
        self.channels = model_channels(model)

    def dims(self, model) -> tuple[int, int]:
        return len(self.channels), max(self.channels)

    @staticmethod
    def layout(model=None) -> tuple[int, int, tuple[int, int]]:
        return CNN_GRID * CNN_GRID, 0, (CNN_GRID, CNN_GRID)

    def maps(self, model, x) -> list:
        # lazy: keeps torch out of a cache hit
        from ..convert.mobilenet import MobileNetV2

        if isinstance(model, MobileNetV2):
            return model.stage_outputs(x)
        return list(hidden_states_of(model(pixel_values=x, output_hidden_states=True)))

    def forward(self, model, items, b, dev, pad_id: int = 0):
        # lazy: keeps torch out of a cache hit
        import torch

        x = torch.as_tensor(pixel_array([items.payload[i] for i in b])).to(dev)
        D = max(self.channels)
        hs = []
        for m in self.maps(model, x):  # (B, C, H, W)
            B, C, H, W = m.shape
            rows = ((np.arange(CNN_GRID) + 0.5) * H / CNN_GRID).astype(int)
            cols = ((np.arange(CNN_GRID) + 0.5) * W / CNN_GRID).astype(int)
            g = m[:, :, rows][:, :, :, cols]  # (B, C, G, G): the cell centres
            g = g.flatten(2).transpose(1, 2)  # (B, G*G, C)
            hs.append(torch.nn.functional.pad(g, (0, D - C)) if C < D else g)
        return hs, None


def adapter_for(model):
    """The adapter of a loaded model (by its class)."""
    name = type(model).__name__
    if name in ("Dinov2Model", "ViTModel", "DeiTModel", "BeitModel", "Dinov2WithRegistersModel"):
        return ViTAdapter()
    if name == "WhisperEncoder":
        return WhisperEncoderAdapter()
    if name in ("MobileNetV2", "ResNetModel"):
        return CNNAdapter(model)
    if name == "CanineModel":
        return CanineAdapter()
    return TextAdapter()
