package algorithms

import "slices"

// Halving-doubling (Rabenseifner's allreduce): a reduce-scatter by
// recursive halving, then an allgather by recursive doubling. Each rank
// moves the same bytes as in the ring (2(n−1)/n of the buffer for a power
// of two) but waits on 2·log2(n) exchanges instead of the ring's 2(n−1)
// hand-offs — 4 against 6 at 4 ranks — which is what counts for mid-sized
// messages when ranks share cores: every hand-off may wait for a
// descheduled rank to be woken. It is a CPU algorithm for ranks of one
// host (shared memory), not one of NCCL's.
//
// Ranks are numbered by their position in the channel's ring order. With
// p the largest power of two ≤ n and e = n − p, the ranks at positions
// 2i (i < e) fold out: they send their input to position 2i+1 and receive
// the result from it at the end. The other p ranks, indexed v = 0…p−1,
// split the channel's slice into p blocks. Reduce-scatter: for d = p/2,
// p/4, …, 1, exchange with v⊕d: send the half of the current block range
// that the partner keeps, receive and reduce the half this rank keeps.
// Rank v ends owning block v, reduced. Allgather: for d = 1, 2, …, p/2,
// exchange the ranges owned so far (send ours, receive the partner's).
//
// Every exchange is cut into chunks of the plan's chunk size, and a rank
// sends chunk j, then receives chunk j: each direction of a link holds at
// most one chunk, so the exchange cannot deadlock (CheckPlan's FIFOs hold
// one message; the CPU executor's hold two chunks).
//
// Both partners reduce local⊕remote over disjoint halves, so every block
// is reduced in one order (that of the recursive halving) and every rank
// receives the same bytes of it.

// hdLayout maps ring positions to the indices of the exchanging ranks.
type hdLayout struct {
	p, e int
}

func newHDLayout(n int) hdLayout {
	p := 1 << log2Floor(n)
	return hdLayout{p: p, e: n - p}
}

// virt returns the position's index among the p exchanging ranks, or -1
// for a rank that folds out.
func (l hdLayout) virt(pos int) int {
	if pos < 2*l.e {
		if pos%2 == 0 {
			return -1
		}
		return pos / 2
	}
	return pos - l.e
}

// pos is virt's inverse.
func (l hdLayout) pos(v int) int {
	if v < l.e {
		return 2*v + 1
	}
	return v + l.e
}

// HalvingDoublingPeers returns the ranks that rank exchanges data with on
// channel c of g in a halving-doubling plan, in the order of first use,
// so that a communicator can open those links in advance.
func HalvingDoublingPeers(g *Graph, c, rank int) ([]int, error) {
	order, idx, err := ringIndex(g, c)
	if err != nil {
		return nil, err
	}
	if rank < 0 || rank >= len(order) {
		return nil, badReq("rank %d not in 0..%d", rank, len(order)-1)
	}
	l := newHDLayout(len(order))
	pos := idx[rank]
	v := l.virt(pos)
	if v < 0 {
		return []int{order[pos+1]}, nil
	}
	var out []int
	if pos < 2*l.e {
		out = append(out, order[pos-1])
	}
	for d := l.p / 2; d >= 1; d /= 2 {
		out = append(out, order[l.pos(v^d)])
	}
	return out, nil
}

// interleave adds one exchange to rank r's stream: send chunk j, then
// receive chunk j.
func (b *planBuilder) interleave(r, c int, sends, recvs []Step) {
	for i := 0; i < max(len(sends), len(recvs)); i++ {
		if i < len(sends) {
			b.add(r, c, 0, sends[i])
		}
		if i < len(recvs) {
			b.add(r, c, 0, recvs[i])
		}
	}
}

// split cuts the elements [off, off+cnt) into steps like st of at most
// chunk elements (off is added to st's Src and Dst offsets, where set).
func split(st Step, off, cnt, chunk int64) []Step {
	var out []Step
	chunks(ChannelPart{Off: off, Count: cnt}, chunk, func(o, n int64) {
		s := st
		if s.Src.Buf != NoBuf {
			s.Src.Off += o
		}
		if s.Dst.Buf != NoBuf {
			s.Dst.Off += o
		}
		s.Count = n
		out = append(out, s)
	})
	return out
}

func (b *planBuilder) halvingDoublingAllReduce(order []int, c int, cp ChannelPart, part Partition) {
	l := newHDLayout(len(order))
	bs := roundUp64(divUp64(cp.Count, int64(l.p)), part.GrainElems)
	blocks := func(lo, hi int) (int64, int64) { // blocks [lo, hi) as elements
		a, z := min(int64(lo)*bs, cp.Count), min(int64(hi)*bs, cp.Count)
		return cp.Off + a, z - a
	}
	ch := part.ChunkElems
	all := func(r int, st Step) {
		for _, s := range split(st, cp.Off, cp.Count, ch) {
			b.add(r, c, 0, s)
		}
	}
	for pos, r := range order {
		v := l.virt(pos)
		if v < 0 {
			next := order[pos+1]
			all(r, Step{Prim: Send, SendTo: peers(next), Src: inRef(0)})
			all(r, Step{Prim: Recv, RecvFrom: peers(next), Dst: outRef(0)})
			continue
		}
		src := Input // where this rank's partial result lives
		if pos < 2*l.e {
			all(r, Step{Prim: RecvReduceCopySend, RecvFrom: peers(order[pos-1]), Src: inRef(0), Dst: outRef(0)})
			src = Output
		}
		lo, hi := 0, l.p
		for d := l.p / 2; d >= 1; d /= 2 {
			peer := order[l.pos(v^d)]
			mid := lo + (hi-lo)/2
			keepLo, keepHi, giveLo, giveHi := lo, mid, mid, hi
			if v&d != 0 {
				keepLo, keepHi, giveLo, giveHi = mid, hi, lo, mid
			}
			gOff, gCnt := blocks(giveLo, giveHi)
			kOff, kCnt := blocks(keepLo, keepHi)
			b.interleave(r, c,
				split(Step{Prim: Send, SendTo: peers(peer), Src: Ref{src, 0}}, gOff, gCnt, ch),
				split(Step{Prim: RecvReduceCopySend, RecvFrom: peers(peer), Src: Ref{src, 0}, Dst: outRef(0)}, kOff, kCnt, ch))
			lo, hi = keepLo, keepHi
			src = Output
		}
		for d := 1; d < l.p; d *= 2 {
			peer := order[l.pos(v^d)]
			size := hi - lo
			other := hi // the partner owns the sibling range
			if v&d != 0 {
				other = lo - size
			}
			mOff, mCnt := blocks(lo, hi)
			pOff, pCnt := blocks(other, other+size)
			b.interleave(r, c,
				split(Step{Prim: Send, SendTo: peers(peer), Src: outRef(0)}, mOff, mCnt, ch),
				split(Step{Prim: Recv, RecvFrom: peers(peer), Dst: outRef(0)}, pOff, pCnt, ch))
			lo, hi = min(lo, other), max(hi, other+size)
		}
		if pos < 2*l.e {
			all(r, Step{Prim: Send, SendTo: peers(order[pos-1]), Src: outRef(0)})
		}
	}
}

// Allgather and reduce-scatter by halving-doubling, for a power of two
// ranks p (HasPlan): every block travels the binomial tree of recursive
// doubling (allgather) or halving (reduce-scatter) between a rank and
// its partners v⊕D, D = p/2, …, 1, so a rank waits on log2(p) hops
// instead of the ring's n−1 hand-offs and moves the same bytes. No
// buffer holds partial results: a block is received, reduced or copied
// and sent on in one step. Blocks live at rank×count in the gathered
// buffer (allgather output, reduce-scatter input), whatever the ring
// order. (With a rank folded in, as the allreduce does, a partner would
// handle two blocks per unit and send twice in a row to one partner,
// which one message in flight per connection cannot take.)

// hdUnitOrder is the order in which a rank handles the blocks in a
// reduce-scatter, as distances w = u⊕v of the block's owner u from the
// rank v: ord(1) = [0], ord(2D) = ord(D)+D interleaved with ord(D) —
// [1 0], [3 1 2 0], [7 3 5 1 6 2 4 0]. Each rank sends partner v⊕D the
// blocks at distances [D, 2D) in the order that partner handles them
// (ord(D) shifted by D), so every connection's messages meet their
// receives in order; and a send to a partner alternates with a step that
// takes from it, so one message per connection in flight suffices. The
// allgather runs the same plan backwards.
func hdUnitOrder(p int) []int {
	ord := []int{0}
	for d := 1; d < p; d *= 2 {
		next := make([]int, 0, 2*d)
		for i, w := range ord {
			next = append(next, w+d, ord[i])
		}
		ord = next
	}
	return ord
}

// hdBlocks calls f for every rank of a power-of-two ring order with its
// partners at distances p/2, p/4, …, 1, each chunk of this channel's
// part of the blocks, and each block in reduce-scatter order (backwards:
// in the reverse of it, chunk by chunk): the block's owner's distance w,
// and k, the number of partners (the farthest first) before the one the
// reduce-scatter hands the block to (all of them for the rank's own
// block, w = 0).
func hdBlocks(order []int, cp ChannelPart, chunk int64, backwards bool, f func(r int, partners []int, off, cnt int64, owner, w, k int)) {
	p := len(order)
	ord := hdUnitOrder(p)
	if backwards {
		slices.Reverse(ord)
	}
	for v, r := range order {
		var partners []int
		for d := p / 2; d >= 1; d /= 2 {
			partners = append(partners, order[v^d])
		}
		partners = slices.Clip(partners) // shared by the steps: no append may reach another's
		chunks(cp, chunk, func(off, cnt int64) {
			for _, w := range ord {
				k := len(partners)
				if w != 0 {
					k = log2Floor(p) - 1 - log2Floor(w)
				}
				f(r, partners, off, cnt, order[v^w], w, k)
			}
		})
	}
}

// halvingDoublingReduceScatter: rank v hands the block at distance w
// (highest bit D) to its partner v⊕D after adding what the partners at
// distances above D sent it for that block (RecvReduceSend, or a plain
// Send for D = p/2), and reduces its own block from every partner into
// its output. Chunks are the outer loop: a rank handles chunk j of every
// block before chunk j+1.
func (b *planBuilder) halvingDoublingReduceScatter(order []int, c int, cp ChannelPart, part Partition, count int64) {
	hdBlocks(order, cp, part.ChunkElems, false, func(r int, partners []int, off, cnt int64, owner, w, k int) {
		src := inRef(int64(owner)*count + off)
		switch {
		case w == 0:
			b.add(r, c, 0, Step{Prim: RecvReduceCopySend, RecvFrom: partners, Src: src, Dst: outRef(off), Count: cnt})
		case k == 0:
			b.add(r, c, 0, Step{Prim: Send, SendTo: peers(partners[0]), Src: src, Count: cnt})
		default:
			b.add(r, c, 0, Step{Prim: RecvReduceSend, RecvFrom: partners[:k:k], SendTo: peers(partners[k]), Src: src, Count: cnt})
		}
	})
}

// halvingDoublingAllGather is the reduce-scatter backwards, chunk by
// chunk: a rank copies its input into its block of the output and sends
// it to every partner; the block at distance w it receives from the
// partner v⊕D that the reduce-scatter hands it to, writes it and
// forwards it to the partners at distances above D (RecvCopySend, or a
// plain Recv for D = p/2).
func (b *planBuilder) halvingDoublingAllGather(order []int, c int, cp ChannelPart, part Partition, count int64) {
	hdBlocks(order, cp, part.ChunkElems, true, func(r int, partners []int, off, cnt int64, owner, w, k int) {
		dst := outRef(int64(owner)*count + off)
		switch {
		case w == 0:
			b.add(r, c, 0, Step{Prim: Send, SendTo: partners, Src: inRef(off), Count: cnt})
			b.add(r, c, 0, Step{Prim: Copy, Src: inRef(off), Dst: dst, Count: cnt})
		case k == 0:
			b.add(r, c, 0, Step{Prim: Recv, RecvFrom: peers(partners[0]), Dst: dst, Count: cnt})
		default:
			b.add(r, c, 0, Step{Prim: RecvCopySend, RecvFrom: peers(partners[k]), SendTo: partners[:k:k], Dst: dst, Count: cnt})
		}
	})
}
