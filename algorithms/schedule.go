package algorithms

import (
	"errors"
	"fmt"
)

// This file turns a Graph and a request into a Plan: per rank and channel
// the ordered primitive steps of NCCL's kernels (src/device/all_reduce.h,
// broadcast.h, reduce.h, all_gather.h, reduce_scatter.h), over the
// channel's slice of the message (PartitionMessage).

// ErrAlgoNotSupported is returned (wrapped) for a collective that has no
// schedule in the requested algorithm (only allreduce has a tree plan).
var ErrAlgoNotSupported = errors.New("gotree/algorithms: algorithm not supported for this collective")

// ErrBadRequest is wrapped by BuildPlan's errors about the request itself.
var ErrBadRequest = errors.New("gotree/algorithms: bad plan request")

// PlanRequest is one collective call to plan.
type PlanRequest struct {
	Coll  Collective
	Algo  Algorithm
	Proto Protocol
	// Count is the element count of the call: allreduce, broadcast, reduce:
	// the buffer; allgather: each rank's contribution (the output holds
	// NRanks*Count, rank r's block at r*Count); reducescatter: each rank's
	// output (the input holds NRanks*Count).
	Count int64
	DType DType
	Op    Op
	Root  int // broadcast and reduce
	// Channels is the most channels to use; 0 means all of the graph's.
	Channels int
	// ChunkBytes is the largest chunk per step; 0 means the protocol's
	// default. Executors shrink it in tests to get many steps.
	ChunkBytes int64
	// KeepChannels skips NCCL's reduction of the channel count for small
	// messages (a test knob; see PartitionSpec).
	KeepChannels bool
	// FragmentBytes is the executor's fragment: a step moves its chunk in
	// pieces of at most this many bytes, one after another (the CPU
	// executor's FIFO slot). A tree allreduce whose slice of a channel
	// fits in one fragment has nothing to pipeline, so it keeps the way
	// down in the same stream as the way up (see treeAllReduce). 0: not
	// known; the way down always gets a stream of its own.
	FragmentBytes int64
}

// HasPlan says whether BuildPlan has a plan of coll with algorithm a for
// n ranks (nil) or why not: the ring has every collective BuildPlan
// takes, halving-doubling also allgather and reduce-scatter (recursive
// halving and doubling for a power of two ranks, Bruck's order for the
// others), the others only allreduce.
func HasPlan(coll Collective, a Algorithm, n int) error {
	switch {
	case a == Ring || coll == AllReduce:
		return nil
	case (a == HalvingDoubling || a == Direct) && (coll == AllGather || coll == ReduceScatter):
		return nil
	}
	return fmt.Errorf("%w: %v has no %v plan", ErrAlgoNotSupported, coll, a)
}

func badReq(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// BufferCounts returns the element counts of each rank's input and output
// buffer for a collective of count elements over nRanks ranks.
func BufferCounts(c Collective, count int64, nRanks int) (in, out int64) {
	switch c {
	case AllGather:
		return count, int64(nRanks) * count
	case ReduceScatter:
		return int64(nRanks) * count, count
	}
	return count, count
}

// BufferCounts returns the element counts of each rank's input and output.
func (p *Plan) BufferCounts() (in, out int64) { return BufferCounts(p.Coll, p.Count, p.NRanks) }

// BuildPlan returns the schedule of req on graph g. The plan uses channels
// 0..Plan.Channels-1 of g (ring plans use their rings, tree plans their
// trees). Zero-count calls give a plan without steps; a single rank gets
// one Copy from its input to its output (executors skip it when both are
// the same memory). Steps never have Count 0.
//
// Step lists per channel slice (n ranks, chunks of at most the chunk size):
//   - ring allreduce, per loop of n chunks, rank at ring index p (distance
//     from rank 0 along Next): Send chunk p-1; RecvReduceSend chunks p-2,
//     ..., p-(n-1); RecvReduceCopySend chunk p; RecvCopySend chunks p-1,
//     ..., p-(n-2); Recv chunk p+1 (mod n). The last loop's chunks shrink
//     (aligned to the grain) to spread what is left over all n.
//   - tree allreduce, per chunk: stream 0 reduces up (leaf Send; interior
//     RecvReduceSend from all children to the parent); stream 1 broadcasts
//     down (interior RecvCopySend from the parent to all children; leaf
//     Recv). The root has one fused stream: RecvReduceCopySend from its
//     children back to its children.
//   - one-shot allreduce (oneshot.go): Send the input to every other
//     rank; RecvReduceCopySend from all, folded in rank order.
//   - ring broadcast from the root along Next: root Copy+Send, then
//     RecvCopySend, the root's predecessor Recv.
//   - ring reduce starting after the root: Send, RecvReduceSend, and the
//     root's RecvReduceCopySend (no sends) into its output.
//   - ring allgather: Copy own block and Send it; n-2 RecvCopySend of the
//     blocks of the predecessors; Recv.
//   - ring reducescatter: Send the predecessor's block; RecvReduceSend of
//     blocks of ranks further back; RecvReduceCopySend of the own block into
//     the output.
//   - halving-doubling allgather and reducescatter (halvdouble.go), a
//     power of two ranks: each block along a binomial tree of partners,
//     RecvReduceSend/RecvCopySend without a buffer for partial results.
func BuildPlan(g *Graph, req PlanRequest) (*Plan, error) {
	if g == nil || g.NRanks < 1 {
		return nil, badReq("empty graph")
	}
	n := g.NRanks
	if req.Coll < AllReduce || int(req.Coll) >= len(collNames) {
		return nil, badReq("unknown collective %v", req.Coll)
	}
	if req.Coll > ReduceScatter {
		return nil, fmt.Errorf("%w: %v has no ring or tree plan (see LocalP2PPlan)", ErrAlgoNotSupported, req.Coll)
	}
	if req.Algo < Ring || int(req.Algo) >= NumAlgorithms {
		return nil, badReq("unknown algorithm %v", req.Algo)
	}
	if err := HasPlan(req.Coll, req.Algo, n); err != nil {
		return nil, err
	}
	if req.Proto < LL || req.Proto > Simple {
		return nil, badReq("unknown protocol %v", req.Proto)
	}
	if !req.DType.Valid() {
		return nil, badReq("unknown dtype %v", req.DType)
	}
	if req.Coll == AllReduce || req.Coll == Reduce || req.Coll == ReduceScatter {
		if err := Supports(req.Op, req.DType); err != nil {
			return nil, badReq("%v", err)
		}
	}
	if req.Count < 0 {
		return nil, badReq("negative count %d", req.Count)
	}
	if (req.Coll == Broadcast || req.Coll == Reduce) && (req.Root < 0 || req.Root >= n) {
		return nil, badReq("root %d not in 0..%d", req.Root, n-1)
	}
	if req.Channels < 0 || req.Channels > g.Channels {
		return nil, badReq("%d channels requested, the graph has %d", req.Channels, g.Channels)
	}
	if req.ChunkBytes < 0 {
		return nil, badReq("negative chunk size %d", req.ChunkBytes)
	}
	if g.Channels < 1 || len(g.Rings) < g.Channels || len(g.Trees) < g.Channels {
		return nil, badReq("graph has %d channels but %d rings, %d trees", g.Channels, len(g.Rings), len(g.Trees))
	}
	maxCh := req.Channels
	if maxCh == 0 {
		maxCh = g.Channels
	}
	p := &Plan{Coll: req.Coll, Algo: req.Algo, Proto: req.Proto, NRanks: n, Count: req.Count,
		DType: req.DType, Op: req.Op, Root: req.Root, Ranks: make([]RankPlan, n)}
	for r := range p.Ranks {
		p.Ranks[r].Rank = r
	}
	if req.Count == 0 {
		return p, nil
	}
	b := &planBuilder{p: p, steps: make([][][]Stream, n)}
	if n == 1 {
		in, out := BufferCounts(req.Coll, req.Count, 1)
		b.add(0, 0, 0, Step{Prim: Copy, Src: Ref{Input, 0}, Dst: Ref{Output, 0}, Count: min(in, out)})
		return b.finish(1), nil
	}
	if req.Algo == Direct {
		if g.NNodes > 1 {
			return nil, fmt.Errorf("%w: %v runs within one host (the graph has %d)", ErrAlgoNotSupported, req.Algo, g.NNodes)
		}
		switch req.Coll {
		case AllGather:
			b.directAllGather(n, req.Count)
		case ReduceScatter:
			b.directReduceScatter(n, req.Count)
		default:
			b.directAllReduce(n, req.Count)
		}
		return b.finish(1), nil
	}
	if req.Algo == Shared {
		if !SharedUsable(n, g.NNodes) {
			return nil, fmt.Errorf("%w: %v runs 2 or more ranks of one host (%d ranks on %d hosts)", ErrAlgoNotSupported, req.Algo, n, g.NNodes)
		}
		chunk := req.ChunkBytes
		if chunk == 0 {
			chunk = SharedStageBytes
		}
		b.sharedAllReduce(n, req.Count, SharedStageElems(int(chunk), req.DType.Size(), n))
		return b.finish(1), nil
	}
	if req.Algo == OneShot {
		if bytes := req.Count * int64(req.DType.Size()); !OneShotUsable(n, g.NNodes, bytes) {
			return nil, fmt.Errorf("%w: %v runs 2..%d ranks of one host and messages up to %d bytes (%d ranks on %d hosts, %d bytes)",
				ErrAlgoNotSupported, req.Algo, maxOneShotRanks, OneShotMaxBytes, n, g.NNodes, bytes)
		}
		b.oneShotAllReduce(n, req.Count)
		return b.finish(1), nil
	}
	es := int64(req.DType.Size())
	spec := PartitionSpec{Count: req.Count, ElemSize: int(es), NRanks: n, Algo: req.Algo, Proto: req.Proto,
		MaxChannels: maxCh, ChunkBytes: req.ChunkBytes, KeepChannels: req.KeepChannels}
	if req.Coll == AllGather || req.Coll == ReduceScatter {
		spec.TrafficBytes = int64(n) * req.Count * es
	}
	part, err := PartitionMessage(spec)
	if err != nil {
		return nil, badReq("%v", err)
	}
	if req.Algo == Tree && req.ChunkBytes == 0 && req.Proto != LL {
		// NCCL shrinks tree chunks so that the pipeline is deep enough.
		spec.ChunkBytes = treeChunkBytes(req.Proto, req.Count*es, int64(part.Channels()), NCCLTreeDepth(n, max(1, g.NNodes)))
		if part, err = PartitionMessage(spec); err != nil {
			return nil, badReq("%v", err)
		}
	}
	for _, cp := range part.Parts {
		c := cp.Channel
		switch {
		case req.Algo == HalvingDoubling:
			order, _, err := ringIndex(g, c)
			if err != nil {
				return nil, err
			}
			pow2 := n&(n-1) == 0
			switch {
			case req.Coll == AllGather && pow2:
				b.halvingDoublingAllGather(order, c, cp, part, req.Count)
			case req.Coll == AllGather:
				b.bruckAllGather(order, c, cp, part, req.Count)
			case req.Coll == ReduceScatter && pow2:
				b.halvingDoublingReduceScatter(order, c, cp, part, req.Count)
			case req.Coll == ReduceScatter:
				b.bruckReduceScatter(order, c, cp, part, req.Count)
			default:
				b.halvingDoublingAllReduce(order, c, cp, part)
			}
		case req.Algo == Tree:
			if err := checkTreeChannel(g, c); err != nil {
				return nil, err
			}
			b.treeAllReduce(g.Trees[c], c, cp, part, req.FragmentBytes > 0 && cp.Count*es <= req.FragmentBytes)
		default:
			order, ring, err := ringIndex(g, c)
			if err != nil {
				return nil, err
			}
			switch req.Coll {
			case AllReduce:
				b.ringAllReduce(order, c, cp, part)
			case Broadcast:
				b.ringBroadcast(order, ring, c, cp, part, req.Root)
			case Reduce:
				b.ringReduce(order, ring, c, cp, part, req.Root)
			case AllGather:
				b.ringAllGather(order, c, cp, part, req.Count)
			case ReduceScatter:
				b.ringReduceScatter(order, c, cp, part, req.Count)
			}
		}
	}
	return b.finish(part.Channels()), nil
}

// treeChunkBytes halves the Simple (LL128) tree chunk while the message
// gives fewer than depth×8 (×16) chunks per channel, down to 128 KiB
// (32 KiB), after NCCL's tuning of tree chunk sizes.
func treeChunkBytes(p Protocol, bytes, channels int64, depth int) int64 {
	chunk := DefaultChunkBytes(Tree, p)
	d := int64(max(1, depth))
	switch p {
	case Simple:
		for bytes/(channels*chunk) < d*8 && chunk > 128<<10 {
			chunk /= 2
		}
	case LL128:
		for bytes/(channels*chunk) < d*16 && chunk > 32<<10 {
			chunk /= 2
		}
	}
	return chunk
}

func checkTreeChannel(g *Graph, c int) error {
	if err := checkTree(g.Trees[c], g.NRanks, false); err != nil {
		return badReq("graph channel %d tree: %v", c, err)
	}
	return nil
}

// ringIndex returns channel c's ring order (from rank 0 along Next) and
// every rank's position in it, and checks the ring. A graph without
// RingOrder (one read from a log) gets the walk along Next.
func ringIndex(g *Graph, c int) (order, idx []int, err error) {
	n := g.NRanks
	if c < len(g.RingOrder) {
		order = g.RingOrder[c]
	}
	if len(order) == 0 && len(g.Rings[c]) == n {
		order = make([]int, 0, n)
		for r, i := 0, 0; i < n && r >= 0 && r < n; i++ {
			order = append(order, r)
			r = g.Rings[c][r].Next
		}
	}
	if len(order) != n || len(g.Rings[c]) != n {
		return nil, nil, badReq("graph channel %d ring has %d ranks, %d links, want %d", c, len(order), len(g.Rings[c]), n)
	}
	idx = make([]int, n)
	for i := range idx {
		idx[i] = -1
	}
	for i, r := range order {
		if r < 0 || r >= n || idx[r] != -1 {
			return nil, nil, badReq("graph channel %d ring order %v is not a permutation", c, order)
		}
		idx[r] = i
	}
	for i, r := range order {
		if g.Rings[c][r].Next != order[(i+1)%n] || g.Rings[c][r].Prev != order[(i-1+n)%n] {
			return nil, nil, badReq("graph channel %d rank %d: ring links %+v disagree with the ring order", c, r, g.Rings[c][r])
		}
	}
	return order, idx, nil
}

type planBuilder struct {
	p     *Plan
	steps [][][]Stream // [rank][channel][stream]
}

// add appends st to a stream, dropping empty steps.
func (b *planBuilder) add(rank, ch, stream int, st Step) {
	if st.Count <= 0 {
		return
	}
	rs := b.steps[rank]
	for len(rs) <= ch {
		rs = append(rs, nil)
	}
	for len(rs[ch]) <= stream {
		rs[ch] = append(rs[ch], nil)
	}
	rs[ch][stream] = append(rs[ch][stream], st)
	b.steps[rank] = rs
}

func (b *planBuilder) finish(channels int) *Plan {
	b.p.Channels = channels
	for r, chs := range b.steps {
		for c, ss := range chs {
			var cp ChannelPlan
			cp.Channel = c
			for _, s := range ss {
				if len(s) > 0 {
					cp.Streams = append(cp.Streams, s)
				}
			}
			if len(cp.Streams) > 0 {
				b.p.Ranks[r].Channels = append(b.p.Ranks[r].Channels, cp)
			}
		}
	}
	return b.p
}

func peers(rs ...int) []int { return rs }

func inRef(off int64) Ref  { return Ref{Input, off} }
func outRef(off int64) Ref { return Ref{Output, off} }

// chunks calls f for every chunk [off, off+cnt) of a channel part, in order.
func chunks(cp ChannelPart, chunk int64, f func(off, cnt int64)) {
	for lo := int64(0); lo < cp.Count; lo += chunk {
		f(cp.Off+lo, min(chunk, cp.Count-lo))
	}
}

func (b *planBuilder) ringAllReduce(order []int, c int, cp ChannelPart, part Partition) {
	n := len(order)
	for lo := int64(0); lo < cp.Count; {
		rem := cp.Count - lo
		rc := min(part.ChunkElems, roundUp64(divUp64(rem, int64(n)), part.GrainElems))
		base := cp.Off + lo
		end := cp.Off + cp.Count
		region := func(j int) (int64, int64) {
			j = ((j % n) + n) % n
			a := min(base+int64(j)*rc, end)
			return a, min(a+rc, end) - a
		}
		for p, r := range order {
			prev, next := order[(p-1+n)%n], order[(p+1)%n]
			off, cnt := region(p - 1)
			b.add(r, c, 0, Step{Prim: Send, SendTo: peers(next), Src: inRef(off), Count: cnt})
			for s := 2; s < n; s++ {
				off, cnt = region(p - s)
				b.add(r, c, 0, Step{Prim: RecvReduceSend, RecvFrom: peers(prev), SendTo: peers(next), Src: inRef(off), Count: cnt})
			}
			off, cnt = region(p)
			b.add(r, c, 0, Step{Prim: RecvReduceCopySend, RecvFrom: peers(prev), SendTo: peers(next), Src: inRef(off), Dst: outRef(off), Count: cnt})
			for s := 1; s < n-1; s++ {
				off, cnt = region(p - s)
				b.add(r, c, 0, Step{Prim: RecvCopySend, RecvFrom: peers(prev), SendTo: peers(next), Dst: outRef(off), Count: cnt})
			}
			off, cnt = region(p + 1)
			b.add(r, c, 0, Step{Prim: Recv, RecvFrom: peers(prev), Dst: outRef(off), Count: cnt})
		}
		lo += int64(n) * rc
	}
}

// treeAllReduce adds the steps of a tree allreduce of one channel's slice.
// The way down normally runs in a stream of its own, so that a piece goes
// down while the next one still goes up. With oneStream (the slice is a
// single fragment) there is no next piece: the way down can only start
// when the way up has ended, and a second stream would just add a
// concurrent waiter, which costs the executor a goroutine and a receive
// that sleeps instead of polling (over TCP, 2-4 nodes: 2-3x the time).
func (b *planBuilder) treeAllReduce(tree []TreeLinks, c int, cp ChannelPart, part Partition, oneStream bool) {
	down := 1
	if oneStream {
		down = 0
	}
	chunks(cp, part.ChunkElems, func(off, cnt int64) {
		for r, t := range tree {
			kids := t.Children()
			switch {
			case t.Up == -1:
				b.add(r, c, 0, Step{Prim: RecvReduceCopySend, RecvFrom: kids, SendTo: kids, Src: inRef(off), Dst: outRef(off), Count: cnt})
			case len(kids) == 0:
				b.add(r, c, 0, Step{Prim: Send, SendTo: peers(t.Up), Src: inRef(off), Count: cnt})
				b.add(r, c, down, Step{Prim: Recv, RecvFrom: peers(t.Up), Dst: outRef(off), Count: cnt})
			default:
				b.add(r, c, 0, Step{Prim: RecvReduceSend, RecvFrom: kids, SendTo: peers(t.Up), Src: inRef(off), Count: cnt})
				b.add(r, c, down, Step{Prim: RecvCopySend, RecvFrom: peers(t.Up), SendTo: kids, Dst: outRef(off), Count: cnt})
			}
		}
	})
}

func (b *planBuilder) ringBroadcast(order []int, ring []int, c int, cp ChannelPart, part Partition, root int) {
	n := len(order)
	chunks(cp, part.ChunkElems, func(off, cnt int64) {
		for q := 0; q < n; q++ { // q: distance from the root along Next
			r := order[(ring[root]+q)%n]
			prev, next := order[(ring[root]+q-1+n)%n], order[(ring[root]+q+1)%n]
			switch {
			case q == 0:
				b.add(r, c, 0, Step{Prim: Copy, Src: inRef(off), Dst: outRef(off), Count: cnt})
				b.add(r, c, 0, Step{Prim: Send, SendTo: peers(next), Src: inRef(off), Count: cnt})
			case q < n-1:
				b.add(r, c, 0, Step{Prim: RecvCopySend, RecvFrom: peers(prev), SendTo: peers(next), Dst: outRef(off), Count: cnt})
			default:
				b.add(r, c, 0, Step{Prim: Recv, RecvFrom: peers(prev), Dst: outRef(off), Count: cnt})
			}
		}
	})
}

func (b *planBuilder) ringReduce(order []int, ring []int, c int, cp ChannelPart, part Partition, root int) {
	n := len(order)
	chunks(cp, part.ChunkElems, func(off, cnt int64) {
		for q := 0; q < n; q++ { // q: distance from the root's successor
			i := ring[root] + 1 + q
			r := order[i%n]
			prev, next := order[(i-1)%n], order[(i+1)%n]
			switch {
			case q == 0:
				b.add(r, c, 0, Step{Prim: Send, SendTo: peers(next), Src: inRef(off), Count: cnt})
			case q < n-1:
				b.add(r, c, 0, Step{Prim: RecvReduceSend, RecvFrom: peers(prev), SendTo: peers(next), Src: inRef(off), Count: cnt})
			default:
				b.add(r, c, 0, Step{Prim: RecvReduceCopySend, RecvFrom: peers(prev), Src: inRef(off), Dst: outRef(off), Count: cnt})
			}
		}
	})
}

func (b *planBuilder) ringAllGather(order []int, c int, cp ChannelPart, part Partition, count int64) {
	n := len(order)
	chunks(cp, part.ChunkElems, func(off, cnt int64) {
		for p, r := range order {
			prev, next := order[(p-1+n)%n], order[(p+1)%n]
			blk := func(back int) int64 { return int64(order[((p-back)%n+n)%n])*count + off }
			b.add(r, c, 0, Step{Prim: Copy, Src: inRef(off), Dst: outRef(blk(0)), Count: cnt})
			b.add(r, c, 0, Step{Prim: Send, SendTo: peers(next), Src: inRef(off), Count: cnt})
			for j := 1; j < n-1; j++ {
				b.add(r, c, 0, Step{Prim: RecvCopySend, RecvFrom: peers(prev), SendTo: peers(next), Dst: outRef(blk(j)), Count: cnt})
			}
			b.add(r, c, 0, Step{Prim: Recv, RecvFrom: peers(prev), Dst: outRef(blk(n - 1)), Count: cnt})
		}
	})
}

func (b *planBuilder) ringReduceScatter(order []int, c int, cp ChannelPart, part Partition, count int64) {
	n := len(order)
	chunks(cp, part.ChunkElems, func(off, cnt int64) {
		for p, r := range order {
			prev, next := order[(p-1+n)%n], order[(p+1)%n]
			blk := func(back int) int64 { return int64(order[((p-back)%n+n)%n])*count + off }
			b.add(r, c, 0, Step{Prim: Send, SendTo: peers(next), Src: inRef(blk(1)), Count: cnt})
			for j := 2; j < n; j++ {
				b.add(r, c, 0, Step{Prim: RecvReduceSend, RecvFrom: peers(prev), SendTo: peers(next), Src: inRef(blk(j)), Count: cnt})
			}
			b.add(r, c, 0, Step{Prim: RecvReduceCopySend, RecvFrom: peers(prev), Src: inRef(blk(0)), Dst: outRef(off), Count: cnt})
		}
	})
}
