//go:build cgo

package hostc

// Collectives among the simulated GPUs of one process (issue 29): the
// devices of a world (NewWorld, or the kind "sim" opened with
// --collectives device) implement engine.DeviceCollectives, with the
// bits of the engine's host Comm behind memComm (engine/comm.go,
// engine/backend.go): sums are left folds in group order in fp32,
// ((x0+x1)+x2)+..., bf16 values widened exactly before and the sums
// rounded to nearest even after (a NaN stays one); gathers and
// broadcasts copy the stored bits (memComm's widen-and-round gives the
// same bits but for a signalling bf16 NaN, which it quiets).
//
// Communicators. Split numbers a device's calls 0, 1, ...; the k-th
// Split of every member of a group names one communicator, found by
// (k, members) in the world: Split does not wait for the other members
// (every member calls it, the contract says), but checks what they
// said: two ranks whose k-th groups name each other must give the same
// list, else both communicators fail every call.
//
// Rendezvous. Collective enqueues an item on stream s and registers it
// as the member's side of the rendezvous (communicator, call number):
// the k-th call of a member on a communicator meets every member's
// k-th. Registration checks the call (kind, dtype, count, root,
// aliasing) and that it agrees with the first member's; a bad call
// fails the rendezvous for every member, so none waits for it. When the
// stream reaches the item, the member joins; the member that joins
// last computes the whole collective on every member's memory (host
// pointers: each member's stream has done the work before its item and
// runs nothing after it until the rendezvous ends), then ends every
// member's item. Abort fails every rendezvous not yet computing, and
// every later call. A member whose stream has failed still joins, as a
// failure, so the others fail rather than wait; errors stick to the
// stream as other failures do (*engine.CommError, wrapping
// engine.ErrCommMismatch, ErrCommInvalid or ErrCommAborted).
//
// The modes.
//
//   - Streams at once (the default): the stream's worker joins and
//     waits at the rendezvous, holding nothing: the device's other
//     streams go on; a transfer or Sync waits for the collective as for
//     any work enqueued before it (so a transfer's fence can deadlock
//     ranks whose collectives cross it, as cuMemcpy on the legacy
//     stream would on GPUs).
//   - Sequential: Collective joins in the caller and returns when the
//     collective is done, as every operation does; the caller waits
//     without the device's lock, so the rank's other goroutines go on
//     (the engine issues each stream from its own goroutine), and the
//     member that computes holds every member's lock (in rank order)
//     while it does.
//   - HoldBack: the world's held-back items run only when a transfer or
//     Sync of one of its devices forces them, and then one at a time by
//     one caller for the whole world (its "drain"). Joining does not
//     wait: a joined item stays at the head of its stream, not ready,
//     and the drain runs other items. When the device it forces has
//     nothing it can run but a collective waiting for other members,
//     the drain forces those members' devices too, as if a transfer had
//     been enqueued on each right after its member's item (every item
//     enqueued on it before then), and so on transitively; it prefers
//     the forced device's items, each device's latest first (HoldBack's
//     order). A member whose call is not enqueued yet, or a device
//     fenced by a transfer under way, is waited for (the drain lets
//     another caller drain meanwhile). A drain that can make no progress
//     and waits for nothing is a deadlock of the program's collectives
//     (ranks issuing them in different orders): those rendezvous fail
//     rather than hang. Which items run when now also depends on when
//     the other ranks' hosts enqueue them; each device still runs its
//     own items latest first wherever its events allow, and DropWaits
//     reorders as before.

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"amspc/engine"
	"amspc/ir"
	"amspc/kernels"
)

// NewWorld is n devices that run collectives among themselves (rank r's
// device is the r-th), each made with opts as NewDevice makes it.
func NewWorld(n int, opts ...Option) []*Device {
	if n < 1 {
		panic(fmt.Sprintf("hostc: NewWorld(%d)", n))
	}
	w := newWorld(n)
	devs := make([]*Device, n)
	for r := range devs {
		devs[r] = w.device(r, opts...)
	}
	return devs
}

// Rank is the device's rank in its world, or -1 outside one.
func (d *Device) Rank() int {
	if d.coll == nil {
		return -1
	}
	return d.coll.rank
}

// world is the devices of one process that run collectives among
// themselves.
type world struct {
	size int // the number of ranks; 0: not known (ranks are only >= 0)

	mu sync.Mutex
	// cond (on mu) is what a held-back drain waits on: for gen to change
	// (gen counts what may let a drain go on: an enqueued collective, a
	// lifted fence, an ended rendezvous, an abort), and for busy (a drain
	// runs the world's held-back items) to clear.
	cond sync.Cond
	gen  uint64
	busy bool
	err  error // the first Abort's, wrapping engine.ErrCommAborted
	// splits holds, by Split number, each rank's members; comms the
	// communicators by Split number and members.
	splits []map[int][]int
	comms  map[string]*comm
}

// devColl is a device's part in its world.
type devColl struct {
	w    *world
	rank int
	// Under w.mu, by communicator index: the communicator (nil: a Split
	// that failed), this rank's index among its members, and the number
	// of this rank's next call on it.
	comms []*comm
	idx   []int
	calls []uint64
}

// A comm is one communicator of the world.
type comm struct {
	members []int
	err     error // an inconsistent Split's: every call on it fails
	// ops are its rendezvous not yet over, or over but not yet reached
	// by every member's call, by call number.
	ops map[uint64]*rendezvous
}

// A rendezvous is the k-th call of every member of a communicator.
type rendezvous struct {
	c     *comm
	seq   uint64
	calls []*member // by member index; nil until that member's call is enqueued
	first *member   // the first enqueued: the call the others must match
	enq   int       // calls enqueued
	// joined counts the members whose streams have reached their
	// items; started says the last of them computes it; finished that
	// it is over, err that it failed.
	joined            int
	started, finished bool
	err               error
}

// A member is one member's call of a rendezvous.
type member struct {
	d   *Device
	st  *stream // its stream, and its item there (nil on a Sequential device)
	it  *item
	s   int
	idx int // its index among the communicator's members
	c   engine.DeviceColl
	op  *rendezvous
	// joined: its stream has reached it; done: it is over, err how it
	// failed; wake is closed once it is done (not held back).
	joined, done bool
	err          error
	wake         chan struct{}
}

func newWorld(size int) *world {
	w := &world{size: size, comms: map[string]*comm{}}
	w.cond.L = &w.mu
	return w
}

// device is rank's device in w.
func (w *world) device(rank int, opts ...Option) *Device {
	d := NewDevice(opts...)
	d.coll = &devColl{w: w, rank: rank}
	return d
}

// errNoWorld is the error of a device outside a world.
var errNoWorld = errors.New("hostc: this simulated GPU belongs to no world of devices, so it runs no collectives (its collectives go through the host: --collectives ordered); open it with --collectives device, or make it with NewWorld")

// Split makes a communicator over members (engine.DeviceCollectives).
func (d *Device) Split(members []int) (int, error) {
	dc := d.coll
	if dc == nil {
		return -1, errNoWorld
	}
	w := dc.w
	w.mu.Lock()
	k, done, err := w.split(dc, members)
	w.mu.Unlock()
	w.complete(done)
	return k, err
}

// split is Split under mu: the members to complete come back too.
func (w *world) split(dc *devColl, members []int) (int, []*member, error) {
	k := len(dc.comms)
	dc.comms = append(dc.comms, nil)
	dc.idx = append(dc.idx, -1)
	dc.calls = append(dc.calls, 0)
	if w.err != nil {
		return -1, nil, fmt.Errorf("hostc: rank %d: split %d of %v: %w", dc.rank, k, members, w.err)
	}
	idx, err := w.index(members, dc.rank)
	if err != nil {
		return -1, nil, fmt.Errorf("hostc: rank %d: split %d of %v: %w", dc.rank, k, members, err)
	}
	for len(w.splits) <= k {
		w.splits = append(w.splits, map[int][]int{})
	}
	c := w.comm(k, members)
	dc.comms[k], dc.idx[k] = c, idx
	w.splits[k][dc.rank] = slices.Clone(members)
	// The ranks this one names, and those that name it, must give the
	// same list: else both communicators fail every call (their members
	// may have called already), and so does this Split.
	for r, g := range w.splits[k] {
		if (slices.Contains(members, r) || slices.Contains(g, dc.rank)) && !slices.Equal(g, members) {
			bad := fmt.Errorf("%w: split %d: rank %d gave members %v, rank %d gave %v", engine.ErrCommMismatch, k, dc.rank, members, r, g)
			done := append(w.failComm(w.comm(k, g), bad), w.failComm(c, bad)...)
			return -1, done, fmt.Errorf("hostc: %w", bad)
		}
	}
	return k, nil, nil
}

// index checks a member list (ranks of the world, none twice, rank
// among them) and gives rank's index in it.
func (w *world) index(members []int, rank int) (int, error) {
	if len(members) == 0 {
		return -1, fmt.Errorf("%w: no members", engine.ErrCommInvalid)
	}
	idx := -1
	for i, r := range members {
		if r < 0 || w.size > 0 && r >= w.size {
			return -1, fmt.Errorf("%w: rank %d is not one of the world's %d", engine.ErrCommInvalid, r, w.size)
		}
		if slices.Index(members, r) != i {
			return -1, fmt.Errorf("%w: rank %d repeated", engine.ErrCommInvalid, r)
		}
		if r == rank {
			idx = i
		}
	}
	if idx < 0 {
		return -1, fmt.Errorf("%w: rank %d is not a member", engine.ErrCommInvalid, rank)
	}
	return idx, nil
}

// comm is the communicator of Split number k over members, made on
// first use. Callers hold mu.
func (w *world) comm(k int, members []int) *comm {
	var b strings.Builder
	b.WriteString(strconv.Itoa(k))
	for _, r := range members {
		b.WriteByte(',')
		b.WriteString(strconv.Itoa(r))
	}
	key := b.String()
	c := w.comms[key]
	if c == nil {
		c = &comm{members: slices.Clone(members), ops: map[uint64]*rendezvous{}}
		w.comms[key] = c
	}
	return c
}

// failComm fails c and its rendezvous, returning the members to
// complete. Callers hold mu.
func (w *world) failComm(c *comm, err error) []*member {
	if c.err == nil {
		c.err = err
	}
	var ms []*member
	for _, op := range c.ops {
		ms = append(ms, w.fail(op, err)...)
	}
	return ms
}

// Collective enqueues c on stream s (engine.DeviceCollectives).
func (d *Device) Collective(s int, c *engine.DeviceColl) error {
	dc := d.coll
	if dc == nil {
		return errNoWorld
	}
	if s < 0 {
		return fmt.Errorf("hostc: stream %d", s)
	}
	cc := *c
	if d.capturing(capOp{s: s, kind: capColl, coll: &cc}) {
		return nil
	}
	w := dc.w
	if d.sequential {
		w.mu.Lock()
		m, done, err := w.register(d, nil, nil, s, c, nil)
		w.mu.Unlock()
		w.complete(done)
		if err != nil {
			return err
		}
		return d.joinColl(m, nil)
	}
	d.q.Lock()
	st, failed := d.stream(s)
	it := &item{}
	w.mu.Lock()
	m, done, err := w.register(d, st, it, s, c, failed)
	if err == nil && failed == nil {
		it.coll = m
		d.push(s, st, it)
		w.gen++ // a held-back drain may wait for this call
		w.cond.Broadcast()
	}
	w.mu.Unlock()
	d.q.Unlock()
	w.complete(done)
	if failed != nil {
		return failed
	}
	return err
}

// register makes d's call c on stream s the member's side of its
// rendezvous (failed: the error its stream has had, which fails the
// rendezvous instead). An error means the call names no rendezvous (no
// such communicator, the world aborted); a call that is wrong otherwise
// fails its rendezvous, the members to complete coming back. Callers
// hold mu (and d's q, when it has streams).
func (w *world) register(d *Device, st *stream, it *item, s int, c *engine.DeviceColl, failed error) (*member, []*member, error) {
	dc := d.coll
	if w.err != nil {
		return nil, nil, fmt.Errorf("hostc: rank %d: %s: %w", dc.rank, callString(c), w.err)
	}
	if c.Comm < 0 || c.Comm >= len(dc.comms) {
		return nil, nil, fmt.Errorf("hostc: rank %d: %s on communicator %d, which Split did not make", dc.rank, callString(c), c.Comm)
	}
	cm := dc.comms[c.Comm]
	if cm == nil {
		return nil, nil, fmt.Errorf("hostc: rank %d: %s on communicator %d, whose Split failed", dc.rank, callString(c), c.Comm)
	}
	seq := dc.calls[c.Comm]
	dc.calls[c.Comm]++
	op := cm.ops[seq]
	if op == nil {
		op = &rendezvous{c: cm, seq: seq, calls: make([]*member, len(cm.members))}
		cm.ops[seq] = op
	}
	m := &member{d: d, st: st, it: it, s: s, idx: dc.idx[c.Comm], c: *c, op: op}
	if !d.holdBack {
		m.wake = make(chan struct{})
	}
	op.calls[m.idx] = m
	op.enq++
	var done []*member
	if op.first == nil {
		op.first = m
	}
	if !op.started && op.err == nil {
		var bad error
		switch {
		case cm.err != nil:
			bad = cm.err
		case failed != nil:
			bad = fmt.Errorf("rank %d's stream %d failed before this call: %w", dc.rank, s, failed)
		default:
			bad = m.check(len(cm.members))
		}
		if bad == nil && !op.first.agrees(m) {
			f := op.first
			bad = fmt.Errorf("%w: rank %d called %s, rank %d called %s", engine.ErrCommMismatch,
				f.d.coll.rank, callString(&f.c), dc.rank, callString(c))
		}
		if bad != nil {
			done = w.fail(op, bad)
		}
	}
	if failed != nil { // not enqueued: it will not join
		m.joined, m.done = true, true
		op.joined++
	}
	w.forget(op)
	return m, done, nil
}

// callString names a call in errors: all_reduce(1024 bf16).
func callString(c *engine.DeviceColl) string {
	if c.Kind == ir.Broadcast {
		return fmt.Sprintf("%s(%d %v, root %d)", c.Kind, c.Count, c.DType, c.Root)
	}
	return fmt.Sprintf("%s(%d %v)", c.Kind, c.Count, c.DType)
}

// agrees says whether two members' calls can meet.
func (m *member) agrees(o *member) bool {
	a, b := &m.c, &o.c
	return a.Kind == b.Kind && a.DType == b.DType && a.Count == b.Count && (a.Kind != ir.Broadcast || a.Root == b.Root)
}

// check finds what is wrong with m's call alone in a communicator of n.
func (m *member) check(n int) error {
	c := &m.c
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: rank %d called %s: %s", engine.ErrCommInvalid, m.d.coll.rank, callString(c), fmt.Sprintf(format, args...))
	}
	switch c.Kind {
	case ir.AllGather, ir.Broadcast:
		if c.DType != ir.F32 && c.DType != ir.BF16 && c.DType != ir.I32 {
			return bad("not f32, bf16 or i32")
		}
	case ir.ReduceScatter, ir.AllReduce:
		if c.DType != ir.F32 && c.DType != ir.BF16 {
			return bad("sums are of f32 or bf16")
		}
	default:
		return bad("no such collective")
	}
	if c.Count < 0 {
		return bad("a negative count")
	}
	if c.Kind == ir.Broadcast && (c.Root < 0 || c.Root >= n) {
		return bad("the root is not one of the %d members", n)
	}
	if c.Count == 0 {
		return nil
	}
	part := uint64(c.Count * c.DType.Size())
	whole := part * uint64(n)
	switch c.Kind {
	case ir.AllGather:
		// In is disjoint from Out, or exactly this member's part of it.
		if c.In == 0 || c.Out == 0 {
			return bad("a null address")
		}
		if c.In < c.Out+whole && c.Out < c.In+part && c.In != c.Out+uint64(m.idx)*part {
			return bad("in overlaps out but is not its part %d", m.idx)
		}
	case ir.ReduceScatter:
		if c.In == 0 || c.Out == 0 {
			return bad("a null address")
		}
		if c.Out < c.In+whole && c.In < c.Out+part && c.Out != c.In+uint64(m.idx)*part {
			return bad("out overlaps in but is not its part %d", m.idx)
		}
	default:
		if c.Out == 0 {
			return bad("a null address")
		}
		if c.In != 0 && c.In != c.Out {
			return bad("in place at out, but in is elsewhere")
		}
	}
	return nil
}

// fail fails op unless it is computing or over, returning the members
// it ends (those that joined; the others fail when they join). Callers
// hold mu.
func (w *world) fail(op *rendezvous, err error) []*member {
	if op.started || op.finished || op.err != nil {
		return nil
	}
	op.err = err
	var done []*member
	for _, m := range op.calls {
		if m != nil && m.joined && !m.done {
			m.done, m.err = true, m.commErr(err)
			done = append(done, m)
		}
	}
	w.forget(op)
	return done
}

// forget drops op from its communicator once it is over and every
// member's call has reached it. Callers hold mu.
func (w *world) forget(op *rendezvous) {
	if op.enq == len(op.calls) && (op.finished || op.err != nil) {
		delete(op.c.ops, op.seq)
	}
}

func (m *member) commErr(err error) error {
	return &engine.CommError{Rank: m.d.coll.rank, Stream: m.s, Group: slices.Clone(m.op.c.members), Seq: m.op.seq, Call: callString(&m.c), Err: err}
}

// joinColl is m's stream reaching m (failed: the error the stream has
// had): m joins its rendezvous, and the member that joins last computes
// it. Held back, it returns at once (the member's item ends when the
// rendezvous does, finishHeld); else it returns m's error once the
// rendezvous is over.
func (d *Device) joinColl(m *member, failed error) error {
	w := d.coll.w
	w.complete(w.join(m, failed))
	if d.holdBack {
		return nil
	}
	<-m.wake
	return m.err
}

// join is joinColl's rendezvous: the members it ends come back.
func (w *world) join(m *member, failed error) []*member {
	w.mu.Lock()
	defer w.mu.Unlock()
	op := m.op
	m.joined = true
	op.joined++
	if failed != nil {
		if done := w.fail(op, fmt.Errorf("rank %d's stream %d failed before this call: %w", m.d.coll.rank, m.s, failed)); len(done) > 0 {
			return done // m among them
		}
	}
	if op.err != nil { // failed before m joined
		m.done, m.err = true, m.commErr(op.err)
		return []*member{m}
	}
	if op.joined < len(op.calls) {
		return nil
	}
	op.started = true
	w.mu.Unlock()
	err := op.run()
	w.mu.Lock()
	op.finished = true
	for _, o := range op.calls {
		o.done = true
		if err != nil {
			o.err = o.commErr(err)
		}
	}
	w.forget(op)
	return op.calls
}

// complete ends the items of members that are done: wakes those that
// wait, takes held-back ones off their streams. Callers hold no lock.
func (w *world) complete(ms []*member) {
	if len(ms) == 0 {
		return
	}
	for _, m := range ms {
		if m.d.holdBack {
			if m.it != nil {
				m.d.finishHeld(m.st, m.it, m.err)
			}
		} else {
			close(m.wake)
		}
	}
	w.bump()
}

// bump tells waiting held-back drains that something changed.
func (w *world) bump() {
	w.mu.Lock()
	w.gen++
	w.cond.Broadcast()
	w.mu.Unlock()
}

// collWake is bump for d's world, if it has one (a fence lifted).
func (d *Device) collWake() {
	if d.coll != nil && d.holdBack {
		d.coll.w.bump()
	}
}

// finishHeld takes it, a held-back collective at the head of st whose
// rendezvous is over, off the queue.
func (d *Device) finishHeld(st *stream, it *item, err error) {
	d.q.Lock()
	defer d.q.Unlock()
	d.finish(st, it, err)
}

// Abort fails every pending and future collective of every device of
// d's world (engine.DeviceCollectives); one already computing ends.
func (d *Device) Abort(err error) {
	if d.coll == nil {
		return
	}
	w := d.coll.w
	w.mu.Lock()
	if w.err != nil {
		w.mu.Unlock()
		return
	}
	if err == nil {
		w.err = engine.ErrCommAborted
	} else {
		w.err = fmt.Errorf("%w: %w", engine.ErrCommAborted, err)
	}
	var done []*member
	for _, c := range w.comms {
		for _, op := range c.ops {
			done = append(done, w.fail(op, w.err)...)
		}
	}
	w.mu.Unlock()
	w.complete(done)
	w.bump()
}

// run computes op, every member having joined: on a Sequential world
// holding every member's lock, in rank order.
func (op *rendezvous) run() error {
	if op.calls[0].d.sequential {
		ds := make([]*Device, len(op.calls))
		for i, m := range op.calls {
			ds[i] = m.d
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i].coll.rank < ds[j].coll.rank })
		for _, d := range ds {
			d.seqMu.Lock()
			defer d.seqMu.Unlock()
		}
	}
	return protect(op.compute)
}

// compute does the collective on the members' memory: all-gather, the
// members' parts in member order into every member's out; reduce-scatter,
// member j's part of the fold into its out; all-reduce, the fold into
// every member's buffer; broadcast, the root's buffer into every other.
// A part already in place is not copied.
func (op *rendezvous) compute() error {
	ms := op.calls
	c := &op.first.c
	part := c.Count * c.DType.Size()
	switch c.Kind {
	case ir.AllGather:
		for _, dst := range ms {
			for i, src := range ms {
				if to := dst.c.Out + uint64(int64(i)*part); to != src.c.In {
					move(to, src.c.In, part)
				}
			}
		}
	case ir.ReduceScatter:
		parts := make([]uint64, len(ms))
		for j, dst := range ms {
			for i, src := range ms {
				parts[i] = src.c.In + uint64(int64(j)*part)
			}
			fold([]uint64{dst.c.Out}, parts, c.Count, c.DType)
		}
	case ir.AllReduce:
		bufs := make([]uint64, len(ms))
		for i, m := range ms {
			bufs[i] = m.c.Out
		}
		fold(bufs, bufs, c.Count, c.DType)
	case ir.Broadcast:
		root := ms[c.Root]
		for _, dst := range ms {
			if dst.c.Out != root.c.Out {
				move(dst.c.Out, root.c.Out, part)
			}
		}
	}
	return nil
}

// move copies n bytes from src to dst.
func move(dst, src uint64, n int64) {
	if n > 0 {
		copy(unsafe.Slice((*byte)(ptr(dst)), n), unsafe.Slice((*byte)(ptr(src)), n))
	}
}

// collChunk is the elements a fold sums at a time.
const collChunk = 4096

// fold sets count elements of dtype dt at every dst to the left fold,
// element by element in fp32, of those at parts, in order (kernels.Fold,
// as the host Comm sums): bf16 parts widened exactly, the sums rounded
// to nearest even as memComm's Write rounds them. Every part of a chunk
// is read before any dst of it is written, so a dst may be a part.
func fold(dsts, parts []uint64, count int64, dt ir.DType) {
	e := uint64(dt.Size())
	sum := make([]float32, min(count, collChunk))
	src := make([][]float32, len(parts))
	var wide [][]float32
	if dt == ir.BF16 {
		wide = make([][]float32, len(parts))
		for i := range wide {
			wide[i] = make([]float32, len(sum))
		}
	}
	for lo := int64(0); lo < count; lo += collChunk {
		k := int(min(collChunk, count-lo))
		off := uint64(lo) * e
		for i, p := range parts {
			if dt == ir.BF16 {
				for j, v := range unsafe.Slice((*uint16)(ptr(p+off)), k) {
					wide[i][j] = math.Float32frombits(uint32(v) << 16)
				}
				src[i] = wide[i][:k]
			} else {
				src[i] = floats(p+off, k)
			}
		}
		kernels.Fold(sum[:k], src)
		for _, d := range dsts {
			if dt == ir.BF16 {
				for j, v := range sum[:k] {
					unsafe.Slice((*uint16)(ptr(d+off)), k)[j] = bf16Bits(v)
				}
			} else {
				copy(floats(d+off, k), sum[:k])
			}
		}
	}
}

// bf16Bits is v stored as bf16, as the engine's Write stores it.
func bf16Bits(v float32) uint16 {
	u := math.Float32bits(kernels.RoundBF16(v))
	if v != v {
		u |= 0x00400000 // a NaN stays one
	}
	return uint16(u >> 16)
}

// drainHeld is drainAll(n, ...) for a held-back device d of w: d's caller (a
// transfer or Sync, holding d's barrier and q) runs the world's
// held-back items, one at a time, until every item of d numbered below
// n is done (see the file comment). Only one caller drains the world at
// a time (busy); it gives its turn up while it waits.
func (w *world) drainHeld(d *Device, n uint64) {
	d.q.Unlock()
	defer d.q.Lock()
	w.mu.Lock()
	for w.busy {
		w.cond.Wait()
	}
	w.busy = true
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.busy = false
		w.cond.Broadcast()
		w.mu.Unlock()
	}()
	// bounds are the devices forced, d first, each up to (not including)
	// its item number n.
	type bound struct {
		d *Device
		n uint64
	}
	bounds := []bound{{d, n}}
	raise := func(t *Device, n uint64) bool {
		for i := range bounds {
			if bounds[i].d == t {
				if bounds[i].n >= n {
					return false
				}
				bounds[i].n = n
				return true
			}
		}
		bounds = append(bounds, bound{t, n})
		return true
	}
	for {
		w.mu.Lock()
		gen := w.gen
		w.mu.Unlock()
		// pending: d has items below n not done; grew: a bound grew;
		// waits: something the drain needs is not enqueued or fenced;
		// stuck: rendezvous waiting for members.
		ran, pending, grew, waits := false, false, false, false
		var stuck []*rendezvous
		for i := 0; i < len(bounds) && !ran; i++ {
			t, lim := bounds[i].d, bounds[i].n
			t.q.Lock()
			var best *stream
			for _, st := range t.streams {
				if len(st.items) == 0 || st.items[0].seq >= lim {
					continue
				}
				it := st.items[0]
				if t == d && it.seq < n {
					pending = true
				}
				if it.coll != nil {
					w.mu.Lock()
					joined := it.coll.joined
					if joined {
						op := it.coll.op
						if op.started || op.finished || op.err != nil {
							waits = true // ending now, elsewhere
						} else {
							stuck = append(stuck, op)
							for _, o := range op.calls {
								switch {
								case o == nil:
									waits = true // not enqueued yet
								case !o.joined:
									grew = raise(o.d, o.it.seq+1) || grew
								}
							}
						}
					}
					w.mu.Unlock()
					if joined {
						continue
					}
				}
				switch {
				case !t.ready(it):
				case t.fenced && it.seq >= t.fence:
					// Another device's transfer under way: wait for it
					// (d's own fence is its caller's, which this drain
					// serves: what is behind it cannot run).
					waits = waits || t != d
				case it.work == nil && it.coll == nil:
					best = st // a marker or a met wait: it touches no memory
				case best == nil || it.seq > best.items[0].seq:
					best = st
				}
				if best != nil && best.items[0].work == nil && best.items[0].coll == nil {
					break
				}
			}
			if best != nil {
				t.run(best, best.items[0])
				ran = true
			}
			t.q.Unlock()
		}
		if ran || grew {
			continue
		}
		if !pending {
			return
		}
		w.mu.Lock()
		if w.gen != gen {
			w.mu.Unlock()
			continue
		}
		if !waits {
			// Nothing can run and nothing is awaited: the collectives
			// wait on one another.
			if len(stuck) == 0 {
				w.mu.Unlock()
				panic("hostc: held-back streams wait on one another")
			}
			var done []*member
			for _, op := range stuck {
				done = append(done, w.fail(op, fmt.Errorf("%w: held-back collectives wait on one another (do the ranks issue them in the same order?)", engine.ErrCommInvalid))...)
			}
			w.mu.Unlock()
			w.complete(done)
			continue
		}
		w.busy = false
		w.cond.Broadcast()
		for w.gen == gen {
			w.cond.Wait()
		}
		for w.busy {
			w.cond.Wait()
		}
		w.busy = true
		w.mu.Unlock()
	}
}
