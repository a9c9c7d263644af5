#!/usr/bin/env python3
"""gpu_checks.sh's figures as JSON (bench/results/gpu.json): what one run of
`sh bench/gpu_checks.sh run` measured, read from the files it leaves in its
output folder, so later runs are compared without parsing prose. A figure
the run did not produce is null. Besides each model's runs (PyTorch eager
and compiled, amspc), issue 28's figures: the 50-step losses of PyTorch
and amspc from the same initial weights and their largest relative
difference (same_init_losses; within 1 % passes), attention and matmul
TFLOP/s of amspc and torch per shape, and tiny's step with and without
CUDA graphs.

usage: python3 bench/gpu_summary.py OUTDIR BUILDDIR > gpu.json
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import datetime


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def number(pattern, text, group=1):
    m = re.search(pattern, text)
    return float(m.group(group).replace(",", "")) if m else None


def gib(s):
    """A size amspc prints ("21.4 GiB", "512.0 MiB") in GiB."""
    m = re.match(r"([\d.]+) (KiB|MiB|GiB|TiB|B)", s or "")
    if not m:
        return None
    return float(m.group(1)) * {"B": 2**-30, "KiB": 2**-20, "MiB": 2**-10, "GiB": 1, "TiB": 1024}[m.group(2)]


def seconds(s):
    """A duration amspc prints ("2.30 s", "217 ms", "15 µs") in seconds."""
    m = re.match(r"([\d.]+) ?(s|ms|µs|us|ns)\b", s or "")
    if not m:
        return None
    return float(m.group(1)) * {"s": 1, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}[m.group(2)]


def torch_run(out, name="torch.txt"):
    t = read(os.path.join(out, name))
    if "tokens/s" not in t:
        return None
    return {
        "tokens_per_s": number(r"([\d.]+) tokens/s\b", t),
        "step_s": (number(r"median step ([\d.]+) ms", t) or 0) / 1e3 or None,
        "mfu": (number(r"MFU ([\d.]+) %", t) or 0) / 100 or None,
        "peak_tflops": number(r"of ([\d.]+) TFLOP/s", t),
        "peak_memory_gib": number(r"peak memory ([\d.]+) GiB", t),
    }


def amspc_run(out, base, torch):
    """amspc run's summary (BASE.txt) and per-step log (BASE.jsonl)."""
    t = read(os.path.join(out, base + ".txt"))
    m = re.search(r"measured: step (\S+ \S+) \(median\), peak (\S+ \S+) per rank; predicted by the plan: step (\S+ \S+), peak (\S+ \S+) per rank", t)
    steps = jsonl(os.path.join(out, base + ".jsonl"))
    rates = [s["tokens_per_s"] for s in steps[1:] if s.get("tokens_per_s")]  # the first step warms up
    if not m and rates:
        # Cut short (out of time): the steps it logged, without the
        # summary's memory and prediction.
        r = {
            "cut_short": (t.strip().splitlines() or ["no output"])[-1],
            "steps": len(steps),
            "step_s": statistics.median(s["step_time_s"] for s in steps[1:] if s.get("step_time_s")),
            "tokens_per_s": statistics.median(rates),
            "losses": [s.get("loss") for s in steps],
        }
        if torch and torch.get("mfu") and torch.get("tokens_per_s"):
            r["mfu"] = torch["mfu"] * r["tokens_per_s"] / torch["tokens_per_s"]
        return r
    if not m:
        return {"error": (t.strip().splitlines() or ["no output"])[-1]}
    gpu = re.search(r"GPU memory: at most (\S+ \S+)", t)
    r = {
        "step_s": seconds(m.group(1)),
        "tokens_per_s": statistics.median(rates) if rates else None,
        "peak_memory_gib": gib(gpu.group(1)) if gpu else gib(m.group(2)),
        "predicted_step_s": seconds(m.group(3)),
        "predicted_peak_gib": gib(m.group(4)),
        "losses": [s.get("loss") for s in steps],
    }
    # MFU on PyTorch's FLOP count of the same model and tokens.
    if torch and torch.get("mfu") and torch.get("tokens_per_s") and r["tokens_per_s"]:
        r["mfu"] = torch["mfu"] * r["tokens_per_s"] / torch["tokens_per_s"]
    return r


def attention(out):
    t = read(os.path.join(out, "attention.txt"))
    res = {}
    for m in re.finditer(r"BenchmarkGPUAttention/(\S+?)(?:-\d+)?\s+\d+\s+[\d.]+ ns/op\s+([\d.]+) TFLOP/s", t):
        res[m.group(1)] = float(m.group(2))
    return res or None


def adamw(out):
    """The fused AdamW step's GB/s against a plain stream's (adamw.txt),
    and the ratio issue 28 bounds by 1.3: stream GB/s over adamw's."""
    t = read(os.path.join(out, "adamw.txt"))
    res = {}
    for m in re.finditer(r"BenchmarkGPUAdamW/(\S+?)(?:-\d+)?\s+\d+\s+[\d.]+ ns/op\s+([\d.]+) GB/s", t):
        res[m.group(1)] = float(m.group(2))
    if res.get("adamw-copy") and res.get("scale-stream"):
        res["stream_over_adamw"] = res["scale-stream"] / res["adamw-copy"]
    return res or None


def jsonl(path):
    """The records of a per-step log (amspc run --log, torch_llama.py
    --log); those of a line cut short are left out."""
    recs = []
    for line in read(path).splitlines():
        try:
            recs.append(json.loads(line))
        except ValueError:
            pass
    return recs


def same_init(out, suffix="", steps=50):
    """The 50-step loss comparison from the same initial weights:
    PyTorch eager's per-step losses (torch1b.jsonl) against amspc's on
    tensor cores (amspc1b-tc.jsonl); issue 28 asks within 1 %. With a
    suffix, the comparison of those files at another learning rate."""
    torch = [r.get("loss") for r in jsonl(os.path.join(out, "torch1b" + suffix + ".jsonl"))]
    amspc = [r.get("loss") for r in jsonl(os.path.join(out, "amspc1b-tc" + suffix + ".jsonl"))]
    if not torch and not amspc:
        return None
    pairs = [(a, t) for a, t in zip(amspc, torch) if a is not None and t]
    worst = max((abs(a - t) / abs(t) for a, t in pairs), default=None)
    return {
        "steps": {"torch": len(torch), "amspc": len(amspc)},
        "torch": torch,
        "amspc": amspc,
        "largest_relative_difference": worst,
        "tolerance": 0.01,
        "pass": worst is not None and len(torch) == len(amspc) == steps and worst <= 0.01,
    }


def compiled_run(out):
    """torch.compile's run (torch-compile.txt): its figures where torch
    compiled the model, else why not."""
    t = read(os.path.join(out, "torch-compile.txt"))
    if not t:
        return None
    if "torch.compile: the model is compiled" not in t:
        m = re.search(r"torch\.compile: (.*)", t)
        return {"error": m.group(1) if m else (t.strip().splitlines() or ["no output"])[-1]}
    r = torch_run(out, "torch-compile.txt")
    return r or {"error": (t.strip().splitlines() or ["no output"])[-1]}


def matmuls(out):
    """TFLOP/s per matmul shape (IN x OUT x TOKENS / product) of amspc's
    cuBLASLt bf16 products (matmul.txt) and torch.matmul's (torch-ops.txt)."""
    res = {}
    for m in re.finditer(r"BenchmarkGPUMatMulShapes/(\S+?)(?:-\d+)?\s+\d+\s+[\d.]+ ns/op\s+([\d.]+(?:e[-+]?\d+)?) TFLOP/s", read(os.path.join(out, "matmul.txt"))):
        res.setdefault(m.group(1), {"amspc": None, "torch": None})["amspc"] = float(m.group(2))
    for m in re.finditer(r"^matmul (\S+): ([\d.]+(?:e[-+]?\d+)?) TFLOP/s", read(os.path.join(out, "torch-ops.txt")), re.M):
        res.setdefault(m.group(1), {"amspc": None, "torch": None})["torch"] = float(m.group(2))
    return res or None


def torch_attention(out):
    """torch's scaled_dot_product_attention (torch-ops.txt): causal, seq
    2048, 32 heads, TFLOP/s forward and backward per head dim."""
    res = {}
    for m in re.finditer(r"^sdpa hd(\d+)/(forward|backward): ([\d.]+(?:e[-+]?\d+)?) TFLOP/s", read(os.path.join(out, "torch-ops.txt")), re.M):
        res.setdefault("hd" + m.group(1), {})[m.group(2)] = float(m.group(3))
    return res or None


def graphs(out):
    """tiny on one GPU rank with its steps replayed from a CUDA graph and
    enqueued one by one: the median step_time_s of the steps after the
    second (the first runs eagerly, the second is captured)."""
    def med(name):
        times = [r["step_time_s"] for r in jsonl(os.path.join(out, name)) if r.get("step", 0) > 2 and r.get("step_time_s")]
        return statistics.median(times) if times else None
    g, e = med("tiny-graphs-true.jsonl"), med("tiny-graphs-false.jsonl")
    if g is None and e is None:
        return None
    return {"graphs_step_s": g, "no_graphs_step_s": e, "speedup": e / g if g and e else None}


def overlap(out):
    """Issue 29's overlap check (overlap.txt, overlap-trace.json): the
    stand-in run's step with and without its collectives, the exposed
    communication measured and simulated, their ratio, and from the
    trace the share of the gathers' time that kernels on the compute
    stream cover."""
    t = read(os.path.join(out, "overlap.txt"))
    m = re.search(r"a step takes (\S+ \S+) with its collectives held for their simulated time, (\S+ \S+) with none", t)
    e = re.search(r"exposed communication: (\S+ \S+) measured, (\S+ \S+) simulated \(step (\S+ \S+) with the collectives, (\S+ \S+) without\)", t)
    if not m or not e:
        return {"error": (t.strip().splitlines() or ["no output"])[-1]} if t else None
    def signed(s):
        neg = s.startswith("-")
        v = seconds(s.lstrip("-"))
        return -v if neg and v is not None else v
    r = {
        "step_s": seconds(m.group(1)),
        "compute_alone_step_s": seconds(m.group(2)),
        "exposed_measured_s": signed(e.group(1)),
        "exposed_simulated_s": signed(e.group(2)),
        "simulated_step_s": seconds(e.group(3)),
        "simulated_compute_alone_step_s": seconds(e.group(4)),
    }
    if r["exposed_measured_s"] is not None and r["exposed_simulated_s"]:
        r["measured_over_simulated"] = r["exposed_measured_s"] / r["exposed_simulated_s"]
    r["gathers_under_compute"] = gathers_under_compute(os.path.join(out, "overlap-trace.json"))
    return r


def gathers_under_compute(path):
    """The share of the comm.gather spans' time during which a span of
    the compute stream runs, over the trace's first step (None without a
    trace)."""
    try:
        with open(path) as f:
            ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    except (OSError, ValueError, KeyError):
        return None
    comp = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "compute")
    merged = []
    for a, b in comp:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    total = covered = 0.0
    for e in ev:
        if e.get("cat") != "comm.gather":
            continue
        a, b = e["ts"], e["ts"] + e["dur"]
        total += b - a
        for ca, cb in merged:
            covered += max(0.0, min(b, cb) - max(a, ca))
    return covered / total if total > 0 else None


def tiny_nccl(out):
    """tiny at one rank with NCCL's collectives against the ordered fold."""
    t = read(os.path.join(out, "tiny-nccl.txt"))
    m = re.search(r"(\d+) steps, largest relative difference (\S+): (ok|FAIL)", t)
    if not m:
        return None
    try:
        worst = float(m.group(2))
    except ValueError:
        worst = None
    return {"steps": int(m.group(1)), "largest_relative_difference": worst, "ok": m.group(3) == "ok"}


def main():
    out, build = sys.argv[1], sys.argv[2]
    card = read(os.path.join(out, "card.txt")).strip() or None  # gpu_checks.sh writes it
    if not card and shutil.which("nvidia-smi"):
        card = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip() or None
    torch = torch_run(out)
    log = read(os.path.join(out, "cudalib.log"))
    tests = {m.group(2): m.group(1) for m in re.finditer(r"^--- (PASS|FAIL|SKIP): (\w+)", log, re.M)}
    doc = {
        "card": card,
        "date": read(os.path.join(out, "date.txt")).strip() or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
        "commit": read(os.path.join(build, "commit.txt")).strip() or None,
        "tests": dict(sorted(tests.items())),
        "models": {
            "tinyllama-1.1b": {
                "torch_eager": torch,
                "amspc": amspc_run(out, "amspc1b", torch),
                "amspc_tensor_cores": amspc_run(out, "amspc1b-tc", torch),
                "torch_compile": compiled_run(out),
                "same_init_losses": same_init(out),
                "same_init_losses_lr_3e-5": same_init(out, "-lr", 20),
            },
            "llama-3.2-1b": {
                "torch_eager": torch_run(out, "torch-l32.txt"),
                "amspc_tensor_cores": amspc_run(out, "amspc-l32", torch_run(out, "torch-l32.txt")),
            },
        },
        "attention_tflops": attention(out),
        "attention_tflops_torch": torch_attention(out),
        "matmul_tflops": matmuls(out),
        "adamw_gb_per_s": adamw(out),
        "tiny_graphs": graphs(out),
        "tiny_nccl_one_rank": tiny_nccl(out),
        "overlap_check": overlap(out),
    }
    json.dump(doc, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
