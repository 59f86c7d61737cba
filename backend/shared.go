package backend

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend/reduce"
)

// This file runs the steps of shared plans (algorithms/shared.go): plain
// loads and stores into the staging regions that every rank of the host
// maps, and rounds that are counters in those regions.
//
// A region starts with a header page, then the plan's StageElems
// elements. The header holds the rank's round counter and a flag that
// says a peer sleeps on it. The first round of a call is a message to
// every peer over the links, as in direct plans: it carries the call's
// tag, so ranks that issued different calls fail there, naming them
// (pg/mismatch.go). Every later round only raises the rank's counter and
// waits until every peer's has reached it: no message, no system call
// unless a peer sleeps. Counters start at 0 and every call raises all of
// them by the same number of rounds, so they agree at every call's start.
// (4 ranks on 2 CPUs, 4 MiB through torch: with every round a message
// to each peer, rounds took 2.0–2.4 ms of a 2.9 ms call.)

// StageHeaderBytes is the header at the start of every staging region.
const StageHeaderBytes = 4096

// StageRegionBytes is the size of a staging region with data bytes for
// the plans' chunks.
func StageRegionBytes(data int) int { return StageHeaderBytes + data }

const (
	stageSeqOff   = 0   // uint32: rounds this rank has reached
	stageSleepOff = 128 // uint32: 1 while a peer sleeps on the counter
)

// stageSleep is how long a sleeping round waits on the futex before it
// checks the call's deadline and the peer's link again.
const stageSleep = 20 * time.Millisecond

// useStages finds the staging regions a shared plan needs.
func (x *executor) useStages(rank int) error {
	st, ok := x.conns.(Stages)
	var region []byte
	if ok {
		region = st.Stage(rank)
	}
	need := x.p.StageElems*x.esize + StageHeaderBytes
	if !ok || int64(len(region)) < need {
		return fmt.Errorf("gotree/backend: a %v plan needs a staging region of %d bytes on rank %d, which has %d", x.p.Algo, need, rank, len(region))
	}
	x.stages = st
	x.stage = region[StageHeaderBytes:]
	x.stageSeq, x.stageSleep = stageWord(region, stageSeqOff), stageWord(region, stageSleepOff)
	x.stagePolicy = st.StagePolicy()
	return nil
}

func stageWord(region []byte, off int) *uint32 {
	return (*uint32)(unsafe.Pointer(&region[off]))
}

// sharedRound runs a Notify or Wait of a shared plan. The call's first
// round is a token message to (from) every peer, with the call's tag.
// Later rounds are counters: Notify raises this rank's counter, waking
// peers that sleep on it; Wait waits until every peer in RecvFrom has
// reached this rank's counter.
func (x *executor) sharedRound(ctx context.Context, ch int, st *algorithms.Step, first bool) error {
	if first {
		var token [8]byte
		peers := st.SendTo
		if st.Prim == algorithms.Wait {
			peers = st.RecvFrom
		}
		for _, peer := range peers {
			c, err := x.conn(ch, peer)
			if err != nil {
				return err
			}
			if st.Prim == algorithms.Notify {
				err = c.Send(ctx, x.tag, token[:])
			} else if _, err = x.recvExact(ctx, c, peer, ch, int64(len(token))); err == nil {
				c.Release()
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	if st.Prim == algorithms.Notify {
		atomic.AddUint32(x.stageSeq, 1)
		if atomic.LoadUint32(x.stageSleep) != 0 {
			atomic.StoreUint32(x.stageSleep, 0)
			futexWake(x.stageSeq)
		}
		return nil
	}
	want := atomic.LoadUint32(x.stageSeq)
	for _, peer := range st.RecvFrom {
		region := x.stages.Stage(peer)
		if len(region) < StageHeaderBytes {
			return fmt.Errorf("gotree/backend: rank %d has no staging region", peer)
		}
		seq, sleep := stageWord(region, stageSeqOff), stageWord(region, stageSleepOff)
		ready := func() bool { return int32(atomic.LoadUint32(seq)-want) >= 0 }
		if err := x.awaitCounter(ctx, ch, peer, ready, seq, sleep, x.stagePolicy); err != nil {
			return err
		}
	}
	return nil
}

// awaitCounter waits until ready, as a link's wait does: polling, then
// yielding the processor, then sleeping on the peer's counter, checking
// the call's deadline and the peer's link between sleeps.
func (x *executor) awaitCounter(ctx context.Context, ch, peer int, ready func() bool, seq, sleep *uint32, pol WaitPolicy) error {
	if pollThenYield(ctx, ready, pol) {
		return nil
	}
	for {
		v := atomic.LoadUint32(seq)
		atomic.StoreUint32(sleep, 1)
		if ready() {
			return nil
		}
		futexWait(seq, v, stageSleep)
		if ready() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return &PeerError{Peer: peer, Channel: ch, Op: "wait", Err: ctxErr(ctx)}
		}
		if c, err := x.conn(ch, peer); err == nil {
			if f, ok := c.(failureReporter); ok {
				if err := f.failure(0); err != nil {
					return &PeerError{Peer: peer, Channel: ch, Op: "wait", Err: err}
				}
			}
		}
	}
}

// peerStage is the range r of count elements of peer's staging region.
func (x *executor) peerStage(peer int, r algorithms.Ref, count int64) ([]byte, error) {
	b := x.stages.Stage(peer)
	if len(b) < StageHeaderBytes {
		return nil, fmt.Errorf("gotree/backend: rank %d has no staging region", peer)
	}
	b = b[StageHeaderBytes:]
	lo, hi := r.Off*x.esize, (r.Off+count)*x.esize
	if lo < 0 || hi > int64(len(b)) {
		return nil, fmt.Errorf("gotree/backend: the plan touches [%d,%d) bytes of rank %d's staging region, which has %d", lo, hi, peer, len(b))
	}
	return b[lo:hi:hi], nil
}

// sharedStep runs a PeerCopy, or a ReadReduceCopy of staged chunks: src
// (this rank's operand) and then the range Step.PeerRange of every
// ReadFrom peer's region, reduced into dst.
func (x *executor) sharedStep(st *algorithms.Step, src, dst []byte) error {
	if st.Prim == algorithms.PeerCopy {
		b, err := x.peerStage(st.ReadFrom[0], st.PeerRange(), st.Count)
		if err != nil {
			return err
		}
		if x.stream {
			reduce.CopyStream(dst, b)
		} else {
			copy(dst, b)
		}
		return nil
	}
	at := st.PeerRange()
	for k, peer := range st.ReadFrom {
		b, err := x.peerStage(peer, at, st.Count)
		if err != nil {
			return err
		}
		if k == 0 {
			reduce.Into3(dst, src, b, x.p.DType, x.p.Op)
		} else {
			reduce.Into(dst, b, x.p.DType, x.p.Op)
		}
	}
	return nil
}
