package algorithms

// One-shot allreduce for small messages on one host. Per rank r:
//
//  1. Send: the whole input to every other rank (r+1, r+2, …, so that
//     the ranks do not all serve rank 0 first).
//  2. RecvReduceCopySend: receive every other rank's input and fold all n
//     inputs left to right in rank order (the own input at position r,
//     Step.SrcAt) into the output.
//
// Every rank computes the same fold of the same operands, so every rank
// gets the same bits, as with the ring. The critical path is one hop
// instead of the ring's 2(n−1), at the price of bandwidth: a rank sends
// and receives (n−1) whole messages. With more ranks than cores (4 ranks
// on 2 cores) the hops are what costs, each a hand-off between processes
// that wait for a time slice: there it wins for small messages.
//
// Each rank sends before it receives, in one stream: a message must fit
// one FIFO slot (OneShotMaxBytes), so that a rank's sends of one call
// never wait for a peer to receive. A rank can run at most one call ahead
// of a peer (it needs the peer's message to finish a call), so a link
// holds at most two of its messages, fewer than its slots. In place, the
// sends have read the input before the fold overwrites it.

// OneShotMaxBytes is the largest message one-shot plans run: a quarter of
// the CPU transports' default FIFO slot (backend.DefaultSlotBytes, 128
// KiB). Above it the (n−1)-fold traffic does not pay: on 2 cores at 2
// ranks one-shot tied the ring at 64 KiB with hot buffers and lost by
// about 10% through torch, where the buffers are cold.
const OneShotMaxBytes = 32 << 10

// maxOneShotRanks bounds the ranks of one-shot plans: each rank receives
// n−1 messages per call and every pair of ranks needs a link.
const maxOneShotRanks = 8

// OneShotUsable says whether one-shot plans exist for n ranks on nodes
// nodes and a message of bytes bytes.
func OneShotUsable(n, nodes int, bytes int64) bool {
	return n >= 2 && n <= maxOneShotRanks && nodes <= 1 && bytes <= OneShotMaxBytes
}

// oneShotAllReduce adds every rank's one-shot steps (n ≥ 2).
func (b *planBuilder) oneShotAllReduce(n int, count int64) {
	for r := 0; r < n; r++ {
		to := make([]int, 0, n-1)
		for k := 1; k < n; k++ {
			to = append(to, (r+k)%n)
		}
		from := make([]int, 0, n-1)
		for q := 0; q < n; q++ {
			if q != r {
				from = append(from, q)
			}
		}
		b.add(r, 0, 0, Step{Prim: Send, SendTo: to, Src: Ref{Input, 0}, Count: count})
		b.add(r, 0, 0, Step{Prim: RecvReduceCopySend, RecvFrom: from, SrcAt: r, Src: Ref{Input, 0}, Dst: Ref{Output, 0}, Count: count})
	}
}
