package tokenizer

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
)

// A token file (amspc tokenize -o): a 64-byte header, then the tokens,
// little-endian, 2 bytes each when every id fits (a vocabulary of at most
// 65,536), else 4.
//
//	magic     8 bytes  "AMSPCTOK"
//	version   uint32   1
//	width     uint32   2 or 4 (bytes per token)
//	count     uint64   tokens
//	hash     32 bytes  SHA-256 of the tokenizer.json that made them
//	vocab     uint32   the tokenizer's vocabulary size
//	reserved  4 bytes  zero
const (
	fileMagic   = "AMSPCTOK"
	headerBytes = 64
)

// EncodeFile is a token file of ids, from a tokenizer of vocab ids whose
// tokenizer.json has SHA-256 hash (hex).
func EncodeFile(ids []int32, vocab int, hash string) ([]byte, error) {
	h, err := hex.DecodeString(hash)
	if err != nil || len(h) != 32 {
		return nil, fmt.Errorf("tokenizer hash %q is not a SHA-256", hash)
	}
	width := 2
	if vocab > 1<<16 {
		width = 4
	}
	out := make([]byte, headerBytes, headerBytes+width*len(ids))
	copy(out, fileMagic)
	binary.LittleEndian.PutUint32(out[8:], 1)
	binary.LittleEndian.PutUint32(out[12:], uint32(width))
	binary.LittleEndian.PutUint64(out[16:], uint64(len(ids)))
	copy(out[24:56], h)
	binary.LittleEndian.PutUint32(out[56:], uint32(vocab))
	for _, id := range ids {
		if width == 2 {
			out = binary.LittleEndian.AppendUint16(out, uint16(id))
		} else {
			out = binary.LittleEndian.AppendUint32(out, uint32(id))
		}
	}
	return out, nil
}

// FileInfo is a token file's header.
type FileInfo struct {
	Count int
	Vocab int
	Hash  string // of the tokenizer.json
}

// IsFile says whether data starts as a token file does.
func IsFile(data []byte) bool { return len(data) >= 8 && string(data[:8]) == fileMagic }

// DecodeFile reads a token file, refusing one whose header does not
// match its length or whose ids exceed its vocabulary.
func DecodeFile(data []byte) ([]int32, FileInfo, error) {
	var fi FileInfo
	if !IsFile(data) || len(data) < headerBytes {
		return nil, fi, fmt.Errorf("not an amspc token file (no %s header)", fileMagic)
	}
	if v := binary.LittleEndian.Uint32(data[8:]); v != 1 {
		return nil, fi, fmt.Errorf("token file version %d; amspc reads version 1", v)
	}
	width := int(binary.LittleEndian.Uint32(data[12:]))
	count := binary.LittleEndian.Uint64(data[16:])
	fi.Hash = hex.EncodeToString(data[24:56])
	fi.Vocab = int(binary.LittleEndian.Uint32(data[56:]))
	if width != 2 && width != 4 {
		return nil, fi, fmt.Errorf("token file of %d-byte tokens; amspc writes 2 or 4", width)
	}
	if body := uint64(len(data) - headerBytes); count > body/uint64(width) || body != count*uint64(width) {
		return nil, fi, fmt.Errorf("token file says %d tokens of %d bytes, and holds %d bytes after its header (cut short or damaged)", count, width, body)
	}
	ids := make([]int32, count)
	for i := range ids {
		if width == 2 {
			ids[i] = int32(binary.LittleEndian.Uint16(data[headerBytes+2*i:]))
		} else {
			ids[i] = int32(binary.LittleEndian.Uint32(data[headerBytes+4*i:]))
		}
		if ids[i] < 0 || int(ids[i]) >= fi.Vocab {
			return nil, fi, fmt.Errorf("token %d is id %d, outside the file's vocabulary of %d", i, ids[i], fi.Vocab)
		}
	}
	fi.Count = int(count)
	return ids, fi, nil
}

// llmcMagic is the first int32 of llm.c's token files (its 256-int32
// header: magic, version, token count).
const llmcMagic = 20240520

// DecodeLLMC reads llm.c's .bin: a header of 256 int32 (magic 20240520,
// version 1, the token count), then uint16 tokens.
func DecodeLLMC(data []byte) ([]int32, error) {
	if len(data) < 1024 || binary.LittleEndian.Uint32(data) != llmcMagic {
		return nil, fmt.Errorf("not an llm.c token file (no magic %d)", llmcMagic)
	}
	if v := binary.LittleEndian.Uint32(data[4:]); v != 1 {
		return nil, fmt.Errorf("llm.c token file version %d; amspc reads version 1 (uint16 tokens)", v)
	}
	n := uint64(binary.LittleEndian.Uint32(data[8:]))
	if uint64(len(data)-1024) != 2*n {
		return nil, fmt.Errorf("llm.c token file says %d tokens and holds %d bytes after its header", n, len(data)-1024)
	}
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(binary.LittleEndian.Uint16(data[1024+2*i:]))
	}
	return ids, nil
}

// IsLLMC says whether data starts as llm.c's token files do.
func IsLLMC(data []byte) bool {
	return len(data) >= 4 && binary.LittleEndian.Uint32(data) == llmcMagic
}

// Ext is a path's extension in lower case (".BIN" reads as ".bin").
func Ext(path string) string {
	i := strings.LastIndexAny(path, "./")
	if i < 0 || path[i] != '.' {
		return ""
	}
	return strings.ToLower(path[i:])
}
