#!/usr/bin/env python3
"""Trains loom's default model (tokenizer, Qwen3.5 model and MTP head) on the
corpus from gather_corpus.py and exports the Hugging Face folder.

Runs on the GPU machine (torch, transformers, tokenizers):

    python3 tools/default_model/train.py --corpus corpus.jsonl.xz --out DIR [--steps N]

Seeded: the same corpus, seed and arguments give the same tokenizer, the same
initial weights and the same batch order; GPU kernels may still differ in the
last bits between runs.
"""
import argparse, json, lzma, math, os, random, sys, time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_tokenizer  # noqa: E402
import export  # noqa: E402
from model_def import MTPHead, SPECIALS, init_mtp_, text_config  # noqa: E402


def load_texts(path):
    texts = []
    with lzma.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            texts.append(build_tokenizer.render_chat(d["messages"]) if "messages" in d else d["text"])
    return texts


def encode(tok, texts, eot):
    """One token stream: every document followed by <|endoftext|>."""
    out = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        out.extend(enc.ids)
        out.append(eot)
    return np.asarray(out, dtype=np.int32)


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


def losses(model, mtp, x):
    """Main next-token loss, MTP loss on t+2 (hidden at t, token t+1) and the
    MTP's second, recursive step on t+3 (its own output at t, token t+2),
    which is how drafts 2..K are made at inference."""
    T = x.shape[1] - 1
    h = model.model(input_ids=x[:, :T]).last_hidden_state  # post final norm
    embed, head = model.model.embed_tokens, model.lm_head
    main = F.cross_entropy(head(h).float().flatten(0, 1), x[:, 1:].flatten().long())
    l1, h1 = mtp(h[:, :T - 1], x[:, 1:T], embed, head)
    m1 = F.cross_entropy(l1.float().flatten(0, 1), x[:, 2:].flatten().long())
    l2, _ = mtp(h1[:, :T - 2], x[:, 2:T], embed, head, first_position=1)
    m2 = F.cross_entropy(l2.float().flatten(0, 1), x[:, 3:].flatten().long())
    return main, m1, m2


def batch(tokens, starts, seq):
    idx = starts[:, None] + torch.arange(seq + 1, device=starts.device)[None, :]
    return tokens[idx]


@torch.no_grad()
def evaluate(model, mtp, tokens, args):
    model.eval(), mtp.eval()
    g = torch.Generator(device="cpu").manual_seed(args.seed + 7)
    starts = torch.randint(0, len(tokens) - args.seq - 2, (args.eval_batches, args.batch), generator=g)
    sums = torch.zeros(3)
    for k in range(args.eval_batches):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            parts = losses(model, mtp, batch(tokens, starts[k].cuda(), args.seq))
        sums += torch.tensor([p.item() for p in parts])
    model.train(), mtp.train()
    return (sums / args.eval_batches).tolist()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True, help="exported Hugging Face folder")
    ap.add_argument("--log", help="JSON lines of training progress (default OUT/../train_log.jsonl)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--steps", type=int, default=1100)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--mtp-weight", type=float, default=0.5, help="weight of the t+2 loss")
    ap.add_argument("--mtp2-weight", type=float, default=0.25, help="weight of the recursive t+3 loss")
    ap.add_argument("--val-share", type=float, default=0.02)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--eval-batches", type=int, default=8)
    ap.add_argument("--max-seconds", type=float, default=0,
                    help="stop early after this much training time (0: never); the summary says so")
    args = ap.parse_args()
    log_path = args.log or os.path.join(os.path.dirname(os.path.abspath(args.out)), "train_log.jsonl")

    random.seed(args.seed), np.random.seed(args.seed), torch.manual_seed(args.seed)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cuda.matmul.allow_tf32 = True
    t0 = time.time()

    texts = load_texts(args.corpus)
    tok = build_tokenizer.train(texts)
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    n_val = max(1, int(len(texts) * args.val_share))
    train_tokens = torch.from_numpy(encode(tok, texts[:-n_val], ids["<|endoftext|>"])).cuda()
    val_tokens = torch.from_numpy(encode(tok, texts[-n_val:], ids["<|endoftext|>"])).cuda()
    t_data = time.time() - t0
    print(f"tokenizer + encoding: {t_data:.1f} s; {len(train_tokens)} train / {len(val_tokens)} val tokens; "
          f"{sum(map(len, texts)) / (len(train_tokens) + len(val_tokens)):.2f} chars per token", flush=True)

    from transformers import Qwen3_5ForCausalLM
    cfg = text_config(ids)
    cfg._attn_implementation = "sdpa"
    model = Qwen3_5ForCausalLM(cfg).cuda().train()
    mtp = MTPHead(cfg).cuda().train()
    init_mtp_(mtp, cfg.initializer_range)
    n_main = sum(p.numel() for p in model.parameters())
    n_mtp = sum(p.numel() for n, p in mtp.named_parameters())
    print(f"parameters: {n_main / 1e6:.2f} M main (tied embeddings) + {n_mtp / 1e6:.2f} M MTP head", flush=True)

    params = [p for p in list(model.parameters()) + list(mtp.parameters()) if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    g = torch.Generator(device="cpu").manual_seed(args.seed)
    log = open(log_path, "w")
    t_train = time.time()
    seen, best, stopped_early = 0, None, False
    for step in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args)
        starts = torch.randint(0, len(train_tokens) - args.seq - 2, (args.batch,), generator=g).cuda()
        x = batch(train_tokens, starts, args.seq)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            main_loss, m1, m2 = losses(model, mtp, x)
            loss = main_loss + args.mtp_weight * m1 + args.mtp2_weight * m2
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        seen += args.batch * args.seq
        stopped_early = bool(args.max_seconds) and time.time() - t_train > args.max_seconds
        last = step == args.steps - 1 or stopped_early
        if step % 50 == 0 or last:
            el = time.time() - t_train
            rec = {"step": step, "loss": main_loss.item(), "mtp_loss": m1.item(), "mtp2_loss": m2.item(),
                   "grad_norm": gnorm.item(), "lr": lr_at(step, args), "tokens": seen,
                   "epochs": seen / len(train_tokens), "seconds": round(el, 1), "tokens_per_s": seen / el}
            if (step % args.eval_every == 0 and step) or last:
                rec["val_loss"], rec["val_mtp_loss"], rec["val_mtp2_loss"] = evaluate(model, mtp, val_tokens, args)
                # Keep the weights with the best validation loss: the corpus is
                # small enough that later epochs could start to memorise it.
                if best is None or rec["val_loss"] < best[0]["val_loss"]:
                    best = (dict(rec), {k: v.detach().clone() for k, v in model.state_dict().items()},
                            {k: v.detach().clone() for k, v in mtp.state_dict().items()})
            log.write(json.dumps(rec) + "\n"), log.flush()
            print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in rec.items()),
                  flush=True)
        if last:
            break
    train_s = time.time() - t_train
    model.load_state_dict(best[1])
    mtp.load_state_dict(best[2])

    summary = {"seed": args.seed, "args": vars(args), "parameters_main": n_main, "parameters_mtp": n_mtp,
               "train_tokens": len(train_tokens), "val_tokens": len(val_tokens), "tokens_seen": seen,
               "epochs": seen / len(train_tokens), "train_seconds": round(train_s, 1),
               "data_seconds": round(t_data, 1), "gpu": torch.cuda.get_device_name(),
               "torch": torch.__version__, "final": rec, "exported": best[0],
               "stopped_early": stopped_early}
    export.export(model, mtp, tok, args.out, summary)
    print(json.dumps(summary, indent=1), flush=True)


if __name__ == "__main__":
    main()
