package algorithms

// Traffic is the number of bytes one call of the plan must move between
// the processors and main memory, summed over all ranks: what its steps
// read from their local operand (Src) and write to their result (Dst).
// Transfers between ranks pass through FIFO slots that are reused chunk
// after chunk (8 slots of 128 KiB per connection by default), so they stay
// in the caches and are not counted. Per step of b bytes: b for reading
// Src, b for writing Dst; a Copy reads and writes (2·b), or does nothing
// when in place it would copy an element onto itself.
//
// Divided by the copy bandwidth (bytes read plus written per second, all
// ranks copying at once) it is the time below which no implementation of
// the plan can go on that machine: the memory-traffic bound. An allreduce
// of S bytes on n >= 2 ranks must read every rank's input and write every
// rank's output, 2·n·S, whether ring or tree, in place or not: exactly
// what n ranks copying S bytes each at the same time move (see
// docs/bench.md).
//
// inPlace says whether the call's input and output are the same memory,
// with NCCL's offsets: allgather's input is its rank's block of the
// output, reducescatter's output its rank's block of the input.
func (p *Plan) Traffic(inPlace bool) int64 {
	es := int64(p.DType.Size())
	var total int64
	for _, rp := range p.Ranks {
		for _, cp := range rp.Channels {
			for _, st := range cp.Streams {
				for _, s := range st {
					total += stepTraffic(p, rp.Rank, s, inPlace) * es
				}
			}
		}
	}
	return total
}

// stepTraffic is one step's traffic in elements.
func stepTraffic(p *Plan, rank int, s Step, inPlace bool) int64 {
	if s.Prim == Copy && inPlace && p.sameElement(rank, s.Src, s.Dst) {
		return 0
	}
	if s.Src.Buf == Stage || s.Dst.Buf == Stage || s.PeerSrc.Buf == Stage {
		// Staging regions stay in the cache, like FIFO slots: only the
		// caller's buffers count.
		var k int64
		for _, r := range [...]Ref{s.Src, s.Dst} {
			if r.Buf == Input || r.Buf == Output {
				k++
			}
		}
		return k * s.Count
	}
	switch s.Prim {
	case ReadReduceCopy: // ours and every peer's range read, ours and WriteTo's written
		return int64(2+len(s.ReadFrom)+len(s.WriteTo)) * s.Count
	case ReadCopy: // the peer's block read, ours written
		return 2 * s.Count
	case Notify, Wait, Offer:
		return 0
	}
	var k int64
	if s.Src.Buf != NoBuf {
		k++
	}
	if s.Dst.Buf != NoBuf {
		k++
	}
	return k * s.Count
}

// sameElement reports whether two references name the same memory in an
// in-place call.
func (p *Plan) sameElement(rank int, a, b Ref) bool {
	shift := int64(rank) * p.Count // Input - Output for allgather, Output - Input for reducescatter
	at := func(x Ref) int64 {
		switch {
		case x.Buf == Input && p.Coll == AllGather:
			return x.Off + shift
		case x.Buf == Output && p.Coll == ReduceScatter:
			return x.Off + shift
		}
		return x.Off
	}
	return a.Buf != NoBuf && b.Buf != NoBuf && at(a) == at(b)
}
