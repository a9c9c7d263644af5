package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"

	"amspc/tokenizer"
)

const tokenizeUsage = "usage: amspc tokenize --tokenizer tokenizer.json [--bos] [--eos] (-o FILE | --ids) IN..."

// runTokenize encodes text files with a Hugging Face tokenizer.json: into
// one token file that amspc run --data reads (every file's ids in order,
// each between BOS and EOS where asked), or, with --ids, each file's ids
// as a JSON array a line, to compare with other tokenizers.
func runTokenize(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("tokenize", tokenizeUsage, stderr)
	tokFile := fs.String("tokenizer", "", "the Hugging Face `tokenizer.json`, or it gzipped (byte-level BPE: GPT-2's, Llama 3's; SentencePiece-style not supported yet)")
	out := fs.String("o", "", "write the tokens to `FILE`: a header with the tokenizer's SHA-256, then uint16 ids (uint32 past 65,536 tokens)")
	ids := fs.Bool("ids", false, "print each file's ids as one JSON array a line instead")
	bos := fs.Bool("bos", false, "begin each file with the tokenizer's BOS token")
	eos := fs.Bool("eos", false, "end each file with the tokenizer's EOS token")
	files, err := parseFlags(fs, args)
	if err != nil {
		return exitUser
	}
	switch {
	case *tokFile == "":
		fmt.Fprintln(stderr, "amspc tokenize: --tokenizer tokenizer.json is required")
		return exitUser
	case (*out == "") == !*ids:
		fmt.Fprintln(stderr, "amspc tokenize: give -o FILE or --ids (one of them)")
		return exitUser
	case len(files) == 0:
		fs.Usage()
		return exitUser
	}
	if err := notAnInput("-o", *out, append([]string{*tokFile}, files...)...); err != nil {
		fmt.Fprintf(stderr, "amspc tokenize: %v\n", err)
		return exitUser
	}
	tk, err := loadTokenizer(*tokFile)
	if err != nil {
		fmt.Fprintf(stderr, "amspc tokenize: %v\n", err)
		return exitUser
	}
	var around [2][]int32
	for i, c := range []struct {
		on    bool
		names []string
	}{{*bos, bosNames}, {*eos, eosNames}} {
		if !c.on {
			continue
		}
		id, ok := knownToken(tk, c.names)
		if !ok {
			fmt.Fprintf(stderr, "amspc tokenize: %s has none of the tokens %v for --%s\n", *tokFile, c.names, []string{"bos", "eos"}[i])
			return exitUser
		}
		around[i] = []int32{id}
	}
	var all []int32
	enc := json.NewEncoder(stdout)
	for _, f := range files {
		text, err := readBounded(f, maxData)
		if err != nil {
			fmt.Fprintf(stderr, "amspc tokenize: %v\n", err)
			return exitUser
		}
		got := append(append(append([]int32{}, around[0]...), tk.Encode(string(text))...), around[1]...)
		if *ids {
			if err := enc.Encode(got); err != nil {
				fmt.Fprintf(stderr, "amspc tokenize: %v\n", err)
				return exitUser
			}
			continue
		}
		all = append(all, got...)
	}
	if *ids {
		return exitOK
	}
	data, err := tokenizer.EncodeFile(all, tk.VocabSize(), tk.Hash())
	if err == nil {
		err = writeNew(*out, data, true)
	}
	if err != nil {
		fmt.Fprintf(stderr, "amspc tokenize: %v\n", err)
		return exitUser
	}
	fmt.Fprintf(stdout, "wrote %s: %d tokens of %d files (vocabulary %d, tokenizer %s...)\n", *out, len(all), len(files), tk.VocabSize(), tk.Hash()[:12])
	return exitOK
}

// bosNames and eosNames are the added tokens --bos and --eos take, the
// first the tokenizer has.
var (
	bosNames = []string{"<|begin_of_text|>", "<s>", "<|endoftext|>"}
	eosNames = []string{"<|end_of_text|>", "</s>", "<|endoftext|>"}
)

func knownToken(tk *tokenizer.Tokenizer, names []string) (int32, bool) {
	for _, n := range names {
		if id, ok := tk.ID(n); ok {
			return id, true
		}
	}
	return 0, false
}

// loadTokenizer reads a tokenizer.json, or one gzipped.
func loadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	b, err := readBounded(path, 1<<30)
	if err != nil {
		return nil, err
	}
	if len(b) > 2 && b[0] == 0x1f && b[1] == 0x8b {
		z, err := gzip.NewReader(bytes.NewReader(b))
		if err == nil {
			b, err = io.ReadAll(io.LimitReader(z, 1<<30))
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
	}
	tk, err := tokenizer.Load(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return tk, nil
}
