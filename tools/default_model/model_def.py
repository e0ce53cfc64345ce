"""Shape of loom's default model and its MTP head (torch + transformers).

The main model is transformers' own Qwen3_5ForCausalLM, so what is trained is
exactly what transformers (and loom) run. transformers has no MTP head; the
head below follows docs/model-spec.md §C (the same structure as the fixture
generator's): predict token t+2 from the post-norm hidden state at t and the
embedding of token t+1, through one gated full-attention decoder layer.
"""
import copy

import torch
import torch.nn as nn
from transformers import Qwen3_5TextConfig
from transformers.models.qwen3_5 import modeling_qwen3_5 as mq

VOCAB = 8192
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids VOCAB-3 .. VOCAB-1

ARCH = dict(
    hidden_size=512, intermediate_size=1024, num_hidden_layers=8,
    # three Gated DeltaNet layers per gated full-attention layer, as in the releases
    layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(8)],
    num_attention_heads=4, num_key_value_heads=2, head_dim=128,
    linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=64, linear_value_head_dim=64,
    linear_conv_kernel_dim=4, rms_norm_eps=1e-6, max_position_embeddings=8192,
    rope_parameters={"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25,
                     "mrope_section": [6, 5, 5], "mrope_interleaved": True},
    tie_word_embeddings=True, mtp_num_hidden_layers=1, initializer_range=0.02,
)


def text_config(special_ids):
    cfg = Qwen3_5TextConfig(vocab_size=VOCAB, eos_token_id=[special_ids["<|im_end|>"], special_ids["<|endoftext|>"]],
                            pad_token_id=special_ids["<|endoftext|>"], bos_token_id=None, **ARCH)
    return cfg


class MTPHead(nn.Module):
    """mtp.* tensors: pre_fc_norm_embedding, pre_fc_norm_hidden, fc, layers.0, norm."""

    def __init__(self, cfg):
        super().__init__()
        cfg = copy.deepcopy(cfg)
        cfg.layer_types = ["full_attention"]
        cfg.num_hidden_layers = 1
        H, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.pre_fc_norm_embedding = mq.Qwen3_5RMSNorm(H, eps=eps)
        self.pre_fc_norm_hidden = mq.Qwen3_5RMSNorm(H, eps=eps)
        self.fc = nn.Linear(2 * H, H, bias=False)
        self.layers = nn.ModuleList([mq.Qwen3_5DecoderLayer(cfg, 0)])
        self.norm = mq.Qwen3_5RMSNorm(H, eps=eps)
        self.rotary = mq.Qwen3_5TextRotaryEmbedding(cfg)

    def forward(self, hidden, next_ids, embed, lm_head, first_position=0):
        """hidden [B,T,H] post-norm states at positions p = first_position..; next_ids the
        tokens at p+1. Returns (logits predicting p+2, post-norm MTP states)."""
        B, T, _ = hidden.shape
        x = self.fc(torch.cat([self.pre_fc_norm_embedding(embed(next_ids)), self.pre_fc_norm_hidden(hidden)], -1))
        pos = torch.arange(first_position, first_position + T, device=x.device)[None, None, :].expand(3, B, T)
        cos, sin = self.rotary(x, pos)
        for layer in self.layers:
            # attention_mask None: causal attention (sdpa is_causal / eager gets an explicit mask)
            mask = None
            if layer.self_attn.config._attn_implementation == "eager":
                mask = torch.full((T, T), float("-inf"), dtype=x.dtype, device=x.device).triu(1)[None, None]
            x = layer(x, position_embeddings=(cos, sin), attention_mask=mask, position_ids=pos[0],
                      past_key_values=None)
        x = self.norm(x)
        return lm_head(x), x


def init_mtp_(mtp, std):
    for m in mtp.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=std)


def mtp_state_dict(mtp):
    return {"mtp." + k: v for k, v in mtp.state_dict().items() if not k.startswith("rotary")}
