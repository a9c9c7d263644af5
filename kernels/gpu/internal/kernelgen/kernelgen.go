// Package kernelgen reads the kernel declarations of kernels/gpu's CUDA
// sources (ops.cu and mma.cu) and generates what Go and the host shim
// need of them, so no table of kernels is kept by hand:
//
//   - kernels/gpu/kernels_gen.go: package gpu's Kernels (ops.cu) and
//     MMAKernels (mma.cu), each kernel's name, parameter kinds and
//     launch shape, in source order;
//   - kernels/gpu/hostc/launch_gen.h: a C wrapper per kernel taking its
//     arguments as 64-bit words, and h_launch, which runs kernel k on
//     the host shim;
//   - kernels/gpu/hostc/launch_gen.go: h_launch's kernels in its order.
//
// A kernel is declared `AMSP_EXTERN_C __global__ void name(params)` (or
// with a literal `extern "C"`), its parameters pointers, long long,
// float or double, and the line right above it is its launch annotation,
// `// amspc:launch SHAPE` (see Shapes): a C signature does not say how a
// kernel is launched. Anything else is refused with the file and line.
//
// The command in cmd/kernelgen writes the files (go generate
// ./kernels/gpu); package gpu's tests call Generate to check that the
// checked-in files are current.
package kernelgen

import (
	"bytes"
	"fmt"
	"go/format"
	"regexp"
	"strings"
)

// Source is one CUDA file: its name, as messages and generated comments
// give it, and its text.
type Source struct {
	Name, Text string
}

// Param is one parameter of a kernel.
type Param struct {
	// Kind is package gpu's Param letter: 'p' a pointer (any element
	// type), 'l' long long, 'f' float, 'd' double.
	Kind byte
	// CType is the parameter's C type as declared, spaces normalized
	// ("const float *"): the host wrapper casts a word to it.
	CType string
}

// Kernel is one kernel declaration.
type Kernel struct {
	Name   string
	File   string
	Line   int // of the declaration's first line, from 1
	Params []Param
	Shape  string // the launch annotation's word, one of Shapes
}

// Kinds is the kernel's parameter kinds as package gpu spells them
// ("pppll").
func (k *Kernel) Kinds() string {
	b := make([]byte, len(k.Params))
	for i, p := range k.Params {
		b[i] = p.Kind
	}
	return string(b)
}

// Coop says whether the host shim runs the kernel's blocks with all
// their threads, as coroutines: kernels whose threads work together
// (barriers, warp shuffles, tensor-core products) at the launch's own
// grid and block.
func (k *Kernel) Coop() bool { return k.Shape == "attention" }

// Shapes are the launch annotation's words, each with the package gpu
// Shape it stands for:
//
//	elementwise  any grid and block: the kernel loops over its elements
//	             (or columns) with the grid's stride
//	row          one block per row, a power-of-two block of at most
//	             AMSP_BLOCK threads
//	attention    the launch's own grid and block, every thread of a
//	             block taking part (the attention kernels, and
//	             mma_probe's one warp); the host runs them as coroutines
var Shapes = [][2]string{{"elementwise", "Elementwise"}, {"row", "Row"}, {"attention", "Attention"}}

func goShape(word string) string {
	for _, s := range Shapes {
		if s[0] == word {
			return s[1]
		}
	}
	return ""
}

// annotationPrefix starts a launch annotation; any other "// amspc:"
// comment is refused (a misspelled annotation must not pass unseen).
const annotationPrefix = "// amspc:launch"

var (
	declRE  = regexp.MustCompile(`^\s*(?:AMSP_EXTERN_C|extern\s+"C")\s+__global__\s+void\s+([A-Za-z_]\w*)\s*\(([^)]*)\)`)
	paramRE = regexp.MustCompile(`^(.*?)\s*\b([A-Za-z_]\w*)$`)
	spaceRE = regexp.MustCompile(`\s+`)
)

// Parse reads src's kernels in source order.
func Parse(src Source) ([]Kernel, error) {
	lines := strings.SplitAfter(src.Text, "\n")
	at := func(line int) string { return fmt.Sprintf("%s:%d", src.Name, line+1) }
	var (
		kernels []Kernel
		offset  int  // of lines[i] in src.Text
		pending = -1 // the line of an annotation not yet followed by its kernel
		shape   string
	)
	for i := 0; i < len(lines); offset, i = offset+len(lines[i]), i+1 {
		line := lines[i]
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "// amspc:") {
			if pending >= 0 {
				return nil, fmt.Errorf("%s: launch annotation not right above a kernel declaration", at(pending))
			}
			word, ok := strings.CutPrefix(trimmed, annotationPrefix+" ")
			if !ok {
				return nil, fmt.Errorf("%s: %q is not a launch annotation (%s SHAPE)", at(i), trimmed, annotationPrefix)
			}
			if word = strings.TrimSpace(word); goShape(word) == "" {
				return nil, fmt.Errorf("%s: launch shape %q is none of %s", at(i), word, shapeWords())
			}
			pending, shape = i, word
			continue
		}
		code, _, _ := strings.Cut(line, "//")
		if !strings.Contains(code, "__global__") || strings.HasPrefix(trimmed, "#") {
			if pending >= 0 {
				return nil, fmt.Errorf("%s: launch annotation not right above a kernel declaration", at(pending))
			}
			continue
		}
		// A declaration: from this line to its parameter list's end.
		end := strings.IndexByte(src.Text[offset:], ')')
		if end < 0 {
			end = len(src.Text) - offset
		} else {
			end++
		}
		m := declRE.FindStringSubmatchIndex(src.Text[offset : offset+end])
		if m == nil {
			return nil, fmt.Errorf(`%s: a __global__ function must be declared AMSP_EXTERN_C __global__ void name(params)`, at(i))
		}
		name := src.Text[offset+m[2] : offset+m[3]]
		if pending < 0 {
			return nil, fmt.Errorf("%s: kernel %s has no launch annotation: put %s SHAPE (%s) on the line above it",
				at(i), name, annotationPrefix, shapeWords())
		}
		k := Kernel{Name: name, File: src.Name, Line: i + 1, Shape: shape}
		params, err := parseParams(src, offset+m[4], src.Text[offset+m[4]:offset+m[5]], name)
		if err != nil {
			return nil, err
		}
		k.Params = params
		kernels = append(kernels, k)
		pending = -1
	}
	if pending >= 0 {
		return nil, fmt.Errorf("%s: launch annotation not right above a kernel declaration", at(pending))
	}
	return kernels, nil
}

// parseParams reads a kernel's parameter list, list, which starts at
// byte start of src.
func parseParams(src Source, start int, list, kernel string) ([]Param, error) {
	if t := strings.TrimSpace(list); t == "" || t == "void" {
		return nil, nil
	}
	var params []Param
	for p := range strings.SplitSeq(list, ",") {
		line := strings.Count(src.Text[:start+len(p)-len(strings.TrimLeft(p, " \t\r\n"))], "\n") + 1
		start += len(p) + 1
		decl := strings.TrimSpace(spaceRE.ReplaceAllString(p, " "))
		m := paramRE.FindStringSubmatch(decl)
		if m == nil || strings.TrimSpace(m[1]) == "" {
			return nil, fmt.Errorf("%s:%d: kernel %s: parameter %q has no type and name", src.Name, line, kernel, decl)
		}
		typ := strings.TrimSpace(m[1])
		if strings.Contains(typ, "*") {
			// "const float*" and "const float *" are one type.
			typ = strings.TrimSpace(spaceRE.ReplaceAllString(strings.ReplaceAll(typ, "*", " * "), " "))
			typ = strings.ReplaceAll(typ, "* *", "**")
			params = append(params, Param{Kind: 'p', CType: typ})
			continue
		}
		// A scalar's const changes nothing a caller passes.
		scalar := strings.TrimPrefix(typ, "const ")
		kind := map[string]byte{"long long": 'l', "float": 'f', "double": 'd'}[scalar]
		if kind == 0 {
			return nil, fmt.Errorf("%s:%d: kernel %s: parameter %q is of type %s; a kernel parameter must be a pointer, long long, float or double",
				src.Name, line, kernel, decl, typ)
		}
		params = append(params, Param{Kind: kind, CType: scalar})
	}
	return params, nil
}

func shapeWords() string {
	w := make([]string, len(Shapes))
	for i, s := range Shapes {
		w[i] = s[0]
	}
	return strings.Join(w, ", ")
}

// File is a generated file: its path relative to kernels/gpu (slashes)
// and its content.
type File struct {
	Path string
	Data []byte
}

// Generate parses ops and mma (ops.cu's and mma.cu's text) and returns
// the files generated from them, in a fixed order, each the same for the
// same sources.
func Generate(ops, mma Source) ([]File, error) {
	opsK, err := Parse(ops)
	if err != nil {
		return nil, err
	}
	mmaK, err := Parse(mma)
	if err != nil {
		return nil, err
	}
	all := append(append([]Kernel(nil), opsK...), mmaK...)
	for i, k := range all {
		for _, o := range all[:i] {
			if o.Name == k.Name {
				return nil, fmt.Errorf("%s:%d: kernel %s is declared again (first at %s:%d)", k.File, k.Line, k.Name, o.File, o.Line)
			}
		}
	}
	header := fmt.Sprintf("// Code generated by kernelgen from %s and %s. DO NOT EDIT.\n", ops.Name, mma.Name)
	tables, err := goTables(header, ops.Name, opsK, mma.Name, mmaK)
	if err != nil {
		return nil, err
	}
	index, err := goIndex(header, all)
	if err != nil {
		return nil, err
	}
	return []File{
		{Path: "kernels_gen.go", Data: tables},
		{Path: "hostc/launch_gen.h", Data: cLaunch(header, all)},
		{Path: "hostc/launch_gen.go", Data: index},
	}, nil
}

// regenerate is how a generated file says it is made.
const regenerate = "// go generate ./kernels/gpu regenerates it (kernels/gpu/internal/kernelgen).\n"

func goTables(header, opsName string, opsK []Kernel, mmaName string, mmaK []Kernel) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(header + regenerate + "\npackage gpu\n")
	table := func(name, doc string, ks []Kernel) {
		fmt.Fprintf(&b, "\n%s\nvar %s = []Kernel{\n", doc, name)
		for _, k := range ks {
			fmt.Fprintf(&b, "\t{%q, []Param(%q), %s},\n", k.Name, k.Kinds(), goShape(k.Shape))
		}
		b.WriteString("}\n")
	}
	table("Kernels", fmt.Sprintf(`// Kernels lists %s's kernels in source order: each one's name, its
// parameters' kinds and its launch shape (the "amspc:launch" annotation
// above it).`, opsName), opsK)
	table("MMAKernels", fmt.Sprintf("// MMAKernels lists %s's kernels in source order, as Kernels does %s's.", mmaName, opsName), mmaK)
	return formatGo(b.Bytes(), "kernels_gen.go")
}

func goIndex(header string, all []Kernel) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(header + regenerate + `
//go:build cgo

package hostc

import "amspc/kernels/gpu"

// launchKernels are launch_gen.h's kernels: h_launch runs launchKernels[k]
// as kernel k, its arguments 64-bit words in the order and of the kinds of
// its Params (a pointer's address, a long long, a float's or a double's
// bits).
var launchKernels = [...]gpu.Kernel{
`)
	for _, k := range all {
		fmt.Fprintf(&b, "\t{Name: %q, Params: []gpu.Param(%q), Shape: gpu.%s},\n", k.Name, k.Kinds(), goShape(k.Shape))
	}
	b.WriteString("}\n")
	return formatGo(b.Bytes(), "hostc/launch_gen.go")
}

func formatGo(src []byte, name string) ([]byte, error) {
	out, err := format.Source(src)
	if err != nil {
		return nil, fmt.Errorf("kernelgen: generated %s does not parse: %v", name, err)
	}
	return out, nil
}

// cLaunch is launch_gen.h: h_<name>, a body taking the words, per
// kernel, and h_launch.
func cLaunch(header string, all []Kernel) []byte {
	var b bytes.Buffer
	b.WriteString(header + regenerate + `
// The host shim's launches (package hostc): h_launch runs kernel k
// (launch_gen.go's launchKernels[k]) with its arguments as 64-bit words,
// through h_<name>, which converts them to the kernel's parameter types.
// hostc.go includes this file after ops.cu, mma.cu, LAUNCH and
// amsp_coop_launch.

#ifndef AMSP_LAUNCH_GEN_H
#define AMSP_LAUNCH_GEN_H

// A float travels as its bits in a word's low half, a double as its
// bits: copied, not converted, so every value arrives exactly.
static float amsp_word_f32(unsigned long long w) {
	uint32_t u = (uint32_t)w;
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

static double amsp_word_f64(unsigned long long w) {
	double d;
	memcpy(&d, &w, sizeof d);
	return d;
}
`)
	for _, k := range all {
		fmt.Fprintf(&b, "\n// %s (%s, %s).\nstatic void h_%s(const void *p) {\n\tconst unsigned long long *w = p;\n", k.Name, k.File, k.Shape, k.Name)
		args := make([]string, len(k.Params))
		for i, p := range k.Params {
			switch p.Kind {
			case 'p':
				args[i] = fmt.Sprintf("(%s)(uintptr_t)w[%d]", p.CType, i)
			case 'l':
				args[i] = fmt.Sprintf("(long long)w[%d]", i)
			case 'f':
				args[i] = fmt.Sprintf("amsp_word_f32(w[%d])", i)
			case 'd':
				args[i] = fmt.Sprintf("amsp_word_f64(w[%d])", i)
			}
		}
		if len(args) == 0 {
			b.WriteString("\t(void)w;\n")
		}
		b.WriteString(wrapCall("\t"+k.Name+"(", args, ");\n"))
		b.WriteString("}\n")
	}
	b.WriteString(`
// h_launch runs kernel k with the words w over a grid of gx by gy by gz
// blocks: an elementwise or row kernel's blocks one after another, each
// one thread (LAUNCH; gx alone counts); an attention kernel's blocks
// with block threads each, as coroutines (amsp_coop_launch). It returns
// 0, amsp_coop_launch's error, or -3 for no kernel k.
static int h_launch(int k, const unsigned long long *w, unsigned gx, unsigned gy, unsigned gz, unsigned block) {
	switch (k) {
`)
	for i, k := range all {
		fmt.Fprintf(&b, "\tcase %d: // %s\n", i, k.Name)
		if k.Coop() {
			fmt.Fprintf(&b, "\t\treturn amsp_coop_launch(h_%s, w, gx, gy, gz, block);\n", k.Name)
		} else {
			fmt.Fprintf(&b, "\t\tLAUNCH(gx, h_%s(w));\n\t\treturn 0;\n", k.Name)
		}
	}
	b.WriteString("\t}\n\treturn -3;\n}\n\n#endif\n")
	return b.Bytes()
}

// wrapCall writes a call, its arguments wrapped onto continuation lines
// indented one tab more than the first, at about 120 columns.
func wrapCall(open string, args []string, close string) string {
	const width = 120
	var b strings.Builder
	b.WriteString(open)
	col := len(open) + 3 // a tab counts four
	for i, a := range args {
		sep := ""
		if i > 0 {
			sep = ", "
		}
		if i > 0 && col+len(sep)+len(a) > width {
			b.WriteString(",\n\t\t")
			col = 8
			sep = ""
		}
		b.WriteString(sep + a)
		col += len(sep) + len(a)
	}
	b.WriteString(close)
	return b.String()
}
