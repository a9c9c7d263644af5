#!/usr/bin/env python3
"""Makes testdata/tokenizers/llama3 from npm's llama3-tokenizer-js 1.2.0
(MIT), which ships Meta-Llama-3's tokenizer.json vocabulary (its tokens,
in the file's order, base64) and merges (pairs of vocabulary positions,
17 bits each):

  tokenizer.json.gz  Llama 3's tokenizer.json rebuilt from them: the vocab
                     (token -> its position), the merges in order, the 256
                     special tokens from 128000 on, the Split pre-tokenizer
                     with Llama 3's regex, then ByteLevel without its own,
                     and BPE with ignore_merges (gzip: 2.5 MB, not 9)

    npm pack llama3-tokenizer-js@1.2.0 && tar xzf llama3-tokenizer-js-1.2.0.tgz
    python3 testdata/tokenizers/llama3/make.py package
"""
import base64
import gzip
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"


def main():
    pkg = sys.argv[1]
    src = open(os.path.join(pkg, "src", "data-converted.js"), encoding="utf-8").read()
    vocab_b64 = re.search(r'const llama_vocab_base64 = "([^"]*)"', src).group(1)
    merges_b64 = re.search(r'const llama_merges_binary = "([^"]*)"', src).group(1)
    tokens = base64.b64decode(vocab_b64).decode("utf-8").split("\n")
    raw = base64.b64decode(merges_b64)
    bits = int.from_bytes(raw, "big")
    nbits = len(raw) * 8
    n = nbits // 17
    ids = [(bits >> (nbits - 17 * (i + 1))) & 0x1FFFF for i in range(n)]
    merges = [tokens[ids[i]] + " " + tokens[ids[i + 1]] for i in range(0, n - 1, 2)]
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
                "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
                "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"] + [f"<|reserved_special_token_{i}|>" for i in range(3, 248)]
    added = [{"id": len(tokens) + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(specials)]
    tj = {
        "version": "1.0",
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
    }
    data = json.dumps(tj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    with open(os.path.join(HERE, "tokenizer.json.gz"), "wb") as f:
        with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=9, mtime=0) as z:  # the same bytes every run
            z.write(data)
    print(f"{len(tokens)} tokens, {len(merges)} merges, {len(specials)} special")


if __name__ == "__main__":
    main()
