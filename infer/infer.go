// Package infer runs a model's forward graph on the CPU, one sequence at
// a time, in fp32: the logits of every position of a text (to check
// weights imported from another framework against its logits) and, with
// a KV cache, the logits of each next token (to sample from a trained
// checkpoint).
//
// It interprets the graph the language defines (ir.Graph, before any
// pass): the values the logits depend on, in definition order, each op on
// package kernels' CPU kernels. A value is either a constant (a param, or
// an op of constants only, such as a tied head's transpose, computed once)
// or per token: its shape is [batch, seq, ...] in the graph and [n, ...]
// here for the n tokens fed. Only attention and rope see positions; every
// other op is the same function of each token's row, so feeding a text
// piece by piece gives the logits of feeding it whole (to rounding: the
// cached attention sums in another order than the kernel's).
package infer

import (
	"fmt"
	"math"

	"amspc/ir"
	"amspc/kernels"
)

// Model is a graph and its params' values.
type Model struct {
	g       *ir.Graph
	consts  map[*ir.Value][]float32 // params and ops of params
	order   []*ir.Value             // per-token values to compute, in order
	dead    [][]*ir.Value           // dead[i]: values no op after order[i] reads
	tokens  *ir.Value               // the input the logits read
	logits  *ir.Value
	vocab   int
	attnOps []*ir.Op
}

// New prepares graph g with its params' values, which param gives by
// name (each of the param's shape, row-major, as a checkpoint holds it).
// The logits are the first operand of the cross_entropy that makes the
// loss; a graph whose logits need an op infer does not run is refused,
// saying which.
func New(g *ir.Graph, param func(name string) ([]float32, error)) (*Model, error) {
	loss := g.LossValue()
	if loss == nil || loss.Def == nil || loss.Def.Kind != ir.CrossEntropy {
		return nil, fmt.Errorf("model %s: its loss is not a cross_entropy of logits, so it has no logits to sample from", g.Name)
	}
	m := &Model{g: g, consts: map[*ir.Value][]float32{}, logits: loss.Def.Args[0]}
	need := map[*ir.Value]bool{m.logits: true}
	for i := len(g.Values) - 1; i >= 0; i-- {
		if v := g.Values[i]; need[v] && v.Def != nil {
			for _, a := range v.Def.Args {
				need[a] = true
			}
		}
	}
	perToken := map[*ir.Value]bool{}
	for _, v := range g.Values {
		if !need[v] {
			continue
		}
		switch {
		case v.Role == ir.Input:
			if v.DType != ir.I32 || len(v.Shape) != 2 {
				return nil, fmt.Errorf("%s: input %s is not a [batch, seq] array of token ids", v.Pos, v.Name)
			}
			if m.tokens != nil {
				return nil, fmt.Errorf("%s: the logits read two inputs (%s and %s); infer feeds one, the tokens", v.Pos, m.tokens.Name, v.Name)
			}
			m.tokens, perToken[v] = v, true
		case v.Def == nil: // a param
			x, err := param(v.Name)
			if err != nil {
				return nil, err
			}
			if int64(len(x)) != v.Shape.NumElements() {
				return nil, fmt.Errorf("param %s: %d values for shape %v", v.Name, len(x), v.Shape)
			}
			m.consts[v] = x
		default:
			op := v.Def
			if op.Out() != v {
				return nil, fmt.Errorf("%s: %v has several results; infer does not run it", op.Pos, op.Kind)
			}
			anyToken := false
			for _, a := range op.Args {
				anyToken = anyToken || perToken[a]
			}
			if !anyToken {
				x, err := m.constOp(op)
				if err != nil {
					return nil, err
				}
				m.consts[v] = x
				continue
			}
			if err := m.check(op); err != nil {
				return nil, err
			}
			perToken[v] = true
			m.order = append(m.order, v)
			if op.Kind == ir.Attention {
				m.attnOps = append(m.attnOps, op)
			}
		}
	}
	if m.tokens == nil || !perToken[m.logits] {
		return nil, fmt.Errorf("model %s: its logits do not depend on its input tokens", g.Name)
	}
	m.vocab = int(m.logits.Shape[len(m.logits.Shape)-1])
	lastUse := map[*ir.Value]int{}
	for i, v := range m.order {
		for _, a := range v.Def.Args {
			lastUse[a] = i
		}
	}
	m.dead = make([][]*ir.Value, len(m.order))
	for _, v := range m.order { // in order, so that dead lists are deterministic
		if i, ok := lastUse[v]; ok && v != m.logits {
			m.dead[i] = append(m.dead[i], v)
		}
	}
	return m, nil
}

// Vocab is the logits' width.
func (m *Model) Vocab() int { return m.vocab }

// MaxSeq is the graph's sequence length: the positions rope was trained
// on. Longer texts run, but past it the model is outside what it learned.
func (m *Model) MaxSeq() int { return int(m.tokens.Shape[1]) }

// constOp computes an op whose operands are all constants: a tied
// head's transpose of the embedding.
func (m *Model) constOp(op *ir.Op) ([]float32, error) {
	if op.Kind != ir.Transpose {
		return nil, fmt.Errorf("%s: %v of params only is not supported by infer yet", op.Pos, op.Kind)
	}
	s := op.Args[0].Shape
	out := make([]float32, s.NumElements())
	kernels.Transpose(out, m.consts[op.Args[0]], int(s[0]), int(s[1]))
	return out, nil
}

// check refuses an op on per-token values that infer does not run, and
// one whose per-token operand is not the [batch, seq, ...] it runs on.
func (m *Model) check(op *ir.Op) error {
	switch op.Kind {
	case ir.Embed, ir.MatMul, ir.RMSNorm, ir.LayerNorm, ir.RoPE, ir.Attention,
		ir.SiLU, ir.GELU, ir.GELUTanh, ir.Add, ir.Mul, ir.Scale:
	default:
		return fmt.Errorf("%s: %v is not supported by infer yet", op.Pos, op.Kind)
	}
	if op.Kind == ir.MatMul {
		if _, ok := m.consts[op.Args[1]]; !ok {
			return fmt.Errorf("%s: a product of two activations is not supported by infer yet", op.Pos)
		}
	}
	if op.Kind == ir.Attention && !attrOf(op, "causal").Bool {
		return fmt.Errorf("%s: attention without causal=true cannot be fed a token at a time", op.Pos)
	}
	if s := op.Out().Shape; len(s) < 2 || s[0] != m.tokens.Shape[0] || s[1] != m.tokens.Shape[1] {
		return fmt.Errorf("%s: %v's result %v is not [batch, seq, ...]", op.Pos, op.Kind, s)
	}
	return nil
}

// width is the elements of one token's row of per-token value v.
func width(v *ir.Value) int {
	w := int64(1)
	for _, d := range v.Shape[2:] {
		w *= d
	}
	return int(w)
}

func attrOf(op *ir.Op, name string) ir.AttrVal {
	v, _ := op.Attr(name)
	return v
}

// Session is one sequence fed a piece at a time: the keys and values of
// every attention for the positions fed so far.
type Session struct {
	m     *Model
	pos   int
	cache map[*ir.Op]*kvCache
}

type kvCache struct{ k, v []float32 } // [pos, kv_heads*hd], k after rope

// NewSession starts a sequence at position 0.
func (m *Model) NewSession() *Session {
	return &Session{m: m, cache: map[*ir.Op]*kvCache{}}
}

// Pos is the positions fed so far.
func (s *Session) Pos() int { return s.pos }

// Feed runs tokens at the session's next positions and returns their
// logits, [len(tokens), vocab] row-major. A token outside the vocabulary
// is an error naming it.
func (s *Session) Feed(tokens []int32) ([]float32, error) {
	n := len(tokens)
	if n == 0 {
		return nil, nil
	}
	m := s.m
	vals := map[*ir.Value][]float32{}
	get := func(v *ir.Value) []float32 {
		if x, ok := m.consts[v]; ok {
			return x
		}
		return vals[v]
	}
	for idx, v := range m.order {
		op := v.Def
		out := make([]float32, n*width(v))
		a := func(i int) []float32 { return get(op.Args[i]) }
		switch op.Kind {
		case ir.Embed:
			t := op.Args[1].Shape
			if err := kernels.Embed(out, tokens, a(1), int(t[0]), int(t[1])); err != nil {
				return nil, fmt.Errorf("token %v", err)
			}
		case ir.MatMul:
			b := op.Args[1].Shape
			kernels.MatMul(out, a(0), a(1), n, int(b[0]), int(b[1]))
		case ir.RMSNorm:
			w := a(1)
			kernels.RMSNorm(out, a(0), w, n, len(w), float32(attrOf(op, "eps").Float))
		case ir.LayerNorm:
			w := a(1)
			kernels.LayerNorm(out, a(0), w, a(2), n, len(w), float32(attrOf(op, "eps").Float))
		case ir.RoPE:
			heads := int(attrOf(op, "heads").Int)
			s.rope(out, a(0), n, heads, width(v)/heads, kernels.RoPEFreq(ir.RoPEScalingOf(op.Attrs)))
		case ir.Attention:
			s.attention(op, out, a(0), a(1), a(2), n, width(op.Args[0]))
		case ir.SiLU:
			kernels.SiLU(out, a(0))
		case ir.GELU:
			kernels.GELU(out, a(0))
		case ir.GELUTanh:
			kernels.GELUTanh(out, a(0))
		case ir.Add:
			kernels.Add(out, a(0), a(1))
		case ir.Mul:
			kernels.Mul(out, a(0), a(1))
		case ir.Scale:
			kernels.Scale(out, a(0), attrOf(op, "by").Float)
		}
		vals[v] = out
		for _, d := range m.dead[idx] { // a layer's activations die in the next
			delete(vals, d)
		}
	}
	s.pos += n
	return vals[m.logits], nil
}

// rope turns x [n, heads*hd] at positions pos... : the kernel's own
// rotation from position 0, and the same arithmetic (float64 angles and
// sines rounded once to float32) at later positions.
func (s *Session) rope(out, x []float32, n, heads, hd int, f kernels.RoPEFreq) {
	if s.pos == 0 {
		kernels.RoPE(out, x, 1, n, heads, hd, f)
		return
	}
	half := hd / 2
	freqs := f.Freqs(hd)
	cos, sin := make([]float32, half), make([]float32, half)
	for t := range n {
		p := float64(s.pos + t)
		for i, fr := range freqs {
			sn, c := math.Sincos(p * fr)
			cos[i], sin[i] = float32(c), float32(sn)
		}
		row := t * heads * hd
		for h := range heads {
			x1, x2 := x[row+h*hd:row+h*hd+half], x[row+h*hd+half:row+(h+1)*hd]
			o1, o2 := out[row+h*hd:row+h*hd+half], out[row+h*hd+half:row+(h+1)*hd]
			for i := range half {
				u, w := x1[i], x2[i]
				o1[i] = u*cos[i] - w*sin[i]
				o2[i] = w*cos[i] + u*sin[i]
			}
		}
	}
}

// attention appends k and v to op's cache and attends each of the n new
// queries to every position up to its own (causal). A first piece runs
// the training kernel on it whole; later ones sum in float64.
func (s *Session) attention(op *ir.Op, out, q, k, v []float32, n, qw int) {
	heads := int(attrOf(op, "heads").Int)
	kvHeads := int(attrOf(op, "kv_heads").Int)
	if kvHeads == 0 {
		kvHeads = heads
	}
	hd := qw / heads
	kw := kvHeads * hd
	c := s.cache[op]
	if c == nil {
		c = &kvCache{}
		s.cache[op] = c
	}
	c.k, c.v = append(c.k, k...), append(c.v, v...)
	if s.pos == 0 {
		kernels.Attention(out, make([]float32, heads*n), q, k, v, 1, n, heads, kvHeads, hd, true)
		return
	}
	scale := 1 / math.Sqrt(float64(hd))
	group := heads / kvHeads
	total := s.pos + n
	scores := make([]float64, total)
	acc := make([]float64, hd)
	for t := range n {
		last := s.pos + t // the query's position: keys 0..last
		for h := range heads {
			g := h / group
			qr := q[t*qw+h*hd : t*qw+(h+1)*hd]
			mx := math.Inf(-1)
			for j := 0; j <= last; j++ {
				kr := c.k[j*kw+g*hd : j*kw+(g+1)*hd]
				var dot float64
				for i, x := range qr {
					dot += float64(x) * float64(kr[i])
				}
				scores[j] = dot * scale
				mx = max(mx, scores[j])
			}
			clear(acc)
			var sum float64
			for j := 0; j <= last; j++ {
				e := math.Exp(scores[j] - mx)
				sum += e
				vr := c.v[j*kw+g*hd : j*kw+(g+1)*hd]
				for i, x := range vr {
					acc[i] += e * float64(x)
				}
			}
			o := out[t*qw+h*hd : t*qw+(h+1)*hd]
			for i := range o {
				o[i] = float32(acc[i] / sum)
			}
		}
	}
}
