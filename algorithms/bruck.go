package algorithms

import "slices"

// Allgather and reduce-scatter in ⌈log2 n⌉ rounds for n ranks that are not
// a power of two: Bruck's dissemination order (J. Bruck et al., 1997).
// Ranks are positions v in the channel's ring order, taken modulo n. In
// the allgather, the block owned by position u reaches position u−w (at
// distance w from its owner) from position u−w+D, where D is the highest
// power of two ≤ w, and a position forwards a block it got at distance w
// to the positions D' below it for the powers of two D' > D with
// w + D' < n (its own block, w = 0: for every D' < n). So every position
// sends only to v−1, v−2, v−4, … and receives only from v+1, v+2, v+4, …
// — ⌈log2 n⌉ links each way — and the block at distance w arrives after
// popcount(w) ≤ ⌊log2 n⌋ hops along a binomial tree, with the ring's bytes
// per rank. (The cost model counts the ⌈log2 n⌉ links as hops, as many as
// Bruck's rounds.) The reduce-scatter is
// the same trees walked towards the owner: a position adds what the
// positions v−D' sent it for a block to its input's block and hands the
// sum to v+D; the owner reduces its block from every v−D'.
//
// Order: a position handles the blocks in the order of hdUnitOrder for
// the next power of two with the distances ≥ n left out (the
// bit-reversal permutation, backwards), chunk by chunk, in the
// reduce-scatter; the allgather runs it backwards. The link v → v−D of
// the allgather carries the blocks at distance w < D of v, which v−D
// handles at distance w + D, and in that order each w + D comes after w
// and before the next w of the link: the same order on both ends, and
// every send on a link follows the receive of the one before it, so one
// message in flight per connection suffices (the reduce-scatter's link
// v → v+D the same way round). CheckPlan and the oracle tests check it
// for 2–64 ranks. (By ascending distance, as Bruck's rounds go, each
// position's second send would wait on a link whose first message its
// receiver takes only later: a deadlock with one message in flight.)

// bruckLinks returns, for position v of n, the position it receives the
// block at distance w from in the allgather (−1 for w = 0) and the
// positions it forwards that block to.
func bruckLinks(n, v, w int) (from int, to []int) {
	from, d := -1, 1
	if w > 0 {
		d = 1 << log2Floor(w)
		from = (v + d) % n
		d *= 2
	}
	for ; w+d < n; d *= 2 {
		to = append(to, (v-d+n)%n)
	}
	return from, to
}

// GatherScatterPeers returns the ranks that rank exchanges data with on
// channel c of g in a halving-doubling allgather or reduce-scatter (for
// a power of two ranks those of HalvingDoublingPeers; otherwise, in
// Bruck's order, it sends to the first of each pair and receives from
// the second), in the order of first use, so that a communicator can
// open those links in advance.
func GatherScatterPeers(g *Graph, c, rank int) ([]int, error) {
	order, idx, err := ringIndex(g, c)
	if err != nil {
		return nil, err
	}
	n := len(order)
	if n&(n-1) == 0 {
		return HalvingDoublingPeers(g, c, rank)
	}
	if rank < 0 || rank >= n {
		return nil, badReq("rank %d not in 0..%d", rank, n-1)
	}
	v := idx[rank]
	var out []int
	for d := 1; d < n; d *= 2 {
		for _, p := range []int{order[(v-d+n)%n], order[(v+d)%n]} {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// bruckBlocks calls f for every rank of the ring order, each chunk of
// this channel's part of the blocks, and each block in reduce-scatter
// order (backwards: in the reverse of it, chunk by chunk), with the
// block's owner and the ranks the allgather takes it from (−1 for the
// rank's own block) and forwards it to.
func bruckBlocks(order []int, cp ChannelPart, chunk int64, backwards bool, f func(r int, off, cnt int64, owner, from int, to []int)) {
	n := len(order)
	ord := slices.DeleteFunc(hdUnitOrder(1<<log2Floor(2*n-1)), func(w int) bool { return w >= n })
	if backwards {
		slices.Reverse(ord)
	}
	for v, r := range order {
		froms, tos := make([]int, n), make([][]int, n)
		for w := range n {
			from, to := bruckLinks(n, v, w)
			froms[w], tos[w] = -1, make([]int, len(to))
			if from >= 0 {
				froms[w] = order[from]
			}
			for i, p := range to {
				tos[w][i] = order[p]
			}
		}
		chunks(cp, chunk, func(off, cnt int64) {
			for _, w := range ord {
				f(r, off, cnt, order[(v+w)%n], froms[w], tos[w])
			}
		})
	}
}

// bruckAllGather: a rank copies its input into its block of the output
// and sends it to every v−D; a block at distance w it receives from
// v+D, writes, and forwards where bruckLinks says (RecvCopySend, or a
// plain Recv at the leaves).
func (b *planBuilder) bruckAllGather(order []int, c int, cp ChannelPart, part Partition, count int64) {
	bruckBlocks(order, cp, part.ChunkElems, true, func(r int, off, cnt int64, owner, from int, to []int) {
		dst := outRef(int64(owner)*count + off)
		switch {
		case from < 0:
			b.add(r, c, 0, Step{Prim: Send, SendTo: to, Src: inRef(off), Count: cnt})
			b.add(r, c, 0, Step{Prim: Copy, Src: inRef(off), Dst: dst, Count: cnt})
		case len(to) == 0:
			b.add(r, c, 0, Step{Prim: Recv, RecvFrom: peers(from), Dst: dst, Count: cnt})
		default:
			b.add(r, c, 0, Step{Prim: RecvCopySend, RecvFrom: peers(from), SendTo: to, Dst: dst, Count: cnt})
		}
	})
}

// bruckReduceScatter is the allgather backwards: a rank adds what the
// ranks it would forward a block to sent it for that block to its input's
// block and hands the sum on to the rank it would have received the
// block from (RecvReduceSend, or a plain Send at the leaves); it reduces
// its own block from all of them into its output.
func (b *planBuilder) bruckReduceScatter(order []int, c int, cp ChannelPart, part Partition, count int64) {
	bruckBlocks(order, cp, part.ChunkElems, false, func(r int, off, cnt int64, owner, from int, to []int) {
		src := inRef(int64(owner)*count + off)
		switch {
		case from < 0:
			b.add(r, c, 0, Step{Prim: RecvReduceCopySend, RecvFrom: to, Src: src, Dst: outRef(off), Count: cnt})
		case len(to) == 0:
			b.add(r, c, 0, Step{Prim: Send, SendTo: peers(from), Src: src, Count: cnt})
		default:
			b.add(r, c, 0, Step{Prim: RecvReduceSend, RecvFrom: to, SendTo: peers(from), Src: src, Count: cnt})
		}
	})
}
