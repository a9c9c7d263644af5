#!/usr/bin/env python3
"""gpu_checks.sh's figures as JSON (bench/results/gpu.json): what one run of
`sh bench/gpu_checks.sh run` measured, read from the files it leaves in its
output folder, so later runs are compared without parsing prose. A figure
the run did not produce is null.

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
    if not m:
        return {"error": (t.strip().splitlines() or ["no output"])[-1]}
    steps = [json.loads(l) for l in read(os.path.join(out, base + ".jsonl")).splitlines() if l.strip()]
    rates = [s["tokens_per_s"] for s in steps[1:] if s.get("tokens_per_s")]  # the first step warms up
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


def main():
    out, build = sys.argv[1], sys.argv[2]
    card = None
    if shutil.which("nvidia-smi"):
        card = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip() or None
    torch = torch_run(out)
    log = read(os.path.join(out, "cudalib.log"))
    tests = {m.group(2): m.group(1) for m in re.finditer(r"^--- (PASS|FAIL|SKIP): (\w+)", log, re.M)}
    doc = {
        "card": card,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
        "commit": read(os.path.join(build, "commit.txt")).strip() or None,
        "tests": dict(sorted(tests.items())),
        "models": {
            "tinyllama-1.1b": {
                "torch_eager": torch,
                "amspc": amspc_run(out, "amspc1b", torch),
                "amspc_tensor_cores": amspc_run(out, "amspc1b-tc", torch),
            },
            "llama-3.2-1b": {
                "torch_eager": torch_run(out, "torch-l32.txt"),
                "amspc_tensor_cores": amspc_run(out, "amspc-l32", torch_run(out, "torch-l32.txt")),
            },
        },
        "attention_tflops": attention(out),
        "adamw_gb_per_s": adamw(out),
    }
    json.dump(doc, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
