package algorithms

import (
	"errors"
	"fmt"
	"strings"
)

// This file checks plans statically (shapes, peers, buffer bounds, one
// stream per directed connection) and dynamically: a simulation runs every
// stream of every rank with one-message FIFOs on each (channel, from, to)
// connection and reports a mismatched message, a leftover message or a
// deadlock. The oracle executor (oracle.go) runs the same simulation with
// data.

// ErrBadPlan is wrapped by every error of CheckPlan and RunOracle about
// the plan itself.
var ErrBadPlan = errors.New("gotree/algorithms: bad plan")

func planErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadPlan, fmt.Sprintf(format, args...))
}

// CheckPlan verifies p: every step is well formed (peers in range and not
// the rank itself, the operands its primitive needs and no others, Count >
// 0, operands inside the buffers of BufferCounts), no two streams of one
// rank and channel use the same directed connection, and a simulation in
// which every connection holds at most one message in flight and every
// step first receives from all its peers, then sends to all of them,
// completes: each receive meets a send of the same Count in the same order
// on its connection, no message is left over, and nothing deadlocks.
func CheckPlan(p *Plan) error {
	if err := validatePlan(p); err != nil {
		return err
	}
	if !touchesPeers(p) {
		return newSim(p, nil).run()
	}
	// Reads of peers' memory: race-free both with separate input and
	// output buffers and in place.
	for _, inPlace := range []bool{false, true} {
		s := newSim(p, nil)
		s.race = &raceCheck{inPlace: inPlace, coll: p.Coll, count: p.Count}
		if err := s.run(); err != nil {
			return err
		}
	}
	return nil
}

func validatePlan(p *Plan) error {
	if p == nil {
		return planErr("nil plan")
	}
	if p.NRanks < 1 || len(p.Ranks) != p.NRanks {
		return planErr("%d ranks but %d rank plans", p.NRanks, len(p.Ranks))
	}
	if p.Count < 0 {
		return planErr("negative count %d", p.Count)
	}
	inN, outN := p.BufferCounts()
	for r, rp := range p.Ranks {
		if rp.Rank != r {
			return planErr("rank plan %d says rank %d", r, rp.Rank)
		}
		seenCh := map[int]bool{}
		for _, cp := range rp.Channels {
			if cp.Channel < 0 || cp.Channel >= p.Channels {
				return planErr("rank %d: channel %d not in 0..%d", r, cp.Channel, p.Channels-1)
			}
			if seenCh[cp.Channel] {
				return planErr("rank %d: channel %d listed twice", r, cp.Channel)
			}
			seenCh[cp.Channel] = true
			owner := map[[2]int]int{} // {peer, dir} -> stream; dir 0 = recv, 1 = send
			for si, st := range cp.Streams {
				for k := range st {
					step := &st[k]
					where := fmt.Sprintf("rank %d channel %d stream %d step %d (%v)", r, cp.Channel, si, k, step.Prim)
					if err := checkStepStaged(step, r, p.NRanks, inN, outN, p.StageElems); err != nil {
						return planErr("%s: %v", where, err)
					}
					for dir, ps := range [2][]int{step.RecvFrom, step.SendTo} {
						for _, peer := range ps {
							key := [2]int{peer, dir}
							if o, ok := owner[key]; ok && o != si {
								d := "recv from"
								if dir == 1 {
									d = "send to"
								}
								return planErr("%s: streams %d and %d both %s %d", where, o, si, d, peer)
							}
							owner[key] = si
						}
					}
				}
			}
		}
	}
	return nil
}

func checkStep(s *Step, rank, n int, inN, outN int64) error {
	return checkStepStaged(s, rank, n, inN, outN, 0)
}

// checkStepStaged is checkStep for a plan whose ranks have staging
// regions of stageElems elements (shared plans; 0: none).
func checkStepStaged(s *Step, rank, n int, inN, outN, stageElems int64) error {
	if s.Count <= 0 {
		return fmt.Errorf("count %d", s.Count)
	}
	type shape struct {
		minFrom, maxFrom, minTo int
		src, dst                bool
	}
	var sh shape
	switch s.Prim {
	case Send:
		sh = shape{0, 0, 1, true, false}
	case Recv:
		sh = shape{1, 1, 0, false, true}
	case RecvReduceSend:
		sh = shape{1, n, 1, true, false}
	case RecvReduceCopySend:
		sh = shape{1, n, 0, true, true}
	case RecvCopySend:
		sh = shape{1, 1, 1, false, true}
	case Copy, ReadReduceCopy:
		sh = shape{0, 0, 0, true, true}
	case Notify:
		sh = shape{0, 0, 1, false, false}
	case Offer:
		sh = shape{0, 0, 1, true, false}
	case ReadCopy:
		sh = shape{0, 0, 0, false, true}
	case PeerCopy:
		sh = shape{0, 0, 0, true, true}
	case Wait:
		sh = shape{1, n, 0, false, false}
	default:
		return fmt.Errorf("unknown primitive %d", s.Prim)
	}
	switch s.Prim {
	case ReadReduceCopy:
		if len(s.ReadFrom) < 1 && len(s.WriteTo) < 1 {
			return fmt.Errorf("reads from no peer and writes to none")
		}
	case ReadCopy:
		if len(s.ReadFrom) != 1 {
			return fmt.Errorf("reads from %d peers (a ReadCopy reads one offer)", len(s.ReadFrom))
		}
	case PeerCopy:
		if len(s.ReadFrom) != 1 || s.Src.Buf != Stage {
			return fmt.Errorf("reads %v of %d peers (a PeerCopy reads one peer's staging region)", s.Src.Buf, len(s.ReadFrom))
		}
	default:
		if len(s.ReadFrom) > 0 {
			return fmt.Errorf("reads from peers %v but is no read step", s.ReadFrom)
		}
	}
	if (s.Prim == Notify || s.Prim == Wait) && s.Count != 1 {
		return fmt.Errorf("count %d (a descriptor message counts 1)", s.Count)
	}
	if s.Prim == Offer && len(s.SendTo) != 1 {
		return fmt.Errorf("offers to %d peers (an Offer names one)", len(s.SendTo))
	}
	if s.SrcAt != 0 && (s.Prim != RecvReduceSend && s.Prim != RecvReduceCopySend || s.SrcAt < 0 || s.SrcAt > len(s.RecvFrom)) {
		return fmt.Errorf("source at fold position %d (want 0..%d, and only in a reduce step)", s.SrcAt, len(s.RecvFrom))
	}
	if len(s.WriteTo) > 0 && s.Prim != ReadReduceCopy {
		return fmt.Errorf("writes to peers %v but is no ReadReduceCopy", s.WriteTo)
	}
	if len(s.RecvFrom) < sh.minFrom || len(s.RecvFrom) > sh.maxFrom {
		return fmt.Errorf("receives from %d peers", len(s.RecvFrom))
	}
	if len(s.SendTo) < sh.minTo || (sh.minTo == 0 && s.Prim != RecvReduceCopySend && len(s.SendTo) > 0) {
		return fmt.Errorf("sends to %d peers", len(s.SendTo))
	}
	for _, ps := range [][]int{s.RecvFrom, s.SendTo, s.ReadFrom, s.WriteTo} {
		seen := map[int]bool{}
		for _, q := range ps {
			if q < 0 || q >= n || q == rank {
				return fmt.Errorf("bad peer %d", q)
			}
			if seen[q] {
				return fmt.Errorf("peer %d twice", q)
			}
			seen[q] = true
		}
	}
	check := func(name string, ref Ref, need bool) error {
		if !need {
			if ref != (Ref{}) {
				return fmt.Errorf("%s operand %v set but unused", name, ref)
			}
			return nil
		}
		var size int64
		switch ref.Buf {
		case Input:
			size = inN
		case Output:
			size = outN
		case Stage:
			size = stageElems
			if size == 0 {
				return fmt.Errorf("%s operand in a staging region, which the plan does not have", name)
			}
		default:
			return fmt.Errorf("%s operand has no buffer", name)
		}
		if ref.Off < 0 || ref.Off > size-s.Count {
			return fmt.Errorf("%s %v[%d:%d] outside the %d-element buffer", name, ref.Buf, ref.Off, ref.Off+s.Count, size)
		}
		return nil
	}
	if err := check("src", s.Src, sh.src); err != nil {
		return err
	}
	if s.PeerSrc != (Ref{}) {
		if s.Prim != ReadReduceCopy || s.PeerSrc.Buf != Stage {
			return fmt.Errorf("peers' operand %v[%d] (only a ReadReduceCopy of staged chunks names one)", s.PeerSrc.Buf, s.PeerSrc.Off)
		}
		if err := check("peers'", s.PeerSrc, true); err != nil {
			return err
		}
	}
	return check("dst", s.Dst, sh.dst)
}

type simConn struct{ ch, from, to int }

type simMsg struct {
	count int64
	data  []byte
	vc    []int // the sender's vector clock (race checks)
}

type simStream struct {
	id            int // index in simulator.streams
	vc            []int
	rank, ch, idx int
	steps         Stream
	pc            int
	got           []*simMsg // per RecvFrom of the current step
	sending       bool
	payload       []byte
	sent          []bool
}

// simExec computes a step once all its messages arrived and returns the
// payload to send (nil for CheckPlan).
type simExec func(s *simStream, st *Step, got []*simMsg) ([]byte, error)

type simulator struct {
	plan    *Plan
	queues  map[simConn][]*simMsg
	streams []*simStream
	exec    simExec
	race    *raceCheck // nil: no race check (plans that touch no peer's memory)
}

// simCap is the number of messages a connection holds.
const simCap = 1

func newSim(p *Plan, exec simExec) *simulator {
	s := &simulator{plan: p, queues: map[simConn][]*simMsg{}, exec: exec}
	for r, rp := range p.Ranks {
		for _, cp := range rp.Channels {
			for i, st := range cp.Streams {
				if len(st) > 0 {
					s.streams = append(s.streams, &simStream{id: len(s.streams), rank: r, ch: cp.Channel, idx: i, steps: st})
				}
			}
		}
	}
	return s
}

func (s *simulator) advance(ss *simStream) (bool, error) {
	st := &ss.steps[ss.pc]
	moved := false
	if !ss.sending {
		if ss.got == nil {
			ss.got = make([]*simMsg, len(st.RecvFrom))
		}
		all := true
		for i, from := range st.RecvFrom {
			if ss.got[i] != nil {
				continue
			}
			k := simConn{ss.ch, from, ss.rank}
			q := s.queues[k]
			if len(q) == 0 {
				all = false
				continue
			}
			m := q[0]
			s.queues[k] = q[1:]
			if m.count != st.Count {
				return false, planErr("rank %d channel %d stream %d step %d (%v) receives %d elements from %d, which sent %d",
					ss.rank, ss.ch, ss.idx, ss.pc, st.Prim, st.Count, from, m.count)
			}
			ss.got[i] = m
			moved = true
		}
		if !all {
			return moved, nil
		}
		if s.race != nil {
			s.raceStep(ss, ss.id, st, ss.got)
		}
		if s.exec != nil {
			pl, err := s.exec(ss, st, ss.got)
			if err != nil {
				return false, err
			}
			ss.payload = pl
		}
		ss.sending = true
		ss.sent = make([]bool, len(st.SendTo))
		moved = true
	}
	all := true
	for j, to := range st.SendTo {
		if ss.sent[j] {
			continue
		}
		k := simConn{ss.ch, ss.rank, to}
		if len(s.queues[k]) >= simCap {
			all = false
			continue
		}
		m := &simMsg{count: st.Count, data: ss.payload}
		if s.race != nil {
			m.vc = append([]int(nil), ss.vc...)
		}
		s.queues[k] = append(s.queues[k], m)
		ss.sent[j] = true
		moved = true
	}
	if all {
		ss.pc++
		ss.got, ss.sent, ss.payload, ss.sending = nil, nil, nil, false
		moved = true
		if s.race != nil && ss.pc == len(ss.steps) {
			s.raceCaller(ss, ss.id, "after the call")
		}
	}
	return moved, nil
}

func (s *simulator) run() error {
	if s.race != nil {
		perRank := map[int]bool{}
		for _, ss := range s.streams {
			if perRank[ss.rank] {
				return planErr("rank %d reads peers' memory but runs several streams: such plans run one stream per rank", ss.rank)
			}
			perRank[ss.rank] = true
			ss.vc = make([]int, len(s.streams))
			s.raceCaller(ss, ss.id, "before the call")
		}
	}
	for {
		progress, done := false, true
		for _, ss := range s.streams {
			for ss.pc < len(ss.steps) {
				moved, err := s.advance(ss)
				if err != nil {
					return err
				}
				if !moved {
					break
				}
				progress = true
			}
			if ss.pc < len(ss.steps) {
				done = false
			}
		}
		if done {
			for k, q := range s.queues {
				if len(q) > 0 {
					return planErr("channel %d: %d message(s) from rank %d to rank %d never received", k.ch, len(q), k.from, k.to)
				}
			}
			if s.race != nil {
				return s.race.check()
			}
			return nil
		}
		if !progress {
			return s.deadlock()
		}
	}
}

func (s *simulator) deadlock() error {
	var b strings.Builder
	nb := 0
	for _, ss := range s.streams {
		if ss.pc >= len(ss.steps) {
			continue
		}
		nb++
		if nb > 4 {
			continue
		}
		st := ss.steps[ss.pc]
		what := fmt.Sprintf("waits to receive from %v", st.RecvFrom)
		if ss.sending {
			what = fmt.Sprintf("waits to send to %v", st.SendTo)
		}
		fmt.Fprintf(&b, "; rank %d channel %d stream %d step %d (%v) %s", ss.rank, ss.ch, ss.idx, ss.pc, st.Prim, what)
	}
	return planErr("deadlock: %d stream(s) blocked%s", nb, b.String())
}
