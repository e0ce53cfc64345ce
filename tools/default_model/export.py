"""Writes the trained model as a Hugging Face folder: config.json,
generation_config.json, model.safetensors (main model, bf16, tied embeddings),
model-mtp.safetensors (mtp.*), model.safetensors.index.json (both shards),
tokenizer.json, tokenizer_config.json (with the chat template) and
training.json (how it was made)."""
import copy, json, os

import torch
from safetensors.torch import load_file, save_file

import build_tokenizer
from model_def import mtp_state_dict

MAX_BYTES = 60_000_000


def export(model, mtp, tok, out, summary):
    os.makedirs(out, exist_ok=True)
    # Cast a copy: casting the trained model itself would also round buffers
    # such as the rotary frequencies if it were used again afterwards.
    m16 = copy.deepcopy(model).cpu().to(torch.bfloat16)
    m16.config.dtype = torch.bfloat16
    gen = m16.generation_config
    gen.eos_token_id = list(model.config.eos_token_id)
    gen.pad_token_id = model.config.pad_token_id
    gen.bos_token_id = None
    m16.save_pretrained(out, safe_serialization=True)

    sd = {k: v.detach().cpu().to(torch.bfloat16).contiguous() for k, v in mtp_state_dict(mtp).items()}
    save_file(sd, os.path.join(out, "model-mtp.safetensors"), metadata={"format": "pt"})
    index = {"metadata": {"total_size": 0}, "weight_map": {}}
    for name in ("model.safetensors", "model-mtp.safetensors"):
        tensors = load_file(os.path.join(out, name))
        for k, v in tensors.items():
            index["weight_map"][k] = name
            index["metadata"]["total_size"] += v.numel() * v.element_size()
    json.dump(index, open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=1, sort_keys=True)

    cfg_path = os.path.join(out, "config.json")
    cfg = json.load(open(cfg_path))
    cfg["mtp_num_hidden_layers"] = 1
    json.dump(cfg, open(cfg_path, "w"), indent=2, sort_keys=True)

    build_tokenizer.save(tok, out)
    json.dump(summary, open(os.path.join(out, "training.json"), "w"), indent=1, default=str)

    total = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"exported {out}: {total / 1e6:.1f} MB", flush=True)
    if total > MAX_BYTES:
        raise SystemExit(f"export: {out} is {total} bytes, over the {MAX_BYTES} limit")
