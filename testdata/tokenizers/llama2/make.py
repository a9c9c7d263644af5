#!/usr/bin/env python3
"""Makes testdata/tokenizers/llama2 from npm's llama-tokenizer-js 1.2.2
(MIT), which ships Llama 2's tokenizer.json vocabulary (its tokens in id
order, base64) and merges (pairs of ids, uint16 little-endian):

  tokenizer.json.gz  Llama 2's tokenizer.json rebuilt from them: the
                     normalizer (prepend U+2581, spaces to U+2581), no
                     pre-tokenizer, BPE with byte_fallback and <unk>, and
                     <unk>, <s>, </s> as special added tokens (gzip)

    npm pack llama-tokenizer-js@1.2.2 && tar xzf llama-tokenizer-js-1.2.2.tgz
    python3 testdata/tokenizers/llama2/make.py package
"""
import base64
import gzip
import json
import os
import re
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    src = open(os.path.join(sys.argv[1], "llama-tokenizer.js"), encoding="utf-8").read()
    vocab_b64 = re.search(r'const llama_vocab_base64 = "([^"]*)"', src).group(1)
    merges_b64 = re.search(r'const llama_merges_binary = "([^"]*)"', src).group(1)
    tokens = base64.b64decode(vocab_b64).decode("utf-8").split("\n")
    raw = base64.b64decode(merges_b64)
    ids = struct.unpack(f"<{len(raw) // 2}H", raw)
    merges = [tokens[ids[i]] + " " + tokens[ids[i + 1]] for i in range(0, len(ids) - 1, 2)]
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    tj = {
        "version": "1.0",
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
    }
    data = json.dumps(tj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    with open(os.path.join(HERE, "tokenizer.json.gz"), "wb") as f:
        with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=9, mtime=0) as z:
            z.write(data)
    print(f"{len(tokens)} tokens, {len(merges)} merges")


if __name__ == "__main__":
    main()
