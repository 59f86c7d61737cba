package algorithms

// Direct (single-copy) allreduce for ranks that share a host and can read
// each other's memory (on Linux: process_vm_readv, or plain loads between
// ranks of one process). The message is cut into one slice per rank; rank
// r owns slice r. Per rank:
//
//  1. Notify every peer (my buffers are ready), Wait for every peer.
//  2. ReadReduceCopy: my slice of my input, reduced with the same slice of
//     every peer's input read in place, into my output.
//  3. Notify / Wait: every slice is final and nobody reads inputs any more.
//  4. ReadCopy every other slice from its owner's output into mine.
//  5. Notify / Wait: nobody reads my output any more; the call may return.
//
// A rank reads (n−1)/n of the message to reduce and (n−1)/n to gather and
// writes it once: 2(n−1)/n of the message moves per rank, as in the ring,
// but each byte is copied once (no FIFO in between) and there are three
// rounds of small messages instead of 2(n−1) dependent steps, which keeps
// oversubscribed ranks (more ranks than cores) from waiting on each
// other's time slices. In place, step 4 overwrites input slices that peers
// read in step 2; the round of step 3 orders them.
//
// Peers are visited starting after the rank itself (r+1, r+2, …) so that
// the ranks do not all read rank 0 first. Everything runs on channel 0 in
// one stream; the links used are every pair of ranks.

// directRounds is the number of notification rounds of a direct plan.
const directRounds = 3

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

// directAllReduce adds every rank's direct allreduce steps (n ≥ 2).
func (b *planBuilder) directAllReduce(n int, count int64) {
	for r := 0; r < n; r++ {
		peers := make([]int, 0, n-1)
		for k := 1; k < n; k++ {
			peers = append(peers, (r+k)%n)
		}
		round := func() {
			b.add(r, 0, 0, Step{Prim: Notify, SendTo: peers, Count: 1})
			b.add(r, 0, 0, Step{Prim: Wait, RecvFrom: peers, Count: 1})
		}
		round()
		off, cnt := directSlice(count, n, r)
		b.add(r, 0, 0, Step{Prim: ReadReduceCopy, ReadFrom: peers, Src: Ref{Input, off}, Dst: Ref{Output, off}, Count: cnt})
		round()
		for _, j := range peers {
			off, cnt := directSlice(count, n, j)
			b.add(r, 0, 0, Step{Prim: ReadCopy, ReadFrom: []int{j}, Src: Ref{Output, off}, Dst: Ref{Output, off}, Count: cnt})
		}
		round()
	}
}
