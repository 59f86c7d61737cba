package algorithms

// Direct (single-copy) allreduce for ranks that share a host and can read
// and write each other's memory (on Linux: process_vm_readv and
// process_vm_writev, or plain loads and stores between ranks of one
// process). The message is cut into one slice per rank; rank r owns slice
// r. Per rank:
//
//  1. Notify every peer (my buffers are ready), Wait for every peer.
//  2. ReadReduceCopy: my slice of my input, reduced with the same slice of
//     every peer's input read in place, into my output and into the same
//     slice of every peer's output (WriteTo).
//  3. Notify / Wait: nobody reads or writes my buffers any more; the call
//     may return.
//
// A rank reads (n−1)/n of the message from its peers and writes (n−1)/n
// to them: 2(n−1)/n of the message moves per rank, as in the ring, but
// each byte is copied once (no FIFO in between), from where it was just
// computed, and there are two rounds of small messages instead of 2(n−1)
// dependent steps, which keeps oversubscribed ranks (more ranks than
// cores) from waiting on each other's time slices. In place, the write
// of slice r into a peer's output overwrites the peer's input slice r,
// which only rank r reads, and only before it writes.
//
// Peers are visited starting after the rank itself (r+1, r+2, …) so that
// the ranks do not all read rank 0 first. Everything runs on channel 0 in
// one stream; the links used are every pair of ranks.

// directRounds is the number of notification rounds of a direct plan.
const directRounds = 2

// directSlice is rank r's slice of count elements among n ranks: the first
// count mod n ranks get one element more.
func directSlice(count int64, n, r int) (off, cnt int64) {
	q, rem := count/int64(n), count%int64(n)
	off = int64(r)*q + min(int64(r), rem)
	cnt = q
	if int64(r) < rem {
		cnt++
	}
	return off, cnt
}

// Direct allgather and reduce-scatter are the two halves of it, with the
// same two rounds: in an allgather each rank copies its input into its
// block of its own output and of every peer's (a ReadReduceCopy that
// reads no peer: n−1 blocks written per rank, once each, no FIFO); in a
// reduce-scatter each rank reduces its block of every peer's input, read
// in place, with its own into its output (n−1 blocks read). In place
// (the input is the own block of the output, or the output the own block
// of the input) nothing that one rank writes is read by another.

// directAllGather adds every rank's direct allgather steps (n ≥ 2): count
// elements per rank.
func (b *planBuilder) directAllGather(n int, count int64) {
	for r := 0; r < n; r++ {
		peers, round := b.roundsOf(r, n)
		round()
		b.add(r, 0, 0, Step{Prim: ReadReduceCopy, WriteTo: peers, Src: Ref{Input, 0}, Dst: Ref{Output, int64(r) * count}, Count: count})
		round()
	}
}

// directReduceScatter adds every rank's direct reduce-scatter steps (n ≥
// 2): count elements per rank's output.
func (b *planBuilder) directReduceScatter(n int, count int64) {
	for r := 0; r < n; r++ {
		peers, round := b.roundsOf(r, n)
		round()
		b.add(r, 0, 0, Step{Prim: ReadReduceCopy, ReadFrom: peers, Src: Ref{Input, int64(r) * count}, Dst: Ref{Output, 0}, Count: count})
		round()
	}
}

// directAllReduce adds every rank's direct allreduce steps (n ≥ 2).
func (b *planBuilder) directAllReduce(n int, count int64) {
	for r := 0; r < n; r++ {
		peers, round := b.roundsOf(r, n)
		round()
		off, cnt := directSlice(count, n, r)
		b.add(r, 0, 0, Step{Prim: ReadReduceCopy, ReadFrom: peers, WriteTo: peers, Src: Ref{Input, off}, Dst: Ref{Output, off}, Count: cnt})
		round()
	}
}

// roundsOf returns rank r's peers among n, starting after r (r+1, r+2,
// …), and a function that adds one round to r's stream on channel 0:
// Notify every peer, then Wait for every peer.
func (b *planBuilder) roundsOf(r, n int) (peers []int, round func()) {
	peers = make([]int, 0, n-1)
	for k := 1; k < n; k++ {
		peers = append(peers, (r+k)%n)
	}
	return peers, func() {
		b.add(r, 0, 0, Step{Prim: Notify, SendTo: peers, Count: 1})
		b.add(r, 0, 0, Step{Prim: Wait, RecvFrom: peers, Count: 1})
	}
}
