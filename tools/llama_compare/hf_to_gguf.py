#!/usr/bin/env python3
"""Convert a Qwen3.5 (dense) checkpoint folder to a GGUF file for llama.cpp.

Written for the loom / llama.cpp comparison of docs/PERF.md ("CPU: loom beside
llama.cpp"): it lets llama.cpp run the very weights loom runs, so the two can
be timed and their logits compared on the same model.

Usage:
    PYTHONPATH=LLAMA_CPP_SRC/gguf-py python3 tools/llama_compare/hf_to_gguf.py \
        MODEL_DIR OUT.gguf [--tokenizer DIR] [--tokenizer-pre qwen2]

MODEL_DIR is a Hugging Face folder (config.json + model.safetensors, or shards
listed in model.safetensors.index.json), e.g. one written by
build/bench/make_random_checkpoint. The tokenizer.json is read from --tokenizer
(default MODEL_DIR); its vocabulary is padded with unused placeholder tokens up
to config.json's vocab_size, so a random checkpoint of the 0.8B shape (248,320
ids) can carry the Qwen3 tokenizer (151,669 ids). Only the weights and the shape
matter for timing; the tokenizer is there because llama.cpp needs one to load.

What it needs: Python 3 with numpy, and llama.cpp's gguf-py package on
PYTHONPATH (the writer of the file format; nothing else of llama.cpp is used).
The safetensors files are read here with numpy (8-byte header length, JSON
header, raw little-endian data), without the safetensors package.

The mapping, as llama.cpp's qwen35 architecture expects it:
  - bf16 matrices stay bf16, bit for bit; norms, conv kernels and the other
    small tensors are written as float32 (llama.cpp's CPU ops want them so);
  - Qwen3.5's zero-centred RMSNorm weights (scale 1 + w) are written as 1 + w,
    except the gated norm inside Gated DeltaNet (linear_attn.norm), which is
    a plain scale;
  - linear_attn.A_log is written as -exp(A_log), the decay rate llama.cpp
    multiplies by; dt_bias becomes ssm_dt.bias; conv1d [C, 1, K] -> [C, K];
  - when a layer has more value heads than key heads, the value-head rows
    (and out_proj's columns, the conv channels, a/b/A_log/dt_bias) are
    reordered from grouped-by-key-head to tiled order, which is the order
    llama.cpp's broadcast over key heads reads;
  - the attention q_proj (query and output gate interleaved per head) is kept
    as it is; the vision tower and the MTP head are left out.
Only model_type qwen3_5 (dense) is converted; MoE checkpoints are refused.
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("error: the gguf package is missing: set PYTHONPATH to llama.cpp's gguf-py folder")


DTYPES = {"BF16": (np.uint16, "bf16"), "F32": (np.float32, "f32"), "F16": (np.float16, "f16")}


class ConvertError(Exception):
    pass


def read_safetensors_header(path):
    """The tensors of one safetensors file: name -> (dtype, shape, memmap)."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ConvertError(f"{path}: not a safetensors file (shorter than 8 bytes)")
        (n,) = struct.unpack("<Q", head)
        size = os.path.getsize(path)
        if n > size - 8:
            raise ConvertError(f"{path}: header length {n} runs past the end of the file")
        header = json.loads(f.read(n))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = info["dtype"]
        if dtype not in DTYPES:
            raise ConvertError(f"{path}: tensor {name} has dtype {dtype}, not one of bf16, f16, f32")
        np_type = DTYPES[dtype][0]
        shape = tuple(int(d) for d in info["shape"])
        begin, end = info["data_offsets"]
        count = math.prod(shape)
        if end - begin != count * np.dtype(np_type).itemsize or base + end > size:
            raise ConvertError(f"{path}: tensor {name}: data offsets do not match its shape")
        data = np.memmap(path, dtype=np_type, mode="r", offset=base + begin, shape=shape)
        out[name] = (dtype, shape, data)
    return out


def read_checkpoint(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    elif os.path.exists(os.path.join(model_dir, "model.safetensors")):
        files = ["model.safetensors"]
    else:
        raise ConvertError(f"{model_dir}: no model.safetensors nor model.safetensors.index.json")
    tensors = {}
    for name in files:
        tensors.update(read_safetensors_header(os.path.join(model_dir, name)))
    return tensors


def to_f32(dtype, data):
    if dtype == "BF16":
        return (np.asarray(data, dtype=np.uint32) << 16).view(np.float32)
    return np.asarray(data, dtype=np.float32)


def f32_to_bf16_bits(x):
    """Round to nearest even, as a uint16 array of bf16 bit patterns."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> 16) & 1))
    return (rounded >> 16).astype(np.uint16)


def tiled_value_order(n_k, n_v):
    """Value heads are stored grouped by key head (k0: v0..v(r-1), k1: ...);
    llama.cpp wants them tiled (v0 of every key head, then v1 of every ...).
    Returns, for each new position, the old head index."""
    r = n_v // n_k
    return [k * r + j for j in range(r) for k in range(n_k)]


def reorder_heads(a, axis, order, head_size):
    """Permute blocks of head_size along axis by the head order given."""
    idx = np.concatenate([np.arange(h * head_size, (h + 1) * head_size) for h in order])
    return np.take(a, idx, axis=axis)


def text_config(cfg):
    t = cfg.get("text_config", cfg)
    model_type = cfg.get("model_type", t.get("model_type"))
    if model_type not in ("qwen3_5", "qwen3_5_text"):
        raise ConvertError(f"model_type {model_type!r}: only Qwen3.5 dense (qwen3_5) is converted")
    if t.get("num_experts") or t.get("num_local_experts"):
        raise ConvertError("Qwen3.5 MoE checkpoints are not converted by this tool")
    if t.get("hidden_act", "silu") != "silu":
        raise ConvertError(f"hidden_act {t.get('hidden_act')!r}: only silu is converted")
    return t


def write_tokenizer(w, tok_dir, vocab_size, pre):
    path = os.path.join(tok_dir, "tokenizer.json")
    if not os.path.exists(path):
        raise ConvertError(f"{path} is missing: name a folder with a tokenizer.json with --tokenizer")
    with open(path, encoding="utf-8") as f:
        tok = json.load(f)
    model = tok.get("model", {})
    if model.get("type") != "BPE":
        raise ConvertError(f"{path}: a {model.get('type')} tokenizer; only byte-level BPE is converted")
    names = [None] * vocab_size
    types = [gguf.TokenType.UNUSED] * vocab_size
    for text, i in model["vocab"].items():
        if i >= vocab_size:
            raise ConvertError(f"{path}: token id {i} is past the model's vocab_size {vocab_size}")
        names[i] = text
        types[i] = gguf.TokenType.NORMAL
    for added in tok.get("added_tokens", []):
        i = added["id"]
        if i >= vocab_size:
            raise ConvertError(f"{path}: added token id {i} is past the model's vocab_size {vocab_size}")
        names[i] = added["content"]
        types[i] = gguf.TokenType.CONTROL if added.get("special") else gguf.TokenType.USER_DEFINED
    for i in range(vocab_size):
        if names[i] is None:
            names[i] = f"[PAD{i}]"
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(names)
    w.add_token_types(types)
    w.add_token_merges(merges)
    config_path = os.path.join(tok_dir, "tokenizer_config.json")
    if os.path.exists(config_path):
        with open(config_path, encoding="utf-8") as f:
            tc = json.load(f)
        ids = {text: i for i, text in enumerate(names)}
        for key, add in (("eos_token", w.add_eos_token_id), ("pad_token", w.add_pad_token_id),
                         ("bos_token", w.add_bos_token_id)):
            value = tc.get(key)
            if isinstance(value, dict):
                value = value.get("content")
            if isinstance(value, str) and value in ids:
                add(ids[value])
        w.add_add_bos_token(False)
    return len(model["vocab"]) + len(tok.get("added_tokens", []))


def convert(model_dir, out_path, tok_dir, pre):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    t = text_config(cfg)
    n_layer = t["num_hidden_layers"]
    hidden = t["hidden_size"]
    head_dim = t.get("head_dim", hidden // t["num_attention_heads"])
    rope = t.get("rope_parameters") or {}
    partial = rope.get("partial_rotary_factor", t.get("partial_rotary_factor", 0.25))
    theta = rope.get("rope_theta", t.get("rope_theta", 10000.0))
    sections = list(rope.get("mrope_section", [11, 11, 10]))[:4]
    sections += [0] * (4 - len(sections))
    n_k, n_v = t["linear_num_key_heads"], t["linear_num_value_heads"]
    dk, dv = t["linear_key_head_dim"], t["linear_value_head_dim"]
    if n_v % n_k:
        raise ConvertError(f"linear_num_value_heads {n_v} is not a multiple of linear_num_key_heads {n_k}")
    layer_types = t.get("layer_types")
    interval = t.get("full_attention_interval", 4)
    if layer_types is None:
        layer_types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                       for i in range(n_layer)]
    for i, kind in enumerate(layer_types):
        if (kind == "full_attention") != ((i + 1) % interval == 0):
            raise ConvertError(f"layer_types is not one full-attention layer every {interval}: "
                               "llama.cpp's qwen35 loader takes only that pattern")
    tied = cfg.get("tie_word_embeddings", t.get("tie_word_embeddings", False))

    src = read_checkpoint(model_dir)

    def find(name):
        for prefix in ("model.language_model.", "model.", ""):
            if prefix + name in src:
                return src[prefix + name]
        raise ConvertError(f"{model_dir}: tensor {name} is missing")

    w = gguf.GGUFWriter(out_path, "qwen35")
    w.add_name(os.path.basename(os.path.normpath(model_dir)))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    w.add_block_count(n_layer)
    w.add_context_length(t.get("max_position_embeddings", 32768))
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(t["intermediate_size"])
    w.add_head_count(t["num_attention_heads"])
    w.add_head_count_kv(t["num_key_value_heads"])
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(t.get("rms_norm_eps", 1e-6))
    w.add_rope_freq_base(theta)
    w.add_rope_dimension_count(int(head_dim * partial))
    w.add_rope_dimension_sections(sections)
    w.add_ssm_conv_kernel(t["linear_conv_kernel_dim"])
    w.add_ssm_state_size(dk)
    w.add_ssm_group_count(n_k)
    w.add_ssm_time_step_rank(n_v)
    w.add_ssm_inner_size(dv * n_v)
    w.add_full_attention_interval(interval)
    n_tok = write_tokenizer(w, tok_dir, t["vocab_size"], pre)

    order = tiled_value_order(n_k, n_v) if n_v != n_k else None
    conv_dim, kernel = 2 * n_k * dk + n_v * dv, t["linear_conv_kernel_dim"]
    counts = {"bf16": 0, "f32": 0}

    def put_matrix(gguf_name, entry, transform=None):
        """A weight matrix: bf16 stays bf16 bit for bit unless reordered."""
        dtype, _, data = entry
        if transform is None and dtype == "BF16":
            w.add_tensor(gguf_name, data, raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            a = to_f32(dtype, data)
            if transform is not None:
                a = transform(a)
            if dtype == "BF16":  # a permutation of bf16 values: exact
                w.add_tensor(gguf_name, f32_to_bf16_bits(a), raw_dtype=gguf.GGMLQuantizationType.BF16)
            else:
                w.add_tensor(gguf_name, np.ascontiguousarray(a, dtype=np.float32))
        counts["bf16" if dtype == "BF16" else "f32"] += 1

    def put_f32(gguf_name, a):
        w.add_tensor(gguf_name, np.ascontiguousarray(a, dtype=np.float32))
        counts["f32"] += 1

    def norm(name, shift):
        dtype, _, data = find(name)
        a = to_f32(dtype, data)
        return a + 1.0 if shift else a

    put_matrix("token_embd.weight", find("embed_tokens.weight"))
    put_f32("output_norm.weight", norm("norm.weight", True))
    if not tied:
        if "lm_head.weight" not in src:
            raise ConvertError(f"{model_dir}: lm_head.weight is missing and the embeddings are not tied")
        put_matrix("output.weight", src["lm_head.weight"])

    for i in range(n_layer):
        L = f"layers.{i}."
        B = f"blk.{i}."
        put_f32(B + "attn_norm.weight", norm(L + "input_layernorm.weight", True))
        put_f32(B + "post_attention_norm.weight", norm(L + "post_attention_layernorm.weight", True))
        for hf, gg in (("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")):
            put_matrix(B + gg + ".weight", find(L + "mlp." + hf + ".weight"))
        if layer_types[i] == "full_attention":
            for hf, gg in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"),
                           ("o_proj", "attn_output")):
                put_matrix(B + gg + ".weight", find(L + "self_attn." + hf + ".weight"))
            put_f32(B + "attn_q_norm.weight", norm(L + "self_attn.q_norm.weight", True))
            put_f32(B + "attn_k_norm.weight", norm(L + "self_attn.k_norm.weight", True))
            continue
        A = L + "linear_attn."
        qk = 2 * n_k * dk

        def rows(head_size, skip=0):
            if order is None:
                return None
            return lambda a: np.concatenate([a[:skip], reorder_heads(a[skip:], 0, order, head_size)], 0)

        put_matrix(B + "attn_qkv.weight", find(A + "in_proj_qkv.weight"), rows(dv, qk))
        put_matrix(B + "attn_gate.weight", find(A + "in_proj_z.weight"), rows(dv))
        put_matrix(B + "ssm_beta.weight", find(A + "in_proj_b.weight"), rows(1))
        put_matrix(B + "ssm_alpha.weight", find(A + "in_proj_a.weight"), rows(1))
        put_matrix(B + "ssm_out.weight", find(A + "out_proj.weight"),
                   None if order is None else (lambda a: reorder_heads(a, 1, order, dv)))
        # [C, 1, K] in Hugging Face checkpoints; loom's random ones hold it flat
        dtype, shape, data = find(A + "conv1d.weight")
        if math.prod(shape) != conv_dim * kernel:
            raise ConvertError(f"{A}conv1d.weight has shape {list(shape)}, not {conv_dim} x {kernel} values")
        conv = to_f32(dtype, data).reshape(conv_dim, kernel)
        if order is not None:
            conv = rows(dv, qk)(conv)
        put_f32(B + "ssm_conv1d.weight", conv)
        a_log = norm(A + "A_log", False)
        dt_bias = norm(A + "dt_bias", False)
        if order is not None:
            a_log, dt_bias = a_log[order], dt_bias[order]
        put_f32(B + "ssm_a", -np.exp(a_log))
        put_f32(B + "ssm_dt.bias", dt_bias)
        put_f32(B + "ssm_norm.weight", norm(A + "norm.weight", False))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {out_path}: {n_layer} layers, {counts['bf16']} bf16 + {counts['f32']} f32 tensors, "
          f"{n_tok} tokenizer ids padded to {t['vocab_size']}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir")
    p.add_argument("out")
    p.add_argument("--tokenizer", help="folder with tokenizer.json (default: MODEL_DIR)")
    p.add_argument("--tokenizer-pre", default="qwen2",
                   help="llama.cpp's pre-tokenizer name (default qwen2, the Qwen regex)")
    args = p.parse_args()
    try:
        convert(args.model_dir, args.out, args.tokenizer or args.model_dir, args.tokenizer_pre)
    except (ConvertError, OSError, KeyError, ValueError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
