#!/usr/bin/python3
"""PyTorch twin of cohort-train-gpt, for scripts/bench/train_bench (build-nanogpt's train_gpt2.py
cut down to the same small byte-level GPT) and, with --device cuda, for scripts/gpu_check.sh.

Same model (pre-LayerNorm blocks, tanh GELU MLP 4x, tied embeddings, no dropout, build-nanogpt's
init), same data (a text file, or the fortunes package's English text; 90/10 split; bytes as
tokens), same DataLoaderLite sharding, same optimiser (AdamW lr 3e-4, betas (0.9, 0.95), weight
decay 0.1 on matrices and embeddings only, clip 1.0, cosine schedule with warm-up), gradient
accumulation with DDP's no_sync on all but the last micro-step, loss averaged across ranks. DDP on
gloo. Launch with torchrun (or cohortrun), or run alone for one worker. Prints one JSON line.

--device cuda (PyTorch 2.x, one GPU, one process) measures training throughput instead, as
build-nanogpt trains on a GPU: scaled_dot_product_attention with is_causal, fused AdamW, gradient
clipping, one micro-batch per step, for each --precisions entry (fp32: no TF32; tf32:
allow_tf32; bf16: torch.autocast(dtype=torch.bfloat16); fp16: autocast with GradScaler) in each
--modes entry (eager, compile: torch.compile). Every variant is built and warmed up first (that is
when torch.compile compiles); then, when --go-file is given, it writes --ready-file and waits for
the go file, so that the compiling can overlap other work and the timed steps run on a quiet GPU.
"""
import argparse
import contextlib
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class CausalSelfAttention(nn.Module):
    def __init__(self, C, nh):
        super().__init__()
        self.nh = nh
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.c_proj.SCALE_INIT = 1
        self.register_buffer("mask", None, persistent=False)

    sdpa = False  # F.scaled_dot_product_attention (PyTorch 2.x, --device cuda)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (z.view(B, T, self.nh, C // self.nh).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril().logical_not()
            y = att.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Mlp(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)
        self.c_proj.SCALE_INIT = 1

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
    def __init__(self, V, block, L, nh, C):
        super().__init__()
        self.n_layer = L
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(block, C)
        self.h = nn.ModuleList(Block(C, nh) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.wte.weight = self.lm_head.weight
        self.apply(self._init)

    def _init(self, m):
        if isinstance(m, nn.Linear):
            std = 0.02 * ((2 * self.n_layer) ** -0.5 if hasattr(m, "SCALE_INIT") else 1)
            torch.nn.init.normal_(m.weight, mean=0.0, std=std)
            if m.bias is not None:
                torch.nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def load_text(path):
    if not path:
        path = "/usr/share/games/fortunes"
    if os.path.isdir(path):
        data = b""
        for name in sorted(os.listdir(path)):
            p = os.path.join(path, name)
            if "." in name or os.path.islink(p) or not os.path.isfile(p):
                continue
            with open(p, "rb") as f:
                data += f.read()
        return data
    with open(path, "rb") as f:
        return f.read()


class Loader:  # build-nanogpt's DataLoaderLite; every rank wraps at the same step
    def __init__(self, tokens, B, T, rank, world):
        self.tokens, self.B, self.T, self.rank, self.world = tokens, B, T, rank, world
        self.reset()

    def reset(self):
        self.pos = self.B * self.T * self.rank

    def next(self):
        B, T = self.B, self.T
        buf = self.tokens[self.pos:self.pos + B * T + 1]
        self.pos += B * T * self.world
        if self.pos - B * T * self.rank + B * T * self.world + 1 > len(self.tokens):
            self.reset()
        return buf[:-1].view(B, T), buf[1:].view(B, T)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="")
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--total-batch-tokens", type=int, default=32768)
    p.add_argument("--max-steps", type=int, default=200)
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--eval-batches", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu (DDP on gloo) or cuda (throughput)")
    p.add_argument("--precisions", default="fp32,tf32,bf16", help="--device cuda: the formats")
    p.add_argument("--modes", default="eager,compile", help="--device cuda: eager, compile")
    p.add_argument("--ready-file", default="", help="--device cuda: written once warmed up")
    p.add_argument("--go-file", default="", help="--device cuda: the timed steps wait for it")
    p.add_argument("--go-timeout", type=float, default=600)
    args = p.parse_args()
    if args.device == "cuda":
        cuda_throughput(args)
        return

    threads = args.threads or int(os.environ.get("OMP_NUM_THREADS", "1"))
    torch.set_num_threads(threads)
    distributed = "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1
    if distributed:
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        rank, world = 0, 1
    B, T = args.batch_size, args.block_size
    assert args.total_batch_tokens % (B * T * world) == 0
    accum = args.total_batch_tokens // (B * T * world)
    data = torch.tensor(list(load_text(args.data)), dtype=torch.long)
    n_train = int(len(data) * 0.9)
    train = Loader(data[:n_train], B, T, rank, world)
    val = Loader(data[n_train:], B, T, rank, world)

    torch.manual_seed(args.seed)
    model = Gpt(256, T, args.n_layer, args.n_head, args.n_embd)
    raw = model
    if distributed:
        model = DDP(model)
    decay = [q for q in raw.parameters() if q.dim() >= 2]
    no_decay = [q for q in raw.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    max_lr, min_lr = args.lr, args.lr * 0.1

    def lr_at(it):
        if it < args.warmup_steps:
            return max_lr * (it + 1) / args.warmup_steps
        if it > args.max_steps:
            return min_lr
        ratio = (it - args.warmup_steps) / (args.max_steps - args.warmup_steps)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (max_lr - min_lr)

    train_time, tokens, loss_accum = 0.0, 0, torch.zeros(())
    for step in range(args.max_steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_accum = torch.zeros(())
        for micro in range(accum):
            x, y = train.next()
            if distributed:
                model.require_backward_grad_sync = micro == accum - 1
            loss = model(x, y) / accum
            loss_accum += loss.detach()
            loss.backward()
        if distributed:
            dist.all_reduce(loss_accum)  # gloo has no AVG
            loss_accum /= world
        torch.nn.utils.clip_grad_norm_(raw.parameters(), 1.0)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        opt.step()
        train_time += time.perf_counter() - t0
        tokens += args.total_batch_tokens
        if rank == 0 and (step + 1) % 10 == 0:
            print(f"step {step + 1}: loss {loss_accum.item():.4f}", flush=True)
    with torch.no_grad():
        val.reset()
        v = torch.zeros(())
        for _ in range(args.eval_batches):
            x, y = val.next()
            v += raw(x, y) / args.eval_batches
        if distributed:
            dist.all_reduce(v)
            v /= world
    if rank == 0:
        print(json.dumps({"impl": "pytorch", "model": "gpt", "world_size": world, "threads": threads,
                          "steps": args.max_steps, "train_loss": loss_accum.item(),
                          "val_loss": v.item(), "tokens_per_s": tokens / train_time,
                          "train_seconds": train_time}), flush=True)
    if distributed:
        dist.destroy_process_group()


def cuda_throughput(args):
    """Tokens per second of each (precision, mode), one JSON line."""
    dev = torch.device("cuda")
    CausalSelfAttention.sdpa = hasattr(F, "scaled_dot_product_attention")
    B, T = args.batch_size, args.block_size
    data = torch.tensor(list(load_text(args.data)), dtype=torch.long, device=dev)
    loader = Loader(data[:int(len(data) * 0.9)], B, T, 0, 1)
    steps = max(1, args.max_steps)
    warmup = 3

    def set_precision(precision):
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"

    def autocast(precision):
        if precision in ("bf16", "fp16"):
            dtype = torch.bfloat16 if precision == "bf16" else torch.float16
            return torch.autocast("cuda", dtype=dtype)
        return contextlib.nullcontext()

    variants = []
    for precision in [x for x in args.precisions.split(",") if x]:
        for mode in [x for x in args.modes.split(",") if x]:
            torch.manual_seed(args.seed)
            raw = Gpt(256, T, args.n_layer, args.n_head, args.n_embd).to(dev)
            decay = [q for q in raw.parameters() if q.dim() >= 2]
            no_decay = [q for q in raw.parameters() if q.dim() < 2]
            groups = [{"params": decay, "weight_decay": 0.1},
                      {"params": no_decay, "weight_decay": 0.0}]
            try:
                opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
            except (TypeError, RuntimeError):
                opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
            run = torch.compile(raw) if mode == "compile" else raw
            scaler = None
            if precision == "fp16":
                scaler = (torch.amp.GradScaler("cuda") if hasattr(torch.amp, "GradScaler")
                          else torch.cuda.amp.GradScaler())
            variants.append({"precision": precision, "mode": mode, "raw": raw, "run": run,
                             "opt": opt, "scaler": scaler})

    def step(v):
        x, y = loader.next()
        v["opt"].zero_grad(set_to_none=True)
        with autocast(v["precision"]):
            loss = v["run"](x, y)
        if v["scaler"]:
            v["scaler"].scale(loss).backward()
            v["scaler"].unscale_(v["opt"])
        else:
            loss.backward()
        torch.nn.utils.clip_grad_norm_(v["raw"].parameters(), 1.0)
        if v["scaler"]:
            v["scaler"].step(v["opt"])
            v["scaler"].update()
        else:
            v["opt"].step()
        return loss

    # Build and warm up everything (torch.compile compiles in its first steps).
    for v in variants:
        set_precision(v["precision"])
        t0 = time.perf_counter()
        for _ in range(warmup):
            step(v)
        torch.cuda.synchronize()
        v["warmup_seconds"] = time.perf_counter() - t0
    if args.go_file:
        with open(args.ready_file or args.go_file + ".ready", "w") as f:
            f.write("ready\n")
        deadline = time.monotonic() + args.go_timeout
        while not os.path.exists(args.go_file):
            if time.monotonic() > deadline:
                print(json.dumps({"impl": "pytorch", "error": "no go file in time"}), flush=True)
                return
            time.sleep(0.05)
    results = {}
    for v in variants:
        set_precision(v["precision"])
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            loss = step(v)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        results.setdefault(v["precision"], {})[v["mode"]] = {
            "tokens_per_s": round(steps * B * T / dt), "loss": round(loss.item(), 4),
            "warmup_seconds": round(v["warmup_seconds"], 1)}
    print(json.dumps({"impl": "pytorch", "model": "gpt", "device": torch.cuda.get_device_name(),
                      "torch": torch.__version__,
                      "attention": "sdpa" if CausalSelfAttention.sdpa else "manual",
                      "config": {"n_layer": args.n_layer, "n_head": args.n_head,
                                 "n_embd": args.n_embd, "block_size": T, "batch_size": B},
                      "steps": steps, "variants": results}), flush=True)


if __name__ == "__main__":
    main()
