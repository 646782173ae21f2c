#!/usr/bin/env python3
"""The GPT of `tide gpt train` in PyTorch, as a new user writes it (nanoGPT's model: pre-norm blocks, GELU tanh, causal attention through
F.scaled_dot_product_attention, the head tied to the token embedding; 4 layers, 4 heads,
width 128, context 64, batch 12; AdamW lr 1e-3, betas (0.9, 0.99), weight decay 0.1 on the
2-D weights only, gradients clipped to norm 1.0; warmup + cosine schedule as tide's).

  --mode eager     plain PyTorch, torch.set_num_threads(os.cpu_count()) (its default)
  --mode compile   the model's forward through torch.compile (default backend)
  --preset char (default) or gpt2-124m (12 layers, 12 heads, width 768, context 1024, GPT-2's
                   50257 tokens; the batches are then random token windows: the tokenizer does
                   not change the step's time)
  --device cpu (default) or cuda (timed with torch.cuda.synchronize through float(loss))
  --dtype float32 (default), bfloat16 or float16: the forward under torch.autocast (AMP; float16
                   with a torch.amp.GradScaler), float32 parameters and AdamW state, as tide's
                   --dtype
  --tf32           float32 GEMMs and convolutions may use TF32 (torch.set_float32_matmul_precision
                   ("high")), as tide's --tf32

Data: --data FILE (UTF-8 text; a character vocabulary, a 90/10 train/validation split, random
windows from a seeded generator), as tide does; the numbers differ (different generators).
One step = forward, loss, backward, clip, AdamW step, then float(loss) (the sync).
--eval-every N: the validation loss over --eval-batches batches every N steps and at the end.

Prints one JSON line: framework, version, mode, steps, ms_per_step (median over the second
half of the steps), tokens_per_s, train_loss (mean of the last 50 steps), val_loss,
train_seconds (steps only, evaluations excluded), threads.
"""
import argparse
import json
import math
import os
import resource
import statistics
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def save_policy(ctx, op, *args, **kwargs):
    """PyTorch's selective checkpoint policy matching tide's --recompute-selective: save the
    outputs of GEMMs whose inner dimension K is at least 4 * width (the MLP's down-projection)
    and of attention; recompute everything else."""
    from torch.utils.checkpoint import CheckpointPolicy
    aten = torch.ops.aten
    if op in (aten.mm.default, aten.addmm.default):
        mat1 = args[-2]
        if mat1.shape[-1] >= SAVE_MIN_K[0]:
            return CheckpointPolicy.MUST_SAVE
    if "scaled_dot_product" in str(op):
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


SAVE_MIN_K = [0]  # set from the model's width in main()


def selective_context():
    from torch.utils.checkpoint import create_selective_checkpoint_contexts
    return create_selective_checkpoint_contexts(save_policy)


class Block(nn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.h = h
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.c_attn, self.attn_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, block, layers, heads, c):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(block, c)
        self.h = nn.ModuleList([Block(c, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(c)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    checkpoint = False  # each block under torch.utils.checkpoint
    selective = False   # every block but the last, saving its large-K GEMMs and attention

    def forward(self, ids, targets):
        x = self.wte(ids) + self.wpe.weight[: ids.shape[1]]
        for i, b in enumerate(self.h):
            if self.selective and self.training and i + 1 < len(self.h):
                x = torch.utils.checkpoint.checkpoint(b, x, use_reentrant=False,
                                                      context_fn=selective_context)
            elif self.checkpoint and self.training:
                x = torch.utils.checkpoint.checkpoint(b, x, use_reentrant=False)
            else:
                x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.T
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def rss_now_mb():
    """The process's resident set now (Linux /proc), in MB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def lr_at(it, lr, min_lr, warmup, decay):
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it > decay:
        return min_lr
    ratio = (it - warmup) / (decay - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data")
    ap.add_argument("--preset", choices=["char", "gpt2-124m"], default="char")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--ctx", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--eval-batches", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--checkpoint", action="store_true",
                    help="run each block under torch.utils.checkpoint (recomputed in backward)")
    ap.add_argument("--checkpoint-selective", action="store_true",
                    help="every block but the last under torch.utils.checkpoint with a selective "
                         "policy: the MLP down-projection's and attention's outputs are saved")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(os.cpu_count())
    dev = torch.device(a.device)
    if a.tf32:
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.allow_tf32 = True
    low = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(a.dtype)
    scaler = torch.amp.GradScaler(dev.type) if a.dtype == "float16" else None

    def autocast():
        return torch.autocast(dev.type, dtype=low, enabled=low is not None)
    if a.preset == "char":
        if not a.data:
            ap.error("--preset char needs --data FILE")
        layers, heads, width, block = 4, 4, 128, 64
        raw = open(a.data, "rb").read()
        vocab = sorted(set(raw))
        table = np.zeros(256, dtype=np.int64)
        table[vocab] = np.arange(len(vocab))
        tokens = torch.from_numpy(table[np.frombuffer(raw, dtype=np.uint8)])
        n_vocab = len(vocab)
    else:
        layers, heads, width, block, n_vocab = 12, 12, 768, 1024, 50257
        tokens = torch.randint(n_vocab, (4_000_000,), generator=torch.Generator().manual_seed(1))
    a.ctx = a.ctx or block
    split = int(len(tokens) * 0.9)
    train, val = tokens[:split], tokens[split:]
    gen = torch.Generator().manual_seed(a.seed)

    def batch(src):
        ix = torch.randint(len(src) - a.ctx - 1, (a.batch,), generator=gen)
        x = torch.stack([src[i : i + a.ctx] for i in ix])
        y = torch.stack([src[i + 1 : i + 1 + a.ctx] for i in ix])
        return x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)

    model = GPT(n_vocab, block, layers, heads, width).to(dev)
    model.checkpoint = a.checkpoint
    model.selective = a.checkpoint_selective
    SAVE_MIN_K[0] = 4 * width
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.99))
    fwd = torch.compile(model) if a.mode == "compile" else model

    def val_loss():
        model.eval()
        with torch.no_grad(), autocast():
            v = statistics.fmean(float(fwd(*batch(val))) for _ in range(a.eval_batches))
        model.train()
        return v

    rss_start_mb = rss_now_mb()
    times, losses, vl, train_s = [], [], None, 0.0
    for it in range(a.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(it, a.lr, a.lr / 10, a.warmup, a.steps)
        x, y = batch(train)
        t0 = time.perf_counter()
        with autocast():
            loss = fwd(x, y)
        opt.zero_grad(set_to_none=True)
        if scaler:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        losses.append(float(loss.detach()))
        dt = time.perf_counter() - t0
        times.append(dt)
        train_s += dt
        if a.eval_every and (it + 1) % a.eval_every == 0 and it + 1 < a.steps:
            print(json.dumps({"step": it + 1, "val_loss": val_loss()}), flush=True)
    vl = val_loss()
    ms = statistics.median(times[len(times) // 2 :]) * 1e3
    print(json.dumps({"framework": "torch", "version": torch.__version__, "mode": a.mode,
                      "preset": a.preset, "device": a.device, "batch": a.batch, "ctx": a.ctx,
                      "dtype": a.dtype, "matmul_precision": "high" if a.tf32 else "highest",
                      "peak_mb": (torch.cuda.max_memory_allocated() / 2**20
                                  if dev.type == "cuda" else None),
                      "steps": a.steps, "ms_per_step": ms,
                      "tokens_per_s": a.batch * a.ctx / (ms / 1e3),
                      "train_loss": statistics.fmean(losses[-50:]), "val_loss": vl,
                      "train_seconds": train_s, "threads": torch.get_num_threads(),
                      "checkpoint": a.checkpoint,
                      "checkpoint_selective": a.checkpoint_selective, "rss_start_mb": rss_start_mb,
                      "rss_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main()
