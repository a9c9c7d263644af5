package engine

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"runtime"
	"sort"
	"strings"
	"sync"

	"amspc/codegen"
	"amspc/ir"
	"amspc/kernels"
)

// Data is a token stream cut into windows of SeqLen+1 tokens with stride
// SeqLen (NUMERICS.md): window j covers tokens [j*SeqLen, j*SeqLen+SeqLen];
// its first SeqLen tokens are inputs, its last SeqLen targets. Step t uses
// windows [t*B, (t+1)*B) of the global batch B (wrapping around at the end
// of the stream); micro-batch m of data-parallel rank r gets windows
// (m*dp + r)*mb ... + mb - 1.
type Data struct {
	Tokens     []int32
	SeqLen     int
	MicroBatch int // sequences per rank per micro-batch
	Global     int // sequences per step
}

// Windows is the number of whole windows in the stream.
func (d *Data) Windows() int {
	if len(d.Tokens) < d.SeqLen+1 {
		return 0
	}
	return (len(d.Tokens) - 1) / d.SeqLen
}

// fill writes micro-batch m of rank r at step t (0-based) into dst:
// MicroBatch windows of SeqLen tokens, shifted by shift (0 inputs, 1
// targets).
func (d *Data) fill(dst []int32, t, m, dp, r, shift int) {
	n := d.Windows()
	for i := 0; i < d.MicroBatch; i++ {
		w := (t*d.Global + (m*dp+r)*d.MicroBatch + i) % n
		copy(dst[i*d.SeqLen:(i+1)*d.SeqLen], d.Tokens[w*d.SeqLen+shift:w*d.SeqLen+shift+d.SeqLen])
	}
}

// streamLoader is a backend that writes a step's input in a stream's
// order without waiting for the streams (the device backend): fill
// writes step's input into dst; a backend that replays the step as a
// graph calls it again for each later step.
type streamLoader interface {
	LoadInput(s int, m Mem, step int, fill func(step int, dst []int32)) error
}

func (k *rank) load(s int, in *ir.Instr) error {
	for _, inp := range k.p.Inputs {
		if inp.Buf == in.Buf {
			m := k.m(in.Buf)
			if m.N != int64(k.data.MicroBatch*k.data.SeqLen) {
				return fmt.Errorf("input %s holds %d tokens, the data gives %d x %d", k.p.Buffers[in.Buf].Name, m.N, k.data.MicroBatch, k.data.SeqLen)
			}
			// The ranks of a tensor-parallel group train the same
			// sequences: windows go by data-parallel replica.
			r, ranks := replicaOf(k.b, k.r)
			micro, shift := int(in.Micro), int(inp.Shift)
			fill := func(step int, dst []int32) { k.data.fill(dst, step-1, micro, ranks, r, shift) }
			if dst := m.HostInts(); dst != nil {
				fill(k.step, dst)
				return nil
			}
			if l, ok := k.be.(streamLoader); ok {
				return l.LoadInput(s, m, k.step, fill)
			}
			dst := make([]int32, m.N)
			fill(k.step, dst)
			return k.be.WriteInts(m, dst)
		}
	}
	return fmt.Errorf("load of %s, which is not an input", k.p.Buffers[in.Buf].Name)
}

// InitParam fills a param's initial values: ones, zeros, or normal(0, std)
// from a PCG generator seeded with (seed, FNV-1a of the param's name), so
// the values depend only on the seed and the name, never on the plan or
// the rank count. Normals come from Box-Muller in float64, rounded to
// float32.
func InitParam(dst []float32, init ir.Init, seed uint64, name string) {
	switch init.Kind {
	case ir.InitOnes:
		for i := range dst {
			dst[i] = 1
		}
		return
	case ir.InitZeros:
		clear(dst)
		return
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	rng := rand.New(rand.NewPCG(seed, h.Sum64()))
	for i := 0; i < len(dst); i += 2 {
		u1 := 1 - rng.Float64() // (0, 1]
		u2 := rng.Float64()
		r := math.Sqrt(-2 * math.Log(u1))
		dst[i] = float32(init.Std * r * math.Cos(2*math.Pi*u2))
		if i+1 < len(dst) {
			dst[i+1] = float32(init.Std * r * math.Sin(2*math.Pi*u2))
		}
	}
}

// layoutFlat is a layout's full initial flat buffer (padding zero).
func layoutFlat(lay *ir.Layout, seed uint64) []float32 { return layoutPart(lay, seed, 0, 1) }

// layoutPart is layoutFlat for the ranks at tensor-parallel position tp
// of tensor parallelism of degree parts: a param a rank holds a part of
// (Slot.Split) is drawn whole, as on one rank, and the part cut from it,
// so every plan starts from the same weights.
func layoutPart(lay *ir.Layout, seed uint64, tp, parts int) []float32 {
	flat := make([]float32, lay.Padded)
	for _, s := range lay.Params {
		dst := flat[s.Offset : s.Offset+s.Elems]
		if s.Split < 0 || len(s.Shape) == 0 || parts <= 1 {
			InitParam(dst, s.Init, seed, s.Name)
			continue
		}
		whole := make([]float32, s.Elems*int64(parts))
		InitParam(whole, s.Init, seed, s.Name)
		CutPart(dst, whole, s.Shape, s.Split, tp, parts)
	}
	return flat
}

// CutPart copies into dst part i of parts of whole, a tensor of shape
// split along dimension d.
func CutPart(dst, whole []float32, shape []int64, d, i, parts int) {
	movePart(dst, whole, shape, d, i, parts, true)
}

// movePart moves part i of n of a tensor whole of shape, split along
// dimension d, between whole and part (the part's elements in order):
// out of whole when cut, else back into it.
func movePart(part, whole []float32, shape []int64, d, i, n int, cut bool) {
	pp := PiecePart{Dim: d, Index: i, Of: n} // a checkpoint piece's runs
	pp.runs(shape, 0, int64(len(part)), true, func(w, p, k int64) {
		if cut {
			copy(part[p:p+k], whole[w:w+k])
		} else {
			copy(whole[w:w+k], part[p:p+k])
		}
	})
}

// initialFlats computes every layout's full initial flat buffer for the
// ranks at tensor-parallel position tp of b, once for all the ranks of
// this process that share it.
func initialFlats(b *codegen.Bundle, p *ir.Program, seed uint64, tp int) [][]float32 {
	flats := make([][]float32, len(p.Layouts))
	for li := range p.Layouts {
		flats[li] = layoutPart(&p.Layouts[li], seed, tp, max(b.Tensor, 1))
	}
	return flats
}

// tpPosition is rank r's position in its tensor-parallel group (the
// group is a node's consecutive ranks), 0 without tensor parallelism.
func tpPosition(b *codegen.Bundle, r int) int {
	return r % b.Topo.GPUsPerNode % max(b.Tensor, 1)
}

// replicaOf is the data-parallel replica rank r belongs to and how many
// there are: the ranks of a tensor-parallel group train the same
// sequences.
func replicaOf(b *codegen.Bundle, r int) (index, count int) {
	t, gpn := max(b.Tensor, 1), b.Topo.GPUsPerNode
	return r/gpn*(gpn/t) + r%gpn/t, b.Topo.Ranks() / t
}

// initShards fills a rank's persistent shards from the full initial
// params (flats, computed once per process): P's shard (on bf16 plans
// the rounding of the master, as Write stores it), the fp32 master's
// os-slice; m and v stay zero.
func (k *rank) initShards(flats [][]float32) error {
	for li, lay := range k.p.Layouts {
		flat := flats[li]
		sp := int64(lay.PShard.Size())
		chunk := lay.Padded / sp
		pOff := int64(lay.PShard.Index(k.topo, k.r)) * chunk
		if err := k.write(lay.P, flat[pOff:pOff+chunk]); err != nil {
			return err
		}
		if lay.Master >= 0 {
			n := k.p.Buffers[lay.Master].Elems
			oOff := pOff + int64(lay.OSShard.Index(k.topo, k.r))*n
			if err := k.write(lay.Master, flat[oOff:oOff+n]); err != nil {
				return err
			}
		}
	}
	return nil
}

// Run executes steps of a bundle on ranks that are goroutines of this
// process and returns the loss of every step: the mean over every token
// of the global batch.
type Run struct {
	Bundle *codegen.Bundle
	Data   *Data
	Seed   uint64
	// World is the ranks the run spans and which of them this process
	// runs; nil: a LocalWorld of every rank.
	World World
	// NewBackend gives each of this process's ranks its backend; nil:
	// the CPU's.
	NewBackend func(rank int) (Backend, error)
	// Trace, if set, records the instructions of the steps it is armed
	// for (trace.go); CPU ranks only.
	Trace *Trace
	// StandIn, if set, runs one rank alone with stand-in collectives
	// (standin.go); World must be nil.
	StandIn *StandIn
	// Horizon is the step the learning rate's schedule decays to its end
	// at: the run's last step, counting a resumed checkpoint's (0: the
	// bundle's train steps).
	Horizon int
	ranks   []*rank // this process's ranks, in World.Local order
	step    int
}

// GradNorm is the last step's gradient norm where the plan clips it
// (train's clip_grad_norm; every rank computes the same), and whether it
// does.
func (r *Run) GradNorm() (float64, bool) {
	if len(r.ranks) == 0 || !r.clips() {
		return 0, false
	}
	return r.ranks[0].gradNorm, true
}

// clips says whether the plan clips its gradients.
func (r *Run) clips() bool {
	for _, ins := range r.Bundle.Template(0).Streams {
		for i := range ins {
			if ins[i].Op == ir.Kernel && ins[i].Kern == ir.ClipGrad {
				return true
			}
		}
	}
	return false
}

// LR is the learning rate of step (from 1): the optimizer's lr on the
// bundle's schedule, ending its decay at the run's horizon; 0 for a
// bundle without an optimizer step.
func (r *Run) LR(step int) float64 {
	horizon := r.Horizon
	if horizon <= 0 {
		horizon = int(r.Bundle.Train.Steps)
	}
	for _, ins := range r.Bundle.Template(0).Streams {
		for i := range ins {
			if in := &ins[i]; in.Op == ir.Kernel && (in.Kern == ir.AdamWStep || in.Kern == ir.AdamWCopy) {
				return r.Bundle.Train.Schedule.LR(attr(in, "lr").Float, int64(step), int64(horizon))
			}
		}
	}
	return 0
}

// Start prepares every rank: buffers, initial params.
func (r *Run) Start() error {
	if err := r.Check(); err != nil {
		return err
	}
	n := r.Bundle.Topo.Ranks()
	if r.StandIn != nil {
		if err := r.checkStandIn(); err != nil {
			return err
		}
		r.World = newStandInWorld(n, r.StandIn.Rank)
	}
	if r.World == nil {
		r.World = NewLocalWorld(n)
	}
	if r.World.Size() != n {
		return fmt.Errorf("the plan has %d ranks, the world %d", n, r.World.Size())
	}
	local := r.World.Local()
	if len(local) != 1 && len(local) != n {
		return fmt.Errorf("this process runs %d of %d ranks; a process runs every rank or one", len(local), n)
	}
	// The ranks of this process compute at once: each kernel call gets
	// their share of the cores.
	gate := shareCores(len(local))
	// Every template has the same layouts (params, offsets, padding), as
	// checkpoints also rely on.
	flats := map[int][][]float32{} // by tensor-parallel position
	for _, i := range local {
		var be Backend
		if r.NewBackend != nil {
			var err error
			if be, err = r.NewBackend(i); err != nil {
				return err
			}
		}
		k, err := newRank(r.Bundle, i, r.World.Comm(i), r.Data, be)
		if err != nil {
			return fmt.Errorf("rank %d: %w", i, err)
		}
		k.standIn = r.StandIn
		k.horizon = r.Horizon
		if k.horizon <= 0 {
			k.horizon = int(r.Bundle.Train.Steps)
		}
		if k.host {
			// A device's work runs on the device: the gate shares the
			// cores among CPU ranks' kernels, and a device rank holding
			// it through a transfer would stall the others' issuing.
			k.gate = gate
		}
		if r.Trace != nil {
			if err := r.Trace.attach(k); err != nil {
				return fmt.Errorf("rank %d: %w", i, err)
			}
		}
		tp := tpPosition(r.Bundle, i)
		if flats[tp] == nil {
			flats[tp] = initialFlats(r.Bundle, r.Bundle.Template(local[0]), r.Seed, tp)
		}
		if err := k.initShards(flats[tp]); err != nil {
			return fmt.Errorf("rank %d: %w", i, err)
		}
		r.ranks = append(r.ranks, k)
	}
	return deviceCollectives(r.ranks)
}

// shareCores divides this process's cores among the n ranks it runs, as a
// step and a profile's measurement both do: each kernel call gets
// GOMAXPROCS/n workers (at least 1), and when n exceeds the cores, the
// returned gate lets only as many ranks compute at once (else nil).
func shareCores(n int) chan struct{} {
	cores := runtime.GOMAXPROCS(0)
	kernels.SetWorkers(max(1, cores/n))
	if n > cores {
		return make(chan struct{}, cores)
	}
	return nil
}

// spansAll reports whether this process runs every rank of the run (else
// it runs one, and agrees with the other processes over the control
// stream).
func (r *Run) spansAll() bool { return len(r.ranks) == r.World.Size() }

// alone says whether this process has no other process to agree with:
// it runs every rank, or it is a stand-in run.
func (r *Run) alone() bool { return r.spansAll() || r.StandIn != nil }

// Check finds what would make Start fail, without allocating anything:
// a malformed bundle, a dtype or input the CPU backend does not support,
// data shorter than one window.
func (r *Run) Check() error {
	b := r.Bundle
	// A bundle that did not come from Decode is checked here, so that
	// kernels can index buffers and read attributes without checks.
	if err := codegen.Validate(b); err != nil {
		return err
	}

	for _, p := range b.Templates {
		for _, buf := range p.Buffers {
			if buf.DType == ir.F16 {
				return fmt.Errorf("the CPU backend has no fp16 yet; %s is %v (use precision = bf16 or fp32)", buf.Name, buf.DType)
			}
		}
	}
	for _, p := range b.Templates {
		for _, in := range p.Inputs {
			buf := p.Buffers[in.Buf]
			if buf.DType != ir.I32 || int(buf.Elems) != r.Data.MicroBatch*r.Data.SeqLen {
				return fmt.Errorf("input %s is %v%v: amspc run feeds token windows (i32[%d,%d]) only; other inputs are not supported yet",
					buf.Name, buf.DType, ir.Shape(buf.Shape), r.Data.MicroBatch, r.Data.SeqLen)
			}
		}
	}
	if r.Data.Windows() < 1 {
		return fmt.Errorf("the data has %d tokens, fewer than one window of %d", len(r.Data.Tokens), r.Data.SeqLen+1)
	}
	return nil
}

// Step runs one training step on every rank and returns its loss.
func (r *Run) Step() (float64, error) {
	r.step++
	for _, k := range r.ranks {
		k.step = r.step
		k.losses = k.losses[:0]
	}
	if err := r.onRanks(func(k *rank) error { return k.runStep(r.World.Done()) }); err != nil {
		return 0, err
	}
	return r.meanLoss()
}

// onRanks runs f on every rank of this process at once and returns the
// first real failure, not the ranks it stopped.
func (r *Run) onRanks(f func(k *rank) error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(r.ranks))
	for i, k := range r.ranks {
		wg.Go(func() { errs[i] = f(k) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && err != ErrStopped {
			return err
		}
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// meanLoss is the step's loss: the mean of every micro-batch mean on
// every rank (each covers the same number of tokens), summed in rank
// order. A process that does not run every rank gathers the others'
// losses first (their bits, over the world's control stream), so the
// sum is the same as on local ranks.
func (r *Run) meanLoss() (float64, error) {
	var all [][]float64
	if r.alone() {
		// (A stand-in run's one rank: its losses mean nothing.)
		for _, k := range r.ranks {
			all = append(all, k.losses)
		}
	} else {
		var err error
		if all, err = r.gatherLosses(); err != nil {
			return 0, err
		}
	}
	var sum float64
	var count int
	for _, ls := range all {
		for _, l := range ls {
			sum += l
			count++
		}
	}
	return sum / float64(count), nil
}

// AgreeStop reports whether any process of the run wants to stop (a
// signal arrived): on local ranks stop itself, across processes any
// process's stop, agreed over the control stream, so that every process
// stops at the same step boundary.
func (r *Run) AgreeStop(stop bool) (bool, error) {
	if r.alone() {
		return stop, nil
	}
	flag := float32(0)
	if stop {
		flag = 1
	}
	all, err := r.controlGather([]float32{flag})
	if err != nil {
		return false, err
	}
	for _, f := range all {
		if f != 0 {
			return true, nil
		}
	}
	return false, nil
}

// controlGather all-gathers in, of the same length on every process,
// over every rank of the world on ControlStream: a process that runs
// one rank exchanges what only it has with the others.
func (r *Run) controlGather(in []float32) ([]float32, error) {
	n := r.World.Size()
	out := make([]float32, len(in)*n)
	if err := r.ranks[0].comm.AllGather(ControlStream, allRanks(n), in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// Words travel over the control stream as float32 bit patterns, which
// collectives copy without arithmetic.
func wordsToFloats(w []uint32) []float32 {
	out := make([]float32, len(w))
	for i, x := range w {
		out[i] = math.Float32frombits(x)
	}
	return out
}

// controlWords all-gathers words (the same count from every process):
// process p's words at [p*len(w), (p+1)*len(w)); across processes each
// runs one rank, so process p is rank p.
func (r *Run) controlWords(w []uint32) ([]uint32, error) {
	all, err := r.controlGather(wordsToFloats(w))
	if err != nil {
		return nil, err
	}
	out := make([]uint32, len(all))
	for i, f := range all {
		out[i] = math.Float32bits(f)
	}
	return out, nil
}

// agreeWord returns rank 0's w on every process.
func (r *Run) agreeWord(w uint32) (uint32, error) {
	if r.alone() {
		return w, nil
	}
	all, err := r.controlWords([]uint32{w})
	if err != nil {
		return 0, err
	}
	return all[0], nil
}

// agreeMessage is how many bytes of an error agree carries.
const agreeMessage = 240

// agree makes every process of the run return the same error: nil when
// none failed, else the lowest failing rank's, naming it (its first
// agreeMessage bytes). A process that runs every rank has nobody to agree
// with and returns err.
func (r *Run) agree(err error) error {
	if r.alone() {
		return err
	}
	const words = 1 + agreeMessage/4
	in := make([]uint32, words)
	if err != nil {
		msg := []byte(err.Error())
		if len(msg) > agreeMessage {
			msg = append(msg[:agreeMessage-3], "..."...)
		}
		in[0] = uint32(len(msg)) + 1
		var buf [agreeMessage]byte
		copy(buf[:], msg)
		for i := range agreeMessage / 4 {
			in[1+i] = binary.LittleEndian.Uint32(buf[4*i:])
		}
	}
	all, gerr := r.controlWords(in)
	if gerr != nil {
		return gerr
	}
	for p := 0; p < len(all)/words; p++ {
		w := all[p*words : (p+1)*words]
		if w[0] == 0 {
			continue
		}
		var buf [agreeMessage]byte
		for i := range agreeMessage / 4 {
			binary.LittleEndian.PutUint32(buf[4*i:], w[1+i])
		}
		msg := string(buf[:min(int(w[0]-1), agreeMessage)])
		if strings.HasPrefix(msg, fmt.Sprintf("rank %d: ", p)) {
			return errors.New(msg)
		}
		return fmt.Errorf("rank %d: %s", p, msg)
	}
	return nil
}

// gatherFiles all-gathers every rank's checkpoint file (its size and
// SHA-256; size 0 when the rank wrote none) in rank order.
func (r *Run) gatherFiles(own ManifestFile, sub string) ([]ManifestFile, error) {
	in := make([]uint32, 10)
	in[0], in[1] = uint32(own.Bytes), uint32(own.Bytes>>32)
	if own.SHA256 != "" {
		sum, err := hex.DecodeString(own.SHA256)
		if err != nil {
			return nil, err
		}
		for i := range 8 {
			in[2+i] = binary.LittleEndian.Uint32(sum[4*i:])
		}
	}
	all, err := r.controlWords(in)
	if err != nil {
		return nil, err
	}
	out := make([]ManifestFile, len(all)/10)
	for q := range out {
		w := all[10*q : 10*q+10]
		bytes := int64(w[0]) | int64(w[1])<<32
		if bytes == 0 {
			continue
		}
		sum := make([]byte, 32)
		for i := range 8 {
			binary.LittleEndian.PutUint32(sum[4*i:], w[2+i])
		}
		out[q] = ManifestFile{Path: shardFile(sub, q), Bytes: bytes, SHA256: hex.EncodeToString(sum)}
	}
	return out, nil
}

// gatherLosses all-gathers every rank's micro-batch losses over the
// world, as float64 bits carried in pairs of float32 words, which
// collectives copy without arithmetic.
func (r *Run) gatherLosses() ([][]float64, error) {
	n := r.World.Size()
	losses := r.ranks[0].losses
	per := len(losses)
	in := make([]float32, 2*per)
	for i, l := range losses {
		b := math.Float64bits(l)
		in[2*i] = math.Float32frombits(uint32(b))
		in[2*i+1] = math.Float32frombits(uint32(b >> 32))
	}
	words, err := r.controlGather(in)
	if err != nil {
		return nil, err
	}
	out := make([][]float64, n)
	for rk := range out {
		out[rk] = make([]float64, per)
		for i := range per {
			lo := math.Float32bits(words[2*(rk*per+i)])
			hi := math.Float32bits(words[2*(rk*per+i)+1])
			out[rk][i] = math.Float64frombits(uint64(hi)<<32 | uint64(lo))
		}
	}
	return out, nil
}

// Steps is the number of optimizer steps taken (including those before a
// resumed checkpoint).
func (r *Run) Steps() int { return r.step }

// Timings is rank r's measured time per kind of instruction, the most
// expensive first (ties by name).
func (r *Run) Timings(rank int) []Timing {
	k := r.local(rank)
	if k == nil {
		return nil
	}
	k.timeMu.Lock()
	defer k.timeMu.Unlock()
	var out []Timing
	for _, t := range k.timing {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Seconds != out[j].Seconds {
			return out[i].Seconds > out[j].Seconds
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// local is this process's rank number rank, or nil.
func (r *Run) local(rank int) *rank {
	for _, k := range r.ranks {
		if k.r == rank {
			return k
		}
	}
	return nil
}

// PeakBytes is the largest live buffer total so far of each rank this
// process runs.
func (r *Run) PeakBytes() []int64 {
	out := make([]int64, len(r.ranks))
	for i, k := range r.ranks {
		out[i] = k.peak
	}
	return out
}

// CheckVocab refuses data whose largest token id does not fit a table it
// indexes: an embed's table, or the classes of a cross_entropy whose
// targets come from the data. amspc run calls it before any work, so the
// error names the op's source position instead of a rank's failing step.
func CheckVocab(b *codegen.Bundle, tokens []int32) error {
	var top int32 = -1
	for _, t := range tokens {
		top = max(top, t)
	}
	for ti := range b.Templates {
		p := &b.Templates[ti]
		input := map[int32]bool{}
		for _, in := range p.Inputs {
			input[in.Buf] = true
		}
		for _, in := range p.Streams[ir.Compute] {
			if in.Op != ir.Kernel {
				continue
			}
			d := in.Kern.Info().IDs
			if d == nil || !input[in.Args[d.Arg]] {
				continue
			}
			ids := in.Args[d.Arg]
			args := make([][]int64, len(in.Args))
			for i, a := range in.Args {
				args[i] = p.Buffers[a].Shape
			}
			var result []int64
			if len(in.Outs) > 0 {
				result = p.Buffers[in.Outs[0]].Shape
			}
			if n := d.Bound(args, result); int64(top) >= n {
				return fmt.Errorf("%s: %v of %s: the data holds token id %d, the model has %d classes (a vocab of at least %d is needed)",
					in.Pos, in.Kern, p.Buffers[ids].Name, top, n, top+1)
			}
		}
	}
	return nil
}
