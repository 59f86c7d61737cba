package algorithms

import "fmt"

// Transfer is one point-to-point message of a local plan: Count elements
// at element offset Off of the rank's input (a send) or output (a receive).
type Transfer struct {
	Peer  int
	Off   int64
	Count int64
}

// LocalCopy is a copy within one rank, from its input to its output.
type LocalCopy struct {
	Src, Dst, Count int64
}

// P2POptions tunes LocalP2PPlan.
type P2POptions struct {
	// OneStream > 0 puts everything in one stream instead where every
	// transfer's bytes are at most OneStream: the sends (in the order
	// given), then the copies, then the receives (in the order given). A
	// caller sets it to what a link's FIFO holds besides the call's other
	// messages, so that no send waits for its receiver and a rank that
	// sends before it receives never waits for itself (as one-shot does);
	// that spares the executor one goroutine per transfer, which on ranks
	// sharing CPUs costs more than the messages (4 ranks on 2 CPUs, a
	// 4 KiB all-to-all through torch: see docs/bench.md).
	OneStream int64
	// DirectMin > 0 moves the transfers with a peer of DirectWith
	// single-copy where the larger of the two (to it and from it) is at
	// least DirectMin bytes: the sender Offers its block, the receiver
	// ReadCopies it straight from the sender's memory and Notifies it when
	// done, and the sender Waits for that before it returns. Both ranks of
	// a pair see the same two counts, so they decide alike.
	DirectMin int64
	// DirectWith[p] says that this rank and p can read each other's
	// memory (the caller's to know, the same on both sides of a pair).
	DirectWith []bool
}

// LocalP2PPlan plans one rank's side of a point-to-point pattern
// (all-to-all, gather, scatter, send/recv) on channel ch: every send and
// every receive gets a stream of its own so that all of them progress at
// once (a rank that sends a large block to one peer while receiving one
// from another never waits for itself), and copies run in one more stream
// (see P2POptions for the alternatives). Only rank's entry of Plan.Ranks
// has steps: the peers plan their own sides, and their counts must match
// (executors check each message's length). Transfers with zero count are
// dropped.
//
// The single-copy transfers (DirectMin) share one stream, which uses no
// link that another stream uses: its Offers (in send order) and the local
// copies, then per receive (in order) Wait for the offer, ReadCopy and
// Notify, then a Wait per offer. Every rank offers before it waits, so no
// rank waits for one that waits for it.
func LocalP2PPlan(coll Collective, nranks, rank, ch int, dt DType, sends, recvs []Transfer, copies []LocalCopy, opt P2POptions) (*Plan, error) {
	if nranks < 1 || rank < 0 || rank >= nranks {
		return nil, badReq("rank %d outside [0, %d)", rank, nranks)
	}
	if !dt.Valid() {
		return nil, badReq("unknown dtype %v", dt)
	}
	p := &Plan{Coll: coll, Algo: Ring, Proto: Simple, NRanks: nranks, DType: dt, Channels: ch + 1, Ranks: make([]RankPlan, nranks)}
	for r := range p.Ranks {
		p.Ranks[r].Rank = r
	}
	check := func(kind string, t Transfer) error {
		switch {
		case t.Peer < 0 || t.Peer >= nranks:
			return badReq("%s peer %d outside [0, %d)", kind, t.Peer, nranks)
		case t.Peer == rank:
			return badReq("%s to itself (use a LocalCopy)", kind)
		case t.Off < 0 || t.Count < 0:
			return badReq("%s to peer %d has negative offset or count", kind, t.Peer)
		}
		return nil
	}
	for _, t := range sends {
		if err := check("send", t); err != nil {
			return nil, err
		}
	}
	for _, t := range recvs {
		if err := check("receive", t); err != nil {
			return nil, err
		}
	}
	var local Stream
	for _, c := range copies {
		if c.Src < 0 || c.Dst < 0 || c.Count < 0 {
			return nil, badReq("local copy %+v has a negative field", c)
		}
		if c.Count > 0 {
			local = append(local, Step{Prim: Copy, Src: Ref{Input, c.Src}, Dst: Ref{Output, c.Dst}, Count: c.Count})
		}
	}
	direct := directPeers(sends, recvs, int64(dt.Size()), opt)
	cp := ChannelPlan{Channel: ch}
	if len(direct) > 0 {
		var ds Stream
		for _, t := range sends {
			if direct[t.Peer] && t.Count > 0 {
				ds = append(ds, Step{Prim: Offer, SendTo: []int{t.Peer}, Src: Ref{Input, t.Off}, Count: t.Count})
			}
		}
		ds = append(ds, local...)
		local = nil
		for _, t := range recvs {
			if direct[t.Peer] && t.Count > 0 {
				ds = append(ds,
					Step{Prim: Wait, RecvFrom: []int{t.Peer}, Count: 1},
					Step{Prim: ReadCopy, ReadFrom: []int{t.Peer}, Dst: Ref{Output, t.Off}, Count: t.Count},
					Step{Prim: Notify, SendTo: []int{t.Peer}, Count: 1})
			}
		}
		for _, t := range sends {
			if direct[t.Peer] && t.Count > 0 {
				ds = append(ds, Step{Prim: Wait, RecvFrom: []int{t.Peer}, Count: 1})
			}
		}
		if len(ds) > 0 {
			cp.Streams = append(cp.Streams, ds)
		}
	}
	var sendSt, recvSt []Stream
	var fifoSends, fifoRecvs []Transfer
	for _, t := range sends {
		if t.Count > 0 && !direct[t.Peer] {
			sendSt = append(sendSt, Stream{{Prim: Send, SendTo: []int{t.Peer}, Src: Ref{Input, t.Off}, Count: t.Count}})
			fifoSends = append(fifoSends, t)
		}
	}
	for _, t := range recvs {
		if t.Count > 0 && !direct[t.Peer] {
			recvSt = append(recvSt, Stream{{Prim: Recv, RecvFrom: []int{t.Peer}, Dst: Ref{Output, t.Off}, Count: t.Count}})
			fifoRecvs = append(fifoRecvs, t)
		}
	}
	n := len(sendSt) + len(recvSt)
	if len(local) > 0 {
		n++
	}
	if opt.OneStream > 0 && n > 1 && fitsOneStream(fifoSends, fifoRecvs, int64(dt.Size()), opt.OneStream) {
		var one Stream
		for _, s := range sendSt {
			one = append(one, s...)
		}
		one = append(one, local...)
		for _, s := range recvSt {
			one = append(one, s...)
		}
		cp.Streams = append(cp.Streams, one)
	} else {
		cp.Streams = append(append(cp.Streams, sendSt...), recvSt...)
		if len(local) > 0 {
			cp.Streams = append(cp.Streams, local)
		}
	}
	if len(cp.Streams) > 0 {
		p.Ranks[rank].Channels = []ChannelPlan{cp}
	}
	return p, nil
}

// Direct says whether this rank and peer, which send each other sent and
// received bytes, move them single-copy. Every data-carrying message of
// such a pair is then a descriptor: each rank of the pair sends the other
// at least one (an Offer, or the Notify after reading its offer).
func (o P2POptions) Direct(peer int, sent, received int64) bool {
	return o.DirectMin > 0 && peer >= 0 && peer < len(o.DirectWith) && o.DirectWith[peer] &&
		max(sent, received) >= o.DirectMin
}

// directPeers returns the peers whose transfers move single-copy
// (P2POptions.Direct). Every caller has at most one send to and one
// receive from a peer, so the pair's larger block reaches the bound when
// either transfer does; nothing is allocated when none does.
func directPeers(sends, recvs []Transfer, esize int64, opt P2POptions) map[int]bool {
	var d map[int]bool
	for _, l := range [][]Transfer{sends, recvs} {
		for _, t := range l {
			if opt.Direct(t.Peer, t.Count*esize, 0) {
				if d == nil {
					d = map[int]bool{}
				}
				d[t.Peer] = true
			}
		}
	}
	return d
}

// fitsOneStream says whether every transfer moves at most limit bytes.
func fitsOneStream(sends, recvs []Transfer, esize, limit int64) bool {
	for _, l := range [][]Transfer{sends, recvs} {
		for _, t := range l {
			if t.Count*esize > limit {
				return false
			}
		}
	}
	return true
}

// AllToAllTransfers returns rank's sends, receives and self-copy for an
// all-to-all with per-peer counts and displacements (in elements): rank
// sends sendCounts[p] elements at sendDispls[p] to p and receives
// recvCounts[p] elements at recvDispls[p] from p.
func AllToAllTransfers(rank int, sendCounts, sendDispls, recvCounts, recvDispls []int64) (sends, recvs []Transfer, copies []LocalCopy, err error) {
	n := len(sendCounts)
	if len(sendDispls) != n || len(recvCounts) != n || len(recvDispls) != n {
		return nil, nil, nil, badReq("all-to-all: split lists have lengths %d, %d, %d, %d; want %d each", len(sendCounts), len(sendDispls), len(recvCounts), len(recvDispls), n)
	}
	if rank < 0 || rank >= n {
		return nil, nil, nil, badReq("all-to-all: rank %d outside [0, %d)", rank, n)
	}
	if sendCounts[rank] != recvCounts[rank] {
		return nil, nil, nil, fmt.Errorf("%w: all-to-all: rank %d sends %d elements to itself but expects %d", ErrBadRequest, rank, sendCounts[rank], recvCounts[rank])
	}
	copies = append(copies, LocalCopy{Src: sendDispls[rank], Dst: recvDispls[rank], Count: sendCounts[rank]})
	// Peers in order of distance: rank sends to rank+k while rank+k
	// receives from it at the same position of its list.
	for k := 1; k < n; k++ {
		to, from := (rank+k)%n, (rank-k+n)%n
		sends = append(sends, Transfer{Peer: to, Off: sendDispls[to], Count: sendCounts[to]})
		recvs = append(recvs, Transfer{Peer: from, Off: recvDispls[from], Count: recvCounts[from]})
	}
	return sends, recvs, copies, nil
}
