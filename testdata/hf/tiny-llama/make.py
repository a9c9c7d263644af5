#!/usr/bin/env python3
"""Makes testdata/hf/tiny-llama: a small LLaMA in Hugging Face's layout,
names and conventions, with PyTorch alone (transformers is not in
Debian's archive), and the logits and loss of its forward on a text.

What it writes beside itself:
  config.json        a LlamaForCausalLM config (grouped KV heads, untied head)
  model.safetensors  its weights in bf16, as published checkpoints store them:
                     nn.Linear's [out, in], q_proj and k_proj in the
                     rotate-half layout transformers' LLaMA uses
  tokenizer.json     its tokenizer: byte-level BPE whose 256 tokens are the
                     bytes (GPT-2's byte alphabet, id = the byte) and no
                     merges, so its ids are a text's bytes
  reference.json     the text's token ids (bytes), the logits of its every
                     position (fp32, computed from the bf16 weights widened
                     to fp32) and the mean cross-entropy of each next token;
                     and the global norm of the gradient of the loss of the
                     window of the text's first GRAD_SEQ tokens and its first
                     again (every window of a stream of the first GRAD_SEQ
                     tokens repeated: one per data-parallel rank), what
                     torch.nn.utils.clip_grad_norm_ returns, which amspc's
                     clip_grad_norm must find

The forward is transformers' LlamaForCausalLM written out (modeling_llama:
LlamaRMSNorm, rotate_half and apply_rotary_pos_emb, repeat_kv, eager
attention with a causal mask and an fp32 softmax, LlamaMLP), so that
amspc's logits from `amspc import hf` are checked against the function a
transformers user gets, not against amspc's own idea of it.

    /usr/bin/python3 testdata/hf/tiny-llama/make.py   # Debian's python3-torch
"""
import json
import math
import os
import struct

import torch

HERE = os.path.dirname(os.path.abspath(__file__))

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 160,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "initializer_range": 0.02,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "bfloat16",
    "_name_or_path": "amspc/tiny-llama",
}

GRAD_SEQ = 64

TEXT = b"amspc imports a Hugging Face LLaMA: its logits must match, bit for bit near enough."


def weights(gen):
    c = CONFIG
    d, f, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    hd = d // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * hd
    std = c["initializer_range"]
    w = {}

    def normal(*shape, s=std):
        return torch.randn(*shape, generator=gen) * s

    def norm():
        # not ones: a norm read into the wrong place must show
        return 1 + normal(d, s=0.1)

    w["model.embed_tokens.weight"] = normal(v, d, s=1.0)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm()
        w[p + "self_attn.q_proj.weight"] = normal(d, d, s=0.15)
        w[p + "self_attn.k_proj.weight"] = normal(kv, d, s=0.15)
        w[p + "self_attn.v_proj.weight"] = normal(kv, d, s=0.15)
        w[p + "self_attn.o_proj.weight"] = normal(d, d, s=0.1)
        w[p + "post_attention_layernorm.weight"] = norm()
        w[p + "mlp.gate_proj.weight"] = normal(f, d, s=0.1)
        w[p + "mlp.up_proj.weight"] = normal(f, d, s=0.1)
        w[p + "mlp.down_proj.weight"] = normal(d, f, s=0.1)
    w["model.norm.weight"] = norm()
    w["lm_head.weight"] = normal(v, d, s=0.1)
    # bf16 as published, then exactly those values in fp32 for the forward
    return {k: t.to(torch.bfloat16) for k, t in w.items()}


def rms_norm(x, weight, eps):
    # LlamaRMSNorm
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def forward(w, ids):
    c = CONFIG
    d = c["hidden_size"]
    heads, kvh = c["num_attention_heads"], c["num_key_value_heads"]
    hd = d // heads
    eps = c["rms_norm_eps"]
    s = ids.shape[0]
    w = {k: t.float() if t.dtype != torch.float32 else t for k, t in w.items()}
    x = w["model.embed_tokens.weight"][ids]  # [s, d]
    # LlamaRotaryEmbedding (default rope), apply_rotary_pos_emb
    inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    pos = torch.arange(s).float()
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    mask = torch.full((s, s), float("-inf")).triu(1)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(s, heads, hd).transpose(0, 1)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(s, kvh, hd).transpose(0, 1)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(s, kvh, hd).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(heads // kvh, dim=0)  # repeat_kv
        v = v.repeat_interleave(heads // kvh, dim=0)
        scores = q @ k.transpose(1, 2) / math.sqrt(hd) + mask
        probs = torch.softmax(scores.float(), dim=-1)
        a = (probs @ v).transpose(0, 1).reshape(s, d)
        x = x + a @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].T)
        u = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (g * u) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    return x @ w["lm_head.weight"].T  # [s, vocab]


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def byte_tokenizer():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return {
        "version": "1.0",
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": {chars[b]: b for b in range(256)}, "merges": []},
    }


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(20261127)
    w = weights(gen)
    ids = torch.tensor(list(TEXT), dtype=torch.int64)
    with torch.no_grad():
        logits = forward(w, ids)
        loss = torch.nn.functional.cross_entropy(logits[:-1], ids[1:]).item()
    leaves = {k: t.float().requires_grad_() for k, t in w.items()}
    win = torch.cat((ids[:GRAD_SEQ], ids[:1]))
    torch.nn.functional.cross_entropy(forward(leaves, win[:-1]), win[1:]).backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(list(leaves.values()), float("inf")).item()
    with open(os.path.join(HERE, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(HERE, "model.safetensors"), w)
    with open(os.path.join(HERE, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(byte_tokenizer(), f, ensure_ascii=False, indent=1)
        f.write("\n")
    ref = {
        "tokens": ids.tolist(),
        "loss": loss,
        "grad_seq": GRAD_SEQ,
        "grad_norm": grad_norm,
        "logits": [[float(x) for x in row] for row in logits.tolist()],
    }
    with open(os.path.join(HERE, "reference.json"), "w") as f:
        json.dump(ref, f)
        f.write("\n")
    print(f"wrote {HERE}: {sum(t.numel() for t in w.values())} params, loss {loss:.6f} on {len(TEXT)} tokens")


if __name__ == "__main__":
    main()
