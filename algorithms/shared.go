package algorithms

// Shared allreduce, for the ranks of one host: every rank maps a staging
// region of every other rank (shared memory), of 2·C elements — C for
// its chunk of the input, C for the reduced slices. The message is cut
// into chunks of at most C elements; per chunk, on rank r:
//
//  1. Copy the chunk of the input, but for r's own slice of it, into the
//     first half of r's region (no peer reads r's slice of r's chunk).
//  2. Notify every peer, Wait for every peer: every chunk is staged.
//  3. ReadReduceCopy: r's slice of the chunk, from r's input and then
//     from every peer's region (r+1, r+2, …; Step.PeerSrc), reduced into
//     the second half of r's region.
//  4. Notify / Wait: every slice is reduced.
//  5. Copy every rank's reduced slice (PeerCopy from the peers' regions)
//     into the output.
//
// All moves are loads and stores into memory every rank maps: no system
// call per byte (direct's process_vm_readv/writev pin every page they
// touch) and no FIFO between pairs. A rank reads its chunk once (the
// peers' slices copied in, its own reduced from where it is) and copies
// the whole result out — the bytes the memory-traffic bound counts — and the
// reduction reads the staged chunks from the cache (C is chosen to keep
// n of them there).
//
// Two rounds per chunk are enough, also across calls: the next chunk (or
// the next call) writes r's input half only after round 2, when every
// peer has finished reading it in step 3, and writes r's reduced half
// only after the next round 1, when every peer has finished copying it
// out in step 5. No rank reads or writes another rank's input or output
// buffers, so a rank that fails or times out leaves nothing writing into
// its caller's memory.

// SharedStageBytes is the default chunk of a shared plan per rank: half a
// staging region. 4 ranks on 2 cores through a shared segment (a C
// prototype, 2026-12-03) took 1.3–1.5 ms per 4 MiB allreduce of cold
// buffers with 512 KiB chunks, 2.9 ms with the whole 4 MiB in one chunk
// (which leaves the cache before it is reduced), 1.6 ms with 128 KiB.
const SharedStageBytes = 512 << 10

// SharedStageElems is the size of a rank's staging region for chunks of
// chunkBytes of elements of esize bytes (at least one element per rank).
func SharedStageElems(chunkBytes, esize, n int) int64 {
	c := max(int64(chunkBytes/esize), int64(n))
	return 2 * c
}

// SharedUsable reports whether a shared plan can run n ranks on nodes
// hosts: two or more ranks, all on one host.
func SharedUsable(n, nodes int) bool { return n >= 2 && nodes <= 1 }

// sharedAllReduce adds every rank's shared allreduce steps (n ≥ 2) for
// staging regions of stageElems elements.
func (b *planBuilder) sharedAllReduce(n int, count, stageElems int64) {
	b.p.StageElems = stageElems
	chunk := stageElems / 2
	for r := 0; r < n; r++ {
		peers, round := b.roundsOf(r, n)
		for off := int64(0); off < count; off += chunk {
			m := min(chunk, count-off)
			lo, cnt := directSlice(m, n, r)
			// Only the peers' slices are staged (add drops empty
			// copies): r's own slice goes from its input straight into
			// the reduction.
			b.add(r, 0, 0, Step{Prim: Copy, Src: Ref{Input, off}, Dst: Ref{Stage, 0}, Count: lo})
			b.add(r, 0, 0, Step{Prim: Copy, Src: Ref{Input, off + lo + cnt}, Dst: Ref{Stage, lo + cnt}, Count: m - lo - cnt})
			round()
			b.add(r, 0, 0, Step{Prim: ReadReduceCopy, ReadFrom: peers, Src: Ref{Input, off + lo}, PeerSrc: Ref{Stage, lo}, Dst: Ref{Stage, chunk + lo}, Count: cnt})
			round()
			for k := 0; k < n; k++ {
				j := (r + k) % n
				lo, cnt := directSlice(m, n, j)
				if j == r {
					b.add(r, 0, 0, Step{Prim: Copy, Src: Ref{Stage, chunk + lo}, Dst: Ref{Output, off + lo}, Count: cnt})
				} else {
					b.add(r, 0, 0, Step{Prim: PeerCopy, ReadFrom: []int{j}, Src: Ref{Stage, chunk + lo}, Dst: Ref{Output, off + lo}, Count: cnt})
				}
			}
		}
	}
}
