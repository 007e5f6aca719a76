"""The two model classes of our own that the lab trains, registered with transformers' Auto classes so that their
checkpoints load through `from_pretrained` like every other model (`register()` runs on import):

- `GatedLlamaForCausalLM` (model type "gated_llama"): LLaMA with Qiu et al. 2025's attention output gate
  ("Gated Attention for Large Language Models", NeurIPS 2025, position G1): the attention output of each head is
  multiplied elementwise by sigmoid(X W_g + b_g) before o_proj, X the block's (pre-normed) input, the same input
  as q, k and v. transformers has no class that is LLaMA apart from the gate (Qwen3-Next's gated attention comes
  with other norms, partial rotary and MoE layers: not a fair on/off), so this is LLaMA's attention with one line
  added; everything else is transformers' `LlamaForCausalLM`. The bias b_g (initialised at 0, like W_g's small
  normal draw) is ours: at W_g = 0, b_g = +inf the gate is 1 and the model is plain LLaMA (a test checks it).
- `LstmLMForCausalLM` (model type "lstm_lm"): the LSTM language model, because transformers' xLSTM does not train
  on CPU here (core/studies/train_spec.py, REFUSED_ARCHS, says what fails). Each block is a residual LSTM
  (torch's fused `nn.LSTM`, hidden size d) followed by a residual MLP (d -> d_inner -> d, GELU): the Transformer
  block's skeleton with attention replaced by the recurrence and no norms. The MLP is there so that the parameter
  count matches GPT-2's at the same d and depth (an LSTM layer alone has 8 d^2 against a Transformer block's
  12 d^2; widening the LSTM instead needs `proj_size`, which has no fused kernel: 0.76 s per step against 0.04 s).

hidden_states: layer 0 is the embedding output, layer b + 1 the output of block b, as transformers returns them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import transformers as tf
from torch import nn
from transformers.modeling_outputs import BaseModelOutput, CausalLMOutput
from transformers.models.llama import modeling_llama as ml

GATED_LLAMA = "gated_llama"
LSTM_LM = "lstm_lm"


# ----------------------------------------------------------------------------- LLaMA with the attention output gate
class GatedLlamaConfig(tf.LlamaConfig):
    model_type = GATED_LLAMA


class GatedLlamaAttention(ml.LlamaAttention):
    """LlamaAttention (transformers 5.24) with the G1 gate: o_proj(attn(X) * sigmoid(gate_proj(X)))."""

    def __init__(self, config, layer_idx: int):
        super().__init__(config, layer_idx)
        # elementwise and head-specific: one gate per head and channel of the attention output (H * d_h)
        self.gate_proj = nn.Linear(config.hidden_size, config.num_attention_heads * self.head_dim, bias=True)

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, cache=None, **kwargs):
        input_shape = hidden_states.shape[:-1]  # (B, T)
        hidden_shape = (*input_shape, -1, self.head_dim)
        q = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        q, k = ml.apply_rotary_pos_emb(q, k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx, kwargs=kwargs)
        attend = ml.ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, ml.eager_attention_forward)
        out, weights = attend(
            self,
            q,
            k,
            v,
            attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling,
            **kwargs,
        )
        out = out.reshape(*input_shape, -1).contiguous()  # (B, T, H * d_h), heads in q_proj's order
        out = out * torch.sigmoid(self.gate_proj(hidden_states))  # the gate (Qiu et al. 2025, G1)
        return self.o_proj(out), weights


class GatedLlamaForCausalLM(ml.LlamaForCausalLM):
    config_class = GatedLlamaConfig

    def __init__(self, config):
        super().__init__(config)
        for i, layer in enumerate(self.model.layers):
            layer.self_attn = GatedLlamaAttention(config, i)
        self.post_init()


# ----------------------------------------------------------------------------- the LSTM language model
class LstmLMConfig(tf.PretrainedConfig):
    model_type = LSTM_LM

    def __init__(
        self,
        vocab_size: int = 4096,
        hidden_size: int = 128,
        num_hidden_layers: int = 2,
        intermediate_size: int = 256,
        initializer_range: float = 0.02,
        tie_word_embeddings: bool = True,
        **kw,
    ):
        self.vocab_size, self.hidden_size, self.num_hidden_layers = vocab_size, hidden_size, num_hidden_layers
        self.intermediate_size, self.initializer_range = intermediate_size, initializer_range
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kw)


class LstmBlock(nn.Module):
    def __init__(self, d: int, d_inner: int):
        super().__init__()
        self.lstm = nn.LSTM(d, d, batch_first=True)
        self.mlp_in = nn.Linear(d, d_inner)
        self.mlp_out = nn.Linear(d_inner, d)

    def forward(self, x):  # (B, T, d)
        x = x + self.lstm(x)[0]
        return x + self.mlp_out(F.gelu(self.mlp_in(x)))


class LstmLMPreTrainedModel(tf.PreTrainedModel):
    config_class = LstmLMConfig
    base_model_prefix = "model"
    _no_split_modules = ["LstmBlock"]

    def _init_weights(self, module):
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, 0.0, std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LSTM):  # torch's own init (uniform in +-1/sqrt(d)), forget-gate bias at 1
            module.reset_parameters()
            for name, p in module.named_parameters():
                if name.startswith("bias_ih"):
                    with torch.no_grad():
                        p[module.hidden_size : 2 * module.hidden_size].fill_(1.0)


class LstmLMModel(LstmLMPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            LstmBlock(config.hidden_size, config.intermediate_size) for _ in range(config.num_hidden_layers)
        )
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def forward(self, input_ids=None, attention_mask=None, output_hidden_states=None, inputs_embeds=None, **kw):
        # causal by construction: right padding (the extraction's) never reaches an earlier position
        x = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        states = [x]
        for block in self.layers:
            x = block(x)
            states.append(x)
        return BaseModelOutput(last_hidden_state=x, hidden_states=tuple(states) if output_hidden_states else None)


class LstmLMForCausalLM(LstmLMPreTrainedModel, tf.GenerationMixin):
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config):
        super().__init__(config)
        self.model = LstmLMModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        self.model.embed_tokens = value

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, value):
        self.lm_head = value

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        labels=None,
        output_hidden_states=None,
        return_dict=None,
        inputs_embeds=None,
        **kw,
    ):
        output_hidden_states = self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        base = self.model(input_ids, attention_mask, output_hidden_states, inputs_embeds)
        logits = self.lm_head(base.last_hidden_state)  # (B, T, V)
        loss = None
        if labels is not None:  # next-token loss, as transformers' causal LMs shift it
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutput(loss=loss, logits=logits, hidden_states=base.hidden_states)


def register() -> None:
    """Make both model types known to AutoConfig / AutoModelForCausalLM (idempotent)."""
    for cfg, model in ((GatedLlamaConfig, GatedLlamaForCausalLM), (LstmLMConfig, LstmLMForCausalLM)):
        try:
            tf.AutoConfig.register(cfg.model_type, cfg)
        except ValueError:  # registered already (this module imported twice under another name)
            pass
        try:
            tf.AutoModelForCausalLM.register(cfg, model)
        except ValueError:
            pass


register()
