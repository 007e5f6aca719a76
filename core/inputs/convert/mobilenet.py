"""torchvision's ImageNet MobileNetV2 (Sandler et al. 2018) rebuilt from its state dict.

torchvision itself is not a dependency: its wheels are tied to one torch build (0.28.0 fails to
register its C++ ops next to this project's torch 2.13.0 CPU wheel), and only the module
definition is needed. The module below reproduces torchvision's `mobilenet_v2()` parameter names
exactly (`features.{i}...`, `classifier.1`), so the published file loads with `strict=True`.
The published file name carries the first 8 hex digits of its sha256: checked before loading.

Hidden states for the workbench: the stem and each of the 17 inverted-residual blocks and the
last 1x1 conv (`features[0..18]`), each a (B, C, H, W) map whose H*W positions are the tokens and
whose C channels are the dimensions.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import torch
from torch import nn

# (expansion t, output channels c, repeats n, first stride s): the paper's Table 2
INVERTED_RESIDUAL_SETTING = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                             (6, 160, 3, 2), (6, 320, 1, 1))


def _conv_bn(inp: int, out: int, k: int = 3, stride: int = 1, groups: int = 1, act: bool = True) -> nn.Sequential:
    layers = [nn.Conv2d(inp, out, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(out)]
    if act:
        layers.append(nn.ReLU6(inplace=True))
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, inp: int, out: int, stride: int, expand: int):
        super().__init__()
        hidden = inp * expand
        self.use_res_connect = stride == 1 and inp == out
        layers: list[nn.Module] = [] if expand == 1 else [_conv_bn(inp, hidden, k=1)]
        layers += [_conv_bn(hidden, hidden, stride=stride, groups=hidden),  # depthwise
                   nn.Conv2d(hidden, out, 1, 1, 0, bias=False), nn.BatchNorm2d(out)]  # linear bottleneck
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision.models.mobilenet_v2 (width 1.0), same parameter names."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        feats: list[nn.Module] = [_conv_bn(3, 32, stride=2)]
        inp = 32
        for t, c, n, s in INVERTED_RESIDUAL_SETTING:
            for i in range(n):
                feats.append(InvertedResidual(inp, c, s if i == 0 else 1, t))
                inp = c
        feats.append(_conv_bn(inp, 1280, k=1))
        self.features = nn.Sequential(*feats)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def stage_outputs(self, x) -> list:
        """Output of every block of `features`: 19 maps (B, C_l, H_l, W_l)."""
        outs = []
        for f in self.features:
            x = f(x)
            outs.append(x)
        return outs

    def forward(self, x):
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.classifier(x)


def check_sha256_prefix(path: Path) -> str:
    """sha256 of a torchvision-style weight file whose name ends in -<first 8 hex digits>.pth."""
    m = re.search(r"-([0-9a-f]{8,})\.pth$", path.name)
    if not m:
        raise ValueError(f"{path.name}: no hash prefix in the file name")
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    digest = h.hexdigest()
    if not digest.startswith(m.group(1)):
        raise ValueError(f"{path.name}: sha256 {digest[:12]}... does not match the name (corrupted or replaced file)")
    return digest


def build_mobilenet_v2(path: Path) -> MobileNetV2:
    """MobileNetV2 with the ImageNet weights of `path` (hash checked), in eval mode."""
    check_sha256_prefix(path)
    sd = torch.load(path, map_location="cpu", weights_only=True)
    model = MobileNetV2()
    model.load_state_dict(sd, strict=True)
    return model.eval()
