#!/usr/bin/env python3
"""PyTorch eager's side of issues 12's and 28's GPU comparisons: a LLaMA-style model
(embedding, RMSNorm, RoPE, grouped-query causal attention through
scaled_dot_product_attention, SwiGLU, untied head, cross-entropy, AdamW
with fp32 master weights under bf16 autocast) trained on one GPU on the
tokens of a uint16 file, as `amspc run --device cuda --data FILE` trains
the same shapes. Prints the median step, tokens/s, MFU and the peak GPU
memory. With --write-tokens N it first writes N random tokens (seeded)
to --data for both runs.

Step t (from 0) trains on windows t*batch ... t*batch + batch - 1 of
seq + 1 tokens (stride seq), wrapping at the end of the file: amspc's
order (NUMERICS.md, engine/train.go's Data.fill) when --batch is the
job's global batch. RoPE turns the pairs (x[i], x[i + hd/2]) of each head
("rotate half", NUMERICS.md: amspc's kernels and Hugging Face LLaMA's).
AdamW (betas 0.9, 0.95, eps 1e-8, weight decay 0.1, --lr, no schedule:
what `amspc import hf` writes for LLaMA) decays only the parameters of 2
or more dims, as amspc does.

--init FILE starts from the weights in a safetensors file of amspc's
names and layouts (`amspc run --steps 0 --save DIR JOB`, then `amspc ckpt
export DIR -o FILE`): tok_emb [vocab, d], norm [d], lm_head [d, vocab]
(absent with --tied), and per layer N layers.N.attn_norm, ffn_norm [d],
wq [d, d], wk, wv [d, kv], wo [d, d], w1, w3 [d, ffn], w2 [ffn, d];
matrices are [in, out], the transpose of nn.Linear's weight. A tensor
missing, extra or of another shape is refused by name. --log FILE writes
one JSON line per step ("step" from 1, "loss", "step_time_s",
"tokens_per_s"), as `amspc run --log` does, so the two runs' losses can be
compared step by step. --compile wraps the model in torch.compile where
torch has it.

    python3 bench/torch_llama.py --data tok.bin --write-tokens 1000000   # TinyLlama-1.1B shapes, seq 2048
    python3 bench/torch_llama.py --data tok.bin --d 2048 --layers 16 --heads 32 --kv-heads 8 --ffn 8192 \
        --vocab 128256 --theta 500000 --rope-scaling 32 1 4 8192 --tied       # Llama-3.2-1B shapes
    python3 bench/torch_llama.py --device cpu --dtype fp32 --data tok.bin --d 64 --layers 2 --heads 4 --kv-heads 2 --ffn 172 --vocab 256 --seq 64 --batch 2 --steps 3
    python3 bench/torch_llama.py --data tok.bin --batch 4 --steps 50 --init init.safetensors --log torch.jsonl   # from amspc's weights

MFU counts 6 x (parameters without the embedding) x tokens plus
attention's 12 x layers x d x seq x tokens x 1/2 (causal) per step,
over the GPU's dense bf16 peak (H100 SXM 989 TFLOP/s, H100 PCIe 756,
H200 989; --peak-tflops overrides), as amspc's planner counts it.
Without scaled_dot_product_attention (Debian's torch 1.13, for trying
the script on a CPU) attention is written out.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.w


def rope_freqs(hd, theta, scaling, device):
    """theta^(-2i/hd), scaled as Llama 3 scales them when scaling is
    (factor, low_freq_factor, high_freq_factor, original positions):
    Hugging Face's _compute_llama3_parameters."""
    freq = theta ** (-torch.arange(0, hd, 2, device=device, dtype=torch.float64) / hd)
    if scaling:
        factor, low, high, orig = scaling
        wavelen = 2 * math.pi / freq
        smooth = (orig / wavelen - low) / (high - low)
        blended = (1 - smooth) * freq / factor + smooth * freq
        freq = torch.where(wavelen > orig / low, freq / factor, torch.where(wavelen < orig / high, freq, blended))
    return freq


def rope(x, theta, scaling=None):
    # x: [b, heads, s, hd]; for i < hd/2 the pair (x[i], x[i + hd/2]) is
    # turned by pos * freq[i] ("rotate half", as amspc's kernels and Hugging
    # Face LLaMA turn it). Angles, sines and cosines in float64, rounded once.
    b, h, s, hd = x.shape
    pos = torch.arange(s, device=x.device, dtype=torch.float64)
    freq = rope_freqs(hd, theta, scaling, x.device)
    ang = pos[:, None] * freq[None, :]
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    a, c = x[..., : hd // 2], x[..., hd // 2:]
    return torch.cat((a * cos - c * sin, c * cos + a * sin), -1)


def attention(q, k, v):
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    s = q.shape[2]
    mask = torch.full((s, s), float("-inf"), device=q.device).triu(1)
    return ((q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + mask).softmax(-1) @ v


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        d, hd = a.d, a.d // a.heads
        self.heads, self.kvh, self.theta = a.heads, a.kv_heads, a.theta
        self.scaling = tuple(a.rope_scaling) if a.rope_scaling else None
        self.attn_norm, self.ffn_norm = RMSNorm(d, a.eps), RMSNorm(d, a.eps)
        self.wq, self.wo = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.wk, self.wv = nn.Linear(d, a.kv_heads * hd, bias=False), nn.Linear(d, a.kv_heads * hd, bias=False)
        self.w1, self.w3 = nn.Linear(d, a.ffn, bias=False), nn.Linear(d, a.ffn, bias=False)
        self.w2 = nn.Linear(a.ffn, d, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        hd = d // self.heads
        h = self.attn_norm(x)
        q = rope(self.wq(h).view(b, s, self.heads, hd).transpose(1, 2), self.theta, self.scaling)
        k = rope(self.wk(h).view(b, s, self.kvh, hd).transpose(1, 2), self.theta, self.scaling)
        v = self.wv(h).view(b, s, self.kvh, hd).transpose(1, 2)
        rep = self.heads // self.kvh
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        o = attention(q, k, v).transpose(1, 2).reshape(b, s, d)
        x = x + self.wo(o)
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.emb = nn.Embedding(a.vocab, a.d)
        self.blocks = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.norm = RMSNorm(a.d, a.eps)
        self.head = nn.Linear(a.d, a.vocab, bias=False)
        if a.tied:  # the head is the embedding table (Llama 3.2), drawn as Hugging Face draws it
            nn.init.normal_(self.emb.weight, std=0.02)
            self.head.weight = self.emb.weight

    def forward(self, tokens, targets):
        x = self.emb(tokens)
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


def read_safetensors(path):
    """The tensors of a safetensors file as float32 CPU tensors by name:
    an 8-byte little-endian header length, a JSON header (each tensor's
    dtype, shape and data_offsets into the data after it), the data. F32,
    BF16 and F16."""
    import numpy as np
    out = {}
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise SystemExit(f"{path}: not a safetensors file (shorter than 8 bytes)")
        n = int.from_bytes(head, "little")
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise SystemExit(f"{path}: not a safetensors file ({n}-byte header is not JSON: {e})")
        header.pop("__metadata__", None)
        base = 8 + n
        for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
            dt, shape, (lo, hi) = t["dtype"], t["shape"], t["data_offsets"]
            size = {"F32": 4, "BF16": 2, "F16": 2}.get(dt)
            if size is None:
                raise SystemExit(f"{path}: tensor {name} is {dt}; this reader takes F32, BF16 and F16")
            count = math.prod(shape)
            if hi - lo != count * size:
                raise SystemExit(f"{path}: tensor {name} of shape {shape} ({dt}) has {hi - lo} bytes, not {count * size}")
            f.seek(base + lo)
            raw = np.fromfile(f, dtype={"F32": "<f4", "BF16": "<u2", "F16": "<f2"}[dt], count=count)
            if raw.size != count:
                raise SystemExit(f"{path}: tensor {name} runs past the end of the file")
            if dt == "BF16":  # a bf16 is the top half of a float32
                raw = (raw.astype(np.uint32) << 16).view(np.float32)
            out[name] = torch.from_numpy(raw.astype(np.float32, copy=False)).reshape(shape)
    return out


def amspc_names(model, tied):
    """amspc's name of each of model's parameters, with whether amspc's
    tensor is the transpose of it (a matrix stored [in, out], the
    transpose of nn.Linear's [out, in] weight)."""
    names = {"tok_emb": (model.emb.weight, False), "norm": (model.norm.w, False)}
    if not tied:
        names["lm_head"] = (model.head.weight, True)
    for i, blk in enumerate(model.blocks):
        for n in ("attn_norm", "ffn_norm"):
            names[f"layers.{i}.{n}"] = (getattr(blk, n).w, False)
        for n in ("wq", "wk", "wv", "wo", "w1", "w2", "w3"):
            names[f"layers.{i}.{n}"] = (getattr(blk, n).weight, True)
    return names


def load_init(model, path, tied):
    """Sets model's parameters to the weights of path (amspc's names and
    layouts); refuses a tensor missing, extra or of another shape, by
    name."""
    got = read_safetensors(path)
    names = amspc_names(model, tied)
    bad = [f"tensor {n} is not a parameter of this model" for n in sorted(set(got) - set(names))]
    bad += [f"no tensor {n} (shape {list(p.shape[::-1] if t else p.shape)})" for n, (p, t) in sorted(names.items()) if n not in got]
    for n, (p, t) in sorted(names.items()):
        want = list(p.shape[::-1] if t else p.shape)
        if n in got and list(got[n].shape) != want:
            bad.append(f"tensor {n} has shape {list(got[n].shape)}, this model's is {want}")
    if bad:
        raise SystemExit(f"{path}: " + "; ".join(bad))
    with torch.no_grad():
        for n, (p, t) in names.items():
            p.copy_(got[n].t() if t else got[n])
    return len(names)


def peak_tflops(name):
    n = name.upper()
    if "H100" in n and "PCIE" in n:
        return 756.0
    if "H100" in n or "H200" in n or "H800" in n:
        return 989.0
    if "A100" in n or "A800" in n:
        return 312.0
    return 0.0


def main():
    p = argparse.ArgumentParser()
    # TinyLlama-1.1B's shapes (testdata/hf/TinyLlama-1.1B-Chat-v1.0.json).
    for name, default in [("d", 2048), ("layers", 22), ("heads", 32), ("kv-heads", 4), ("ffn", 5632),
                          ("vocab", 32000), ("seq", 2048), ("batch", 1), ("steps", 8), ("write-tokens", 0)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--eps", type=float, default=1e-5)
    p.add_argument("--theta", type=float, default=10000.0)
    p.add_argument("--rope-scaling", type=float, nargs=4, metavar=("FACTOR", "LOW", "HIGH", "ORIGINAL"),
                   help="Llama 3's rope_scaling (Llama 3.2-1B: 32 1 4 8192)")
    p.add_argument("--tied", action="store_true", help="the head shares the embedding table")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--device", default="cuda")
    p.add_argument("--data", required=True, help="uint16 little-endian tokens")
    p.add_argument("--peak-tflops", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=3e-4, help="AdamW's learning rate (what amspc import hf writes for LLaMA)")
    p.add_argument("--init", metavar="FILE", help="start from the weights of FILE (safetensors, amspc's names and layouts)")
    p.add_argument("--log", metavar="FILE", help="write one JSON line per step: step (from 1), loss, step_time_s, tokens_per_s")
    p.add_argument("--compile", action="store_true", help="wrap the model in torch.compile")
    p.add_argument("--clip", type=float, default=0.0, help="clip the gradients' global norm at MAX (torch.nn.utils.clip_grad_norm_; amspc's train.clip_grad_norm); the log gets grad_norm")
    a = p.parse_args()
    if a.write_tokens:
        g = torch.Generator().manual_seed(1)
        # uint16 tokens: ids below 65,536 (all of them, at Llama 3's vocab).
        toks = torch.randint(0, min(a.vocab, 65536), (a.write_tokens,), generator=g, dtype=torch.int32).to(torch.int16)
        toks.numpy().tofile(a.data)
        if a.steps == 0:  # the tokens only, for amspc's run
            return
    raw = torch.from_numpy(__import__("numpy").fromfile(a.data, dtype="<u2").astype("int64"))
    dev = torch.device(a.device)
    torch.manual_seed(1)
    model = Model(a)
    if a.init:
        t0 = time.perf_counter()
        n = load_init(model, a.init, a.tied)
        print(f"initial weights: {n} tensors from {a.init} ({time.perf_counter() - t0:.1f} s)", flush=True)
    model = model.to(dev)
    # AdamW as amspc runs it (NUMERICS.md): parameters of 2 or more dims
    # decayed, the norms' weights not.
    params = list(model.parameters())  # a tied table once
    groups = [{"params": [q for q in params if q.dim() >= 2], "weight_decay": 0.1},
              {"params": [q for q in params if q.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    n_params = sum(q.numel() for q in params)
    n_dense = n_params - (0 if a.tied else model.emb.weight.numel())  # a tied table is the head: dense
    run = model
    mode = "eager"
    if a.compile:
        if hasattr(torch, "compile"):
            run = torch.compile(model)
            mode = "torch.compile"
            print(f"torch.compile: the model is compiled (torch {torch.__version__})", flush=True)
        else:
            print(f"torch.compile: not available in torch {torch.__version__}; running eager", flush=True)
    tokens = a.batch * a.seq
    flops = 6 * n_dense * tokens + 6 * a.layers * a.d * a.seq * tokens  # attention: 12 L d s T, causal half
    windows = (len(raw) - 1) // a.seq
    if windows < 1:
        raise SystemExit(f"{a.data}: {len(raw)} tokens, fewer than one window of {a.seq + 1}")
    log = open(a.log, "w") if a.log else None
    times = []
    for step in range(a.steps):
        # amspc's order: step t's windows t*B ... t*B + B - 1, wrapping.
        idx = [(step * a.batch + i) % windows for i in range(a.batch)]
        win = torch.stack([raw[w * a.seq: w * a.seq + a.seq + 1] for w in idx]).to(dev)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = run(win[:, :-1], win[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, a.clip).item() if a.clip > 0 else None
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        if log:
            rec = {"step": step + 1, "loss": loss.item(), "step_time_s": times[-1], "tokens_per_s": tokens / times[-1]}
            if norm is not None:
                rec["grad_norm"] = norm
            log.write(json.dumps(rec) + "\n")
            log.flush()
    if log:
        log.close()
    if not times:
        return
    med = statistics.median(times[1:] if len(times) > 1 else times)
    peak = a.peak_tflops
    name = "cpu"
    mem = ""
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev)
        peak = peak or peak_tflops(name)
        mem = f", peak memory {torch.cuda.max_memory_allocated(dev) / 2**30:.2f} GiB"
    mfu = f", MFU {flops / med / (peak * 1e12) * 100:.1f} % of {peak:.0f} TFLOP/s" if peak else ""
    print(f"torch {torch.__version__} {mode} on {name}, {a.dtype}: {n_params / 1e9:.3f} B parameters, "
          f"{tokens} tokens/step: median step {med * 1e3:.1f} ms, {tokens / med:.0f} tokens/s{mfu}{mem} "
          f"(loss {loss.item():.4f})")


if __name__ == "__main__":
    main()
