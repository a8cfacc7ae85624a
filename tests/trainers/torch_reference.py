#!/usr/bin/python3
"""PyTorch 1.13 twins of cohort's models, for tests/trainers/models_test.cc.

usage: torch_reference.py cnn|gpt IN OUT [JSON config]

IN holds the C++ model's parameters (cohort layout), the batches and the optimiser settings; OUT
receives the step-0 loss and gradients (cohort layout) and the loss of every step of a short run
with PyTorch's own optimiser, plus the final parameters. Tensor file format: see tensor_file.h.
"""
import json
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def read_tensors(path):
    with open(path, "rb") as f:
        b = f.read()
    assert b[:4] == b"CTTF", "bad magic"
    version, count = struct.unpack_from("<II", b, 4)
    assert version == 1, "unsupported version"
    at, out = 12, {}
    for _ in range(count):
        (n,) = struct.unpack_from("<I", b, at)
        at += 4
        name = b[at:at + n].decode()
        at += n
        dtype = b[at]
        at += 1
        (ndim,) = struct.unpack_from("<I", b, at)
        at += 4
        dims = struct.unpack_from("<" + "q" * ndim, b, at)
        at += 8 * ndim
        numel = math.prod(dims) if ndim else 1
        fmt = "f" if dtype == 0 else "i"
        data = struct.unpack_from("<" + fmt * numel, b, at)
        at += 4 * numel
        out[name] = torch.tensor(data, dtype=torch.float32 if dtype == 0 else torch.int64).reshape(dims)
    return out


def write_tensors(path, tensors):
    with open(path, "wb") as f:
        f.write(b"CTTF" + struct.pack("<II", 1, len(tensors)))
        for name, t in sorted(tensors.items()):
            t = t.detach().contiguous().float()
            nb = name.encode()
            f.write(struct.pack("<I", len(nb)) + nb + bytes([0]) + struct.pack("<I", t.dim()))
            f.write(struct.pack("<" + "q" * t.dim(), *t.shape))
            f.write(t.numpy().astype("<f4").tobytes())


# ---- CNN: cohort stores conv weights (OC, KH, KW, C) and fc1's inputs in (h, w, c) order ----
class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(3136, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


def cnn_to_torch(name, t):
    if name.startswith("conv") and name.endswith("weight"):
        return t.permute(0, 3, 1, 2)
    if name == "fc1.weight":
        return t.reshape(128, 7, 7, 64).permute(0, 3, 1, 2).reshape(128, 3136)
    return t


def cnn_from_torch(name, t):
    if name.startswith("conv") and name.endswith("weight"):
        return t.permute(0, 2, 3, 1)
    if name == "fc1.weight":
        return t.reshape(128, 64, 7, 7).permute(0, 2, 3, 1).reshape(128, 3136)
    return t


# ---- GPT (build-nanogpt's model, dropout-free, tied head, tanh GELU) ----
class CausalSelfAttention(nn.Module):
    def __init__(self, C, nh):
        super().__init__()
        self.nh = nh
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (z.view(B, T, self.nh, C // self.nh).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = att.masked_fill(torch.ones(T, T).tril() == 0, float("-inf")).softmax(-1)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))


class Mlp(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, nh):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.attn = CausalSelfAttention(C, nh)
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = Mlp(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self, V, maxT, L, nh, C):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(maxT, C)
        self.h = nn.ModuleList(Block(C, nh) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def gpt_torch_name(name):
    return name + ".weight" if name in ("wte", "wpe") else name


def main():
    kind, src, dst = sys.argv[1:4]
    cfg = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    torch.manual_seed(0)
    torch.set_num_threads(1)
    t = read_tensors(src)
    out = {}
    if kind == "cnn":
        model = Cnn()
        to_t, from_t, name_t = cnn_to_torch, cnn_from_torch, (lambda n: n)
    else:
        model = Gpt(cfg["vocab"], cfg["block"], cfg["n_layer"], cfg["n_head"], cfg["n_embd"])
        to_t, from_t, name_t = (lambda n, x: x), (lambda n, x: x), gpt_torch_name
    params = dict(model.named_parameters())
    cohort_names = [k[len("param/"):] for k in t if k.startswith("param/")]
    with torch.no_grad():
        for n in cohort_names:
            params[name_t(n)].copy_(to_t(n, t["param/" + n]))

    def loss_on(k):
        if kind == "cnn":
            x = t[f"x{k}"].reshape(-1, 1, 28, 28)
            return F.cross_entropy(model(x), t[f"y{k}"])
        return model(t[f"x{k}"], t[f"y{k}"])

    # Step 0: loss and gradients.
    loss = loss_on(0)
    loss.backward()
    out["loss0"] = loss.detach().reshape(1)
    for n in cohort_names:
        out["grad/" + n] = from_t(n, params[name_t(n)].grad).clone()
    # A short run with PyTorch's optimiser.
    model.zero_grad()
    if kind == "cnn":
        opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=cfg["momentum"])
    else:
        decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
        no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=cfg["lr"], betas=(0.9, 0.95), eps=1e-8)
    losses = []
    for k in range(cfg["steps"]):
        opt.zero_grad(set_to_none=True)
        loss = loss_on(k)
        loss.backward()
        if kind == "gpt":
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["clip"])
        opt.step()
        losses.append(loss.item())
    out["losses"] = torch.tensor(losses)
    for n in cohort_names:
        out["final/" + n] = from_t(n, params[name_t(n)])
    write_tensors(dst, out)


if __name__ == "__main__":
    main()
