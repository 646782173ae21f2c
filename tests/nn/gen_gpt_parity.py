#!/usr/bin/env python3
# Writes tests/nn/data/gpt_parity_*.safetensors, the golden values of tests/nn/test_gpt.cpp:
# a tiny GPT's initial weights, a batch, PyTorch's loss and gradients, and the parameters
# after 3 AdamW steps with global-norm clipping (weight decay on the 2-D weights only).
# Everything in float64. Run by hand (PyTorch needed), never at test time:
#   python3 tests/nn/gen_gpt_parity.py
# The model is written here from its definition (GPT-2's pre-norm block, Linear weights
# stored (in, out) as tide and GPT-2's checkpoints do, the head tied to wte).
import json
import math
import os
import struct

import torch
import torch.nn.functional as F

V, BLOCK, LAYERS, HEADS, C, B, T = 11, 8, 2, 2, 16, 2, 8
LR, BETAS, EPS, WD, MAX_NORM, STEPS = 1e-2, (0.9, 0.95), 1e-8, 0.1, 0.5, 3
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")

torch.manual_seed(1234)
dt = torch.float64


def param(*shape, std=0.02, fill=None):
    t = torch.full(shape, fill, dtype=dt) if fill is not None else torch.randn(*shape, dtype=dt) * std
    return t.requires_grad_()


P = {}  # tide's names, in named_parameters order
P["transformer.wte.weight"] = param(V, C)
P["transformer.wpe.weight"] = param(BLOCK, C)
proj_std = 0.02 / math.sqrt(2 * LAYERS)
for i in range(LAYERS):
    h = f"transformer.h.{i}."
    P[h + "ln_1.weight"] = param(C, fill=1.0)
    P[h + "ln_1.bias"] = param(C, fill=0.0)
    P[h + "attn.c_attn.weight"] = param(C, 3 * C)
    P[h + "attn.c_attn.bias"] = param(3 * C, std=0.02)  # nonzero biases test more
    P[h + "attn.c_proj.weight"] = param(C, C, std=proj_std)
    P[h + "attn.c_proj.bias"] = param(C, std=0.02)
    P[h + "ln_2.weight"] = param(C, std=0.1)
    with torch.no_grad():
        P[h + "ln_2.weight"] += 1.0
    P[h + "ln_2.bias"] = param(C, std=0.02)
    P[h + "mlp.c_fc.weight"] = param(C, 4 * C)
    P[h + "mlp.c_fc.bias"] = param(4 * C, std=0.02)
    P[h + "mlp.c_proj.weight"] = param(4 * C, C, std=proj_std)
    P[h + "mlp.c_proj.bias"] = param(C, std=0.02)
P["transformer.ln_f.weight"] = param(C, fill=1.0)
P["transformer.ln_f.bias"] = param(C, fill=0.0)

ids = torch.randint(0, V, (B, T))
targets = torch.randint(0, V, (B, T))


def forward(ids, targets):
    x = P["transformer.wte.weight"][ids] + P["transformer.wpe.weight"][: ids.shape[1]]
    for i in range(LAYERS):
        h = f"transformer.h.{i}."
        a = F.layer_norm(x, (C,), P[h + "ln_1.weight"], P[h + "ln_1.bias"], 1e-5)
        qkv = a @ P[h + "attn.c_attn.weight"] + P[h + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (z.view(B, T, HEADS, C // HEADS).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + y @ P[h + "attn.c_proj.weight"] + P[h + "attn.c_proj.bias"]
        m = F.layer_norm(x, (C,), P[h + "ln_2.weight"], P[h + "ln_2.bias"], 1e-5)
        m = F.gelu(m @ P[h + "mlp.c_fc.weight"] + P[h + "mlp.c_fc.bias"], approximate="tanh")
        x = x + m @ P[h + "mlp.c_proj.weight"] + P[h + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], 1e-5)
    logits = x @ P["transformer.wte.weight"].T
    return F.cross_entropy(logits.view(-1, V), targets.view(-1))


def write(name, tensors):
    header, data = {}, b""
    for key, t in tensors.items():
        t = t.detach().contiguous()
        st = {torch.float64: "F64", torch.int64: "I64"}[t.dtype]
        raw = t.numpy().tobytes()
        header[key] = {"dtype": st, "shape": list(t.shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    header["__metadata__"] = {"generated": "by tests/nn/gen_gpt_parity.py; do not edit"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


os.makedirs(OUT, exist_ok=True)
write("gpt_parity_init.safetensors", P)
loss = forward(ids, targets)
loss.backward()
write("gpt_parity_grads.safetensors", {k: p.grad for k, p in P.items()})
write("gpt_parity_batch.safetensors", {"ids": ids, "targets": targets, "loss": loss.detach().reshape(())})

decay = [p for p in P.values() if p.dim() >= 2]
no_decay = [p for p in P.values() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                        lr=LR, betas=BETAS, eps=EPS)
norms = []
for step in range(STEPS):
    opt.zero_grad()
    forward(ids, targets).backward()
    norms.append(float(torch.nn.utils.clip_grad_norm_(list(P.values()), MAX_NORM)))
    opt.step()
assert all(n > MAX_NORM for n in norms), f"clipping must be active in every step: {norms}"
write("gpt_parity_step3.safetensors", P)
print("loss", float(loss), "grad norms", norms)
