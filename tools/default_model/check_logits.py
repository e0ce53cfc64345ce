#!/usr/bin/env python3
"""Checks loom against transformers on an exported default-model folder.

    python3 tools/default_model/check_logits.py --model DIR --loom build/loom [--out DIR]

transformers loads the folder (AutoTokenizer, AutoModelForCausalLM, float64)
and computes, per prompt: token ids, logits of every position, a greedy
continuation with its margins and the MTP head's logits. loom computes the same
through its CLI (`loom tokenize`, `loom logits [--mtp]`, `loom run
--print-ids`). The comparison follows the fixtures' rules: max |Δlogit| over
the reference's standard deviation within 1e-4, greedy tokens equal at every
step whose margin is at least 1e-3 up to the first step that may differ.

Writes OUT/check.json (every number) and OUT/reference.safetensors +
reference.json: selected logit rows per prompt that loom's test suite
compares against (tests/data/default-model/). Exit status 0 when all pass.
"""
import argparse, json, os, subprocess, sys, tempfile

import numpy as np
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_def import MTPHead  # noqa: E402

GENESIS = ("In the beginning God created the heaven and the earth. And the earth was without form, and void; "
           "and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. "
           "And God said, Let there be light: and there was light. And God saw the light, that it was good: and "
           "God divided the light from the darkness. And God called the light Day, and the darkness he called "
           "Night. And the evening and the morning were the first day.")
PROMPTS = [("once", "Once upon a time", "text"),
           ("ishmael", "Call me Ishmael. Some years ago", "text"),
           ("chat", [{"role": "user", "content": 'What does "harpoon" mean?'}], "chat"),
           ("genesis", GENESIS, "text")]
GREEDY_STEPS = 24
TOLERANCE = 1e-4
MARGIN = 1e-3


def loom(binary, *args, stdin=None):
    r = subprocess.run([binary, *args], input=stdin, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"loom {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def loom_logits(binary, model, ids, vocab, mtp=False):
    with tempfile.NamedTemporaryFile(suffix=".f32") as f:
        loom(binary, "logits", "--model", model, "--ids", ",".join(map(str, ids)), "--out", f.name,
             *(["--mtp"] if mtp else []))
        a = np.fromfile(f.name, dtype="<f4")
    rows = len(ids) - 1 if mtp else len(ids)
    return torch.from_numpy(a.reshape(rows, vocab).astype(np.float64))


def rel_err(ref, got):
    return ((ref - got).abs().max() / ref.std()).item()


@torch.no_grad()
def greedy(model, ids, n, device):
    seq, toks, margins = list(ids), [], []
    for _ in range(n):
        logits = model(input_ids=torch.tensor([seq], device=device)).logits[0, -1].cpu()
        top = torch.topk(logits, 2)
        toks.append(int(top.indices[0]))
        margins.append(float(top.values[0] - top.values[1]))
        seq.append(toks[-1])
    return toks, margins


def greedy_agrees(ref, margins, got):
    """Fixture rule: equal until the first step whose margin is below MARGIN."""
    for k, (r, m) in enumerate(zip(ref, margins)):
        if k >= len(got):
            return False, k
        if r != got[k]:
            return m < MARGIN, k
        if m < MARGIN:
            return True, k
    return True, len(ref)


def selected_rows(T):
    return sorted({0, T // 2, max(0, T - 2), T - 1})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--loom", required=True)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float64, attn_implementation="eager")
    model = model.to(device).eval()
    cfg = model.config
    print(f"transformers: {type(model).__name__} ({cfg.model_type}), vocab {cfg.vocab_size}, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters", flush=True)
    mtp = MTPHead(cfg)
    mtp_sd = load_file(os.path.join(args.model, "model-mtp.safetensors"))
    missing = mtp.load_state_dict({k[4:]: v for k, v in mtp_sd.items()}, strict=False)
    assert not missing.unexpected_keys and all(k.startswith("rotary") for k in missing.missing_keys), missing
    mtp = mtp.to(device=device, dtype=torch.float64).eval()
    for layer in mtp.layers:
        layer.self_attn.config._attn_implementation = "eager"

    results, refs, meta, ok = [], {}, {"prompts": [], "greedy_steps": GREEDY_STEPS, "tolerance": TOLERANCE,
                                      "notes": "transformers float64 on the bf16 weights; logits rows "
                                               "listed in pK.rows"}, True
    for k, (name, prompt, kind) in enumerate(PROMPTS):
        text = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False) if kind == "chat" else prompt
        ids = tok(text, add_special_tokens=False).input_ids
        loom_ids = json.loads(loom(args.loom, "tokenize", "--model", args.model, "--jsonl",
                                   stdin=json.dumps(text) + "\n").strip())
        res = {"name": name, "text": text, "tokens": len(ids), "ids_equal": loom_ids == ids}
        if kind == "chat":
            rendered = loom(args.loom, "render", "--model", args.model,
                            stdin=json.dumps({"messages": prompt, "add_generation_prompt": True}))
            res["template_equal"] = rendered == text
        x = torch.tensor([ids], device=device)
        out = model.model(input_ids=x)
        h = out.last_hidden_state
        ref = model.lm_head(h)[0].cpu()
        got = loom_logits(args.loom, args.model, ids, cfg.vocab_size)
        res["logits_rel_err"] = rel_err(ref, got)
        toks, margins = greedy(model, ids, GREEDY_STEPS, device)
        got_toks = [int(t) for t in loom(args.loom, "run", "--model", args.model, "--ids", ",".join(map(str, ids)),
                                         "--max-tokens", str(GREEDY_STEPS), "--ignore-eos",
                                         "--print-ids").strip().split(",") if t]
        agree, upto = greedy_agrees(toks, margins, got_toks)
        res.update(greedy_equal=agree, greedy_compared_steps=upto, greedy=toks, loom_greedy=got_toks,
                   greedy_text=tok.decode(toks))
        rows = selected_rows(len(ids))
        refs[f"p{k}.input_ids"] = torch.tensor(ids, dtype=torch.int32)
        refs[f"p{k}.rows"] = torch.tensor(rows, dtype=torch.int32)
        refs[f"p{k}.logits"] = ref[rows].float()
        refs[f"p{k}.greedy"] = torch.tensor(toks, dtype=torch.int32)
        refs[f"p{k}.greedy_margin"] = torch.tensor(margins, dtype=torch.float32)
        if len(ids) >= 2:
            mref, _ = mtp(h[:, :-1], x[:, 1:], model.model.embed_tokens, model.lm_head)
            mref = mref[0].cpu()
            mgot = loom_logits(args.loom, args.model, ids, cfg.vocab_size, mtp=True)
            res["mtp_logits_rel_err"] = rel_err(mref, mgot)
            mrows = selected_rows(len(ids) - 1)
            refs[f"p{k}.mtp_rows"] = torch.tensor(mrows, dtype=torch.int32)
            refs[f"p{k}.mtp_logits"] = mref[mrows].float()
        passed = (res["ids_equal"] and res.get("template_equal", True) and res["logits_rel_err"] <= TOLERANCE
                  and agree and res.get("mtp_logits_rel_err", 0) <= TOLERANCE)
        res["passed"] = passed
        ok &= passed
        results.append(res)
        meta["prompts"].append({"name": f"p{k}", "label": name, "length": len(ids), "kind": kind, "text": text,
                                **({"messages": prompt} if kind == "chat" else {})})
        print(f"{name:8s} {len(ids):4d} tokens  ids {'==' if res['ids_equal'] else '!='}  "
              f"logits {res['logits_rel_err']:.2e}  mtp {res.get('mtp_logits_rel_err', float('nan')):.2e}  "
              f"greedy {'ok' if agree else 'DIFFERS'} ({upto} steps)  {'PASS' if passed else 'FAIL'}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    json.dump({"passed": ok, "tolerance": TOLERANCE, "device": device, "results": results},
              open(os.path.join(args.out, "check.json"), "w"), indent=1)
    save_file({k: v.contiguous() for k, v in refs.items()}, os.path.join(args.out, "reference.safetensors"))
    json.dump(meta, open(os.path.join(args.out, "reference.json"), "w"), indent=1)
    print("PASS" if ok else "FAIL", flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
