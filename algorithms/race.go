package algorithms

import "fmt"

// This file checks plans whose ranks read or write each other's memory
// (ReadReduceCopy's ReadFrom and WriteTo; direct.go) for data races, with
// vector clocks over the same simulation that checks the messages. Every
// stream keeps a clock; a message carries its sender's; a step's reads of peers' buffers
// and its writes to its own and to peers' are events stamped with the
// clock of the step. A read and a write of the same range, or two writes
// of it, by different ranks must be ordered one way or the other by the
// messages: otherwise the read may see some of the write's bytes, or the
// range end with a mix of both writes. Besides the plan's own writes, the
// caller writes each rank's buffers before the call (its inputs, the
// output's old contents) and may write them again once its call returns:
// a peer may read or write them only between the two. In-place calls are
// checked with the input and the output as the same memory.

// memEvent is a read or write of [off, off+count) of one rank's buffer.
type memEvent struct {
	rank   int // whose memory
	buf    Buf
	off    int64
	count  int64
	stream int   // the stream of the step (index in simulator.streams)
	clock  []int // its vector clock at the step
	where  string
}

type raceCheck struct {
	inPlace bool
	coll    Collective // in place, an allgather's input is its block of the output,
	count   int64      // and a reduce-scatter's output its block of the input
	reads   []memEvent
	writes  []memEvent
}

// touchesPeers reports whether p has steps that read or write peers'
// memory.
func touchesPeers(p *Plan) bool {
	for _, rp := range p.Ranks {
		for _, cp := range rp.Channels {
			for _, st := range cp.Streams {
				for _, s := range st {
					if len(s.ReadFrom) > 0 || len(s.WriteTo) > 0 {
						return true
					}
				}
			}
		}
	}
	return false
}

// overlap reports whether two events touch the same memory.
func (rc *raceCheck) overlap(a, b *memEvent) bool {
	if a.rank != b.rank || (a.buf != b.buf && (!rc.inPlace || a.buf == Stage || b.buf == Stage)) {
		return false
	}
	ao, bo := rc.placed(a), rc.placed(b)
	return ao < bo+b.count && bo < ao+a.count
}

// placed is e's offset in its rank's memory as the call lays it out: in
// place, an allgather's input is the rank's block of its output, and a
// reduce-scatter's output the rank's block of its input (offsets in the
// larger buffer); otherwise the buffer's own offset.
func (rc *raceCheck) placed(e *memEvent) int64 {
	switch {
	case !rc.inPlace:
	case rc.coll == AllGather && e.buf == Input, rc.coll == ReduceScatter && e.buf == Output:
		return int64(e.rank)*rc.count + e.off
	}
	return e.off
}

// before reports whether a happens before b.
func before(a, b *memEvent) bool { return a.clock[a.stream] <= b.clock[a.stream] }

func (rc *raceCheck) check() error {
	mode := "out of place"
	if rc.inPlace {
		mode = "in place"
	}
	unordered := func(a, b *memEvent) bool { return rc.overlap(a, b) && !before(a, b) && !before(b, a) }
	for i := range rc.writes {
		w := &rc.writes[i]
		for j := range rc.reads {
			if r := &rc.reads[j]; unordered(r, w) {
				return planErr("race (%s): %s reads rank %d's %v[%d:%d] while %s writes %v[%d:%d], and no message orders them",
					mode, r.where, r.rank, r.buf, r.off, r.off+r.count, w.where, w.buf, w.off, w.off+w.count)
			}
		}
		for j := range rc.writes[:i] {
			if v := &rc.writes[j]; unordered(v, w) {
				return planErr("race (%s): %s and %s both write rank %d's memory (%v[%d:%d], %v[%d:%d]), and no message orders them",
					mode, v.where, w.where, w.rank, v.buf, v.off, v.off+v.count, w.buf, w.off, w.off+w.count)
			}
		}
	}
	return nil
}

// raceCaller records the caller's writes of every buffer of a
// stream's rank before and after its part of the call.
func (s *simulator) raceCaller(ss *simStream, idx int, what string) {
	ss.vc[idx]++
	inN, outN := s.plan.BufferCounts()
	for _, b := range [...]struct {
		buf Buf
		n   int64
	}{{Input, inN}, {Output, outN}} {
		s.race.writes = append(s.race.writes, memEvent{rank: ss.rank, buf: b.buf, off: 0, count: b.n, stream: idx,
			clock: append([]int(nil), ss.vc...), where: fmt.Sprintf("rank %d's caller (%s)", ss.rank, what)})
	}
}

// raceStep stamps a step that has received everything it waits for.
func (s *simulator) raceStep(ss *simStream, idx int, st *Step, got []*simMsg) {
	for _, m := range got {
		for k, v := range m.vc {
			ss.vc[k] = max(ss.vc[k], v)
		}
	}
	ss.vc[idx]++
	where := fmt.Sprintf("rank %d step %d (%v)", ss.rank, ss.pc, st.Prim)
	clock := append([]int(nil), ss.vc...)
	at := st.PeerRange()
	for _, peer := range st.ReadFrom {
		s.race.reads = append(s.race.reads, memEvent{rank: peer, buf: at.Buf, off: at.Off, count: st.Count, stream: idx, clock: clock, where: where})
	}
	if st.Dst.Buf != NoBuf {
		for _, r := range append([]int{ss.rank}, st.WriteTo...) {
			s.race.writes = append(s.race.writes, memEvent{rank: r, buf: st.Dst.Buf, off: st.Dst.Off, count: st.Count, stream: idx, clock: clock, where: where})
		}
	}
}
