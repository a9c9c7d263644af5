#!/usr/bin/env python3
"""PyTorch's side of issue 28's operator tables, on one GPU in bf16:

- torch.matmul at the products of TinyLlama-1.1B's step (8,192 tokens;
  d 2048, KV dim 256, ffn 5632, vocab 32000), the forward a @ w and the
  backward's grad_a = dy @ w^T and grad_b = a^T @ dy, named IN x OUT x
  TOKENS / product as engine/cudalib's BenchmarkGPUMatMulShapes names
  amspc's cuBLASLt products (2 x tokens x in x out FLOPs each);
- F.scaled_dot_product_attention, causal, seq 2048, batch 1, 32 heads,
  head dims 64 and 128: forward and backward, causal FLOPs counted as
  half the square (forward 4 s^2 heads hd / 2, backward 2.5 x that).

Each figure is the median of --reps timed calls (CUDA events) after
warm-up calls. Prints one line a figure:

    matmul 2048x2048x8192/matmul: 612.3 TFLOP/s (0.449 ms)
    sdpa hd64/forward: 350.1 TFLOP/s (0.196 ms)

    python3 bench/torch_ops.py                         # on the GPU
    python3 bench/torch_ops.py --device cpu --dtype fp32 --tokens 256 --d 128 --kv 32 --ffn 344 --vocab 512 --seq 128 --heads 4 --reps 3
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def timed(fn, reps, warmup, dev):
    """The median seconds of reps calls of fn after warmup calls."""
    for _ in range(warmup):
        fn()
    times = []
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def show(kind, name, flops, sec):
    print(f"{kind} {name}: {flops / sec / 1e12:.4g} TFLOP/s ({sec * 1e3:.4g} ms)", flush=True)


def main():
    p = argparse.ArgumentParser()
    for name, default in [("tokens", 8192), ("d", 2048), ("kv", 256), ("ffn", 5632), ("vocab", 32000),
                          ("seq", 2048), ("heads", 32), ("reps", 20), ("warmup", 3)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--device", default="cuda")
    a = p.parse_args()
    dev = torch.device(a.device)
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    print(f"torch {torch.__version__} on {name}, {a.dtype}: median of {a.reps} after {a.warmup} warm-up calls", flush=True)
    g = torch.Generator(device="cpu").manual_seed(28)
    rnd = lambda *shape: (torch.rand(*shape, generator=g) * 2 - 1).to(dev, dt)
    m = a.tokens
    seen = set()
    for k, n in [(a.d, a.d), (a.d, a.kv), (a.d, a.ffn), (a.ffn, a.d), (a.d, a.vocab)]:
        if (k, n) in seen:
            continue
        seen.add((k, n))
        x, w, dy = rnd(m, k), rnd(k, n), rnd(m, n)
        flops = 2.0 * m * k * n
        shape = f"{k}x{n}x{m}"
        show("matmul", shape + "/matmul", flops, timed(lambda: torch.matmul(x, w), a.reps, a.warmup, dev))
        show("matmul", shape + "/grad_a", flops, timed(lambda: torch.matmul(dy, w.t()), a.reps, a.warmup, dev))
        show("matmul", shape + "/grad_b", flops, timed(lambda: torch.matmul(x.t(), dy), a.reps, a.warmup, dev))
        del x, w, dy
    if not hasattr(F, "scaled_dot_product_attention"):
        print(f"sdpa: not in torch {torch.__version__}", flush=True)
        return
    s, h = a.seq, a.heads
    for hd in a.head_dims:
        q, k, v = (rnd(1, h, s, hd).requires_grad_() for _ in range(3))
        do = rnd(1, h, s, hd)
        flops = 4.0 * s * s * h * hd / 2  # QK^T and PV, causal half
        show("sdpa", f"hd{hd}/forward", flops, timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), a.reps, a.warmup, dev))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        back = lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
        show("sdpa", f"hd{hd}/backward", 2.5 * flops, timed(back, a.reps, a.warmup, dev))
        del q, k, v, do, o


if __name__ == "__main__":
    main()
