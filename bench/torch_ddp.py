#!/usr/bin/env python3
"""The PyTorch peer of `amspc run` for bench/README.md: the same
LLaMA-style model (embedding, RMSNorm, RoPE, causal attention, SwiGLU,
untied head, cross-entropy, AdamW), the same data windows (the README's
bytes, vocab 256) and batch, trained with DistributedDataParallel over
gloo on N CPU processes of one thread each. Prints the median step time
and tokens/s.

    python3 bench/torch_ddp.py --procs 8 --d 64 --layers 2 --heads 4 --ffn 172 --seq 64 --batch 32 --steps 12
    python3 bench/torch_ddp.py --procs 8 --d 512 --layers 8 --heads 8 --ffn 1376 --seq 128 --batch 16 --steps 5

Debian 12's python3-torch (1.13) has no scaled_dot_product_attention, so
attention is written out (a causal mask, softmax, two matmuls), as amspc's
CPU kernel does it. Its BLAS is whatever provides libblas.so.3: install
libopenblas0-pthread, or torch runs on the reference BLAS (about 4 GFLOP/s
against OpenBLAS's 77 on this machine); OPENBLAS_NUM_THREADS=1 keeps it to
the process's one thread.
"""
import argparse
import math
import os
import statistics
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.w


def rope(x, heads, theta=10000.0):
    b, s, d = x.shape
    hd = d // heads
    x = x.view(b, s, heads, hd // 2, 2)
    pos = torch.arange(s, dtype=torch.float32)
    freq = theta ** (-torch.arange(0, hd, 2, dtype=torch.float32) / hd)
    ang = pos[:, None] * freq[None, :]
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    a, c = x[..., 0], x[..., 1]
    return torch.stack((a * cos - c * sin, a * sin + c * cos), -1).view(b, s, d)


class Block(nn.Module):
    def __init__(self, d, heads, ffn):
        super().__init__()
        self.heads = heads
        self.attn_norm, self.ffn_norm = RMSNorm(d), RMSNorm(d)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(d, ffn, bias=False), nn.Linear(d, ffn, bias=False)
        self.w2 = nn.Linear(ffn, d, bias=False)

    def forward(self, x, mask):
        b, s, d = x.shape
        hd = d // self.heads
        h = self.attn_norm(x)
        q = rope(self.wq(h), self.heads).view(b, s, self.heads, hd).transpose(1, 2)
        k = rope(self.wk(h), self.heads).view(b, s, self.heads, hd).transpose(1, 2)
        v = self.wv(h).view(b, s, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd) + mask
        o = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, s, d)
        x = x + self.wo(o)
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Model(nn.Module):
    def __init__(self, vocab, d, layers, heads, ffn):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads, ffn) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens, targets):
        s = tokens.shape[1]
        mask = torch.full((s, s), float("-inf")).triu(1)
        x = self.emb(tokens)
        for blk in self.blocks:
            x = blk(x, mask)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def worker(rank, a, data):
    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("gloo", rank=rank, world_size=a.procs)
    torch.manual_seed(1)
    model = Model(256, a.d, a.layers, a.heads, a.ffn)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    per = a.batch // a.procs
    windows = (len(data) - 1) // a.seq
    times = []
    for step in range(a.steps):
        idx = [(step * a.batch + rank * per + i) % windows for i in range(per)]
        win = torch.stack([data[w * a.seq: w * a.seq + a.seq + 1] for w in idx])
        dist.barrier()
        t0 = time.perf_counter()
        loss = ddp(win[:, :-1], win[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        dist.barrier()
        times.append(time.perf_counter() - t0)
    if rank == 0:
        med = statistics.median(times[1:])  # the first step warms up
        print(f"torch {torch.__version__} DDP gloo, {a.procs} processes x 1 thread: "
              f"d {a.d} x {a.layers} layers, {a.batch * a.seq} tokens/step: "
              f"median step {med * 1e3:.0f} ms, {a.batch * a.seq / med:.0f} tokens/s (loss {loss.item():.4f})")
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    for name, default in [("procs", 8), ("d", 64), ("layers", 2), ("heads", 4), ("ffn", 172),
                          ("seq", 64), ("batch", 32), ("steps", 12)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "README.md"))
    a = p.parse_args()
    if a.batch % a.procs:
        raise SystemExit(f"--batch {a.batch} does not divide among {a.procs} processes")
    data = torch.tensor(list(open(a.data, "rb").read()), dtype=torch.long)
    mp.spawn(worker, args=(a, data), nprocs=a.procs)


if __name__ == "__main__":
    main()
