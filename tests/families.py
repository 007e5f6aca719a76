"""One tiny randomly initialised model of every architecture family of core/inputs/anatomy.py, built from its config.

    build("llama") -> a LlamaForCausalLM with 2 blocks of width 32 (seeded)

Text families are causal LMs where the family is one (their LM head is the logit lens's unembedding), encoders
otherwise; ViT and DINOv2 take 224x224 images (the image adapter's size), the Whisper encoder 30 s of 80-bin
log-mel frames. Every model has 2 blocks, width 32, 2 heads (1 key/value head where the family has grouped-query
attention), and a vocabulary of VOCAB ids, so that one small tokenizer serves every text family.
"""

from __future__ import annotations

VOCAB = 512
TEXT = ("bert", "roberta", "gpt2", "gpt_neox", "llama", "mistral", "qwen2", "gemma", "phi", "opt", "t5", "mamba")
IMAGE = ("vit", "dinov2")
AUDIO = ("whisper",)
FAMILIES = TEXT + IMAGE + AUDIO  # the 14 of the issue, and DINOv2 (the built-in image model's)
NAMES = {"bert": "BERT", "roberta": "RoBERTa", "gpt2": "GPT-2", "gpt_neox": "GPT-NeoX", "llama": "LLaMA",
         "mistral": "Mistral", "qwen2": "Qwen2", "gemma": "Gemma", "phi": "Phi", "opt": "OPT", "t5": "T5 encoder",
         "mamba": "Mamba", "vit": "ViT", "dinov2": "DINOv2", "whisper": "Whisper encoder"}  # core.inputs.anatomy's families


def _configs(tf, bos: int, eos: int, pad: int) -> dict:
    ids = dict(bos_token_id=bos, eos_token_id=eos, pad_token_id=pad)
    gqa = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
               intermediate_size=64, max_position_embeddings=128, **ids)
    return {
        "bert": (tf.BertModel, tf.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                             intermediate_size=64, max_position_embeddings=128, pad_token_id=pad)),
        # RoBERTa's position ids count from its padding id + 1 (1, as in roberta-base)
        "roberta": (tf.RobertaModel, tf.RobertaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                                      num_attention_heads=2, intermediate_size=64,
                                                      max_position_embeddings=130, bos_token_id=bos, eos_token_id=eos,
                                                      pad_token_id=1)),
        "gpt2": (tf.GPT2LMHeadModel, tf.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=128,
                                                   bos_token_id=bos, eos_token_id=eos)),
        "gpt_neox": (tf.GPTNeoXForCausalLM, tf.GPTNeoXConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                                             num_attention_heads=2, intermediate_size=64,
                                                             max_position_embeddings=128, **ids)),
        "llama": (tf.LlamaForCausalLM, tf.LlamaConfig(**gqa)),
        "mistral": (tf.MistralForCausalLM, tf.MistralConfig(**gqa)),
        "qwen2": (tf.Qwen2ForCausalLM, tf.Qwen2Config(**gqa)),
        "gemma": (tf.GemmaForCausalLM, tf.GemmaConfig(**gqa, head_dim=16)),
        "phi": (tf.PhiForCausalLM, tf.PhiConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                                num_attention_heads=2, intermediate_size=64,
                                                max_position_embeddings=128, **ids)),
        "opt": (tf.OPTForCausalLM, tf.OPTConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                                num_attention_heads=2, ffn_dim=64, max_position_embeddings=128,
                                                word_embed_proj_dim=32, **ids)),
        "t5": (tf.T5EncoderModel, tf.T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
                                              pad_token_id=pad, eos_token_id=eos, decoder_start_token_id=pad)),
        "mamba": (tf.MambaForCausalLM, tf.MambaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                                      state_size=4, expand=2, conv_kernel=2, **ids)),
        "vit": (tf.ViTModel, tf.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                          intermediate_size=64, image_size=224, patch_size=32)),
        "dinov2": (tf.Dinov2Model, tf.Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                   mlp_ratio=2, image_size=224, patch_size=32)),
        "whisper": (tf.WhisperModel, tf.WhisperConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=1,
                                                      encoder_attention_heads=2, decoder_attention_heads=2,
                                                      encoder_ffn_dim=64, decoder_ffn_dim=64, pad_token_id=0,
                                                      bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)),
    }


def build(family: str, seed: int = 0, bos: int = 0, eos: int = 0, pad: int = 0):
    """The tiny model of `family` (seeded), in eval mode; the Whisper encoder-decoder whole (the loader analyses
    its encoder)."""
    import torch
    import transformers as tf

    cls, cfg = _configs(tf, bos, eos, pad)[family]
    torch.manual_seed(seed)
    return cls(cfg).eval()


def modality(family: str) -> str:
    return "image" if family in IMAGE else "audio" if family in AUDIO else "text"
