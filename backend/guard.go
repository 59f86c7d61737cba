package backend

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/gotree/gotree/algorithms"
)

// Writes into a peer's buffers (direct plans: ReadReduceCopy's WriteTo)
// must never land after the peer's call has returned: its caller may
// already be using that memory for something else, and a write there
// would corrupt another process. On success the plan's last round orders
// every write before the owner returns; the guard covers failures (a
// timeout, an abort), where the owner gives up without that round.
//
// Each direction of a link carries two words of its sender: live (the
// sender is inside the call with this token: its buffers may be written)
// and writing (the sender is writing into the receiver's buffers for the
// call with this token). A writer stores writing, then loads the owner's
// live, before each fragment it writes, and clears writing after it; an
// owner clears live when it leaves the call, then loads each writer's
// writing and waits while it still holds the call's token. Go's atomics
// are sequentially consistent, so one of the two sees the other's store:
// either the writer sees that the owner left and does not write, or the
// owner sees the write in progress and waits for it to end.

// guardWords are a link's guard words: ours (in our direction) and the
// peer's (in its direction).
type guardWords struct {
	myLive, myWriting, peerLive, peerWriting *uint64
	// gone reports whether the peer's process is known to have exited
	// (it can write nothing any more); nil: never known.
	gone func() bool
}

// guarded is a link that carries guard words (shared memory, in-memory).
// guard returns them and keeps them valid (the link mapped) until release.
type guarded interface {
	guard() (g guardWords, release func(), ok bool)
}

// guardToken is a call's token in the guard words: its tag, never 0.
func guardToken(tag uint32) uint64 { return uint64(tag) | 1<<32 }

// callGuard holds the guard words of one call's links to the peers that
// write into this rank's buffers and to those it writes into.
type callGuard struct {
	token   uint64
	links   map[int]guardWords // by peer
	release []func()
}

// writePeers returns, for rank me of p, the peers that write into its
// buffers and the peers it writes into, with the channel of the step.
func writePeers(p *algorithms.Plan, me int) map[int]int {
	peers := map[int]int{}
	for _, rp := range p.Ranks {
		for _, cp := range rp.Channels {
			for _, st := range cp.Streams {
				for _, s := range st {
					for _, q := range s.WriteTo {
						switch {
						case rp.Rank == me:
							peers[q] = cp.Channel
						case q == me:
							peers[rp.Rank] = cp.Channel
						}
					}
				}
			}
		}
	}
	return peers
}

// enterCall marks this rank live for the call on every link of a plan
// with writes into peers' buffers (nil when it has none). It runs before
// the rank tells any peer where its buffers are.
func (x *executor) enterCall(rank int) (*callGuard, error) {
	if x.p.Algo != algorithms.Direct {
		return nil, nil // only direct plans write into peers (beginWrite refuses otherwise)
	}
	peers := writePeers(x.p, rank)
	if len(peers) == 0 {
		return nil, nil
	}
	cg := &callGuard{token: guardToken(x.tag), links: map[int]guardWords{}}
	for peer, ch := range peers {
		c, err := x.conn(ch, peer)
		if err != nil {
			cg.leave()
			return nil, err
		}
		gc, ok := c.(guarded)
		if !ok {
			cg.leave()
			return nil, fmt.Errorf("gotree/backend: the link to rank %d on channel %d cannot guard writes into a peer's memory (%T); direct plans need shared-memory links", peer, ch, c)
		}
		g, release, ok := gc.guard()
		if !ok {
			cg.leave()
			return nil, &PeerError{Peer: peer, Channel: ch, Op: "write", Err: ErrClosed}
		}
		cg.links[peer] = g
		cg.release = append(cg.release, release)
		atomic.StoreUint64(g.myLive, cg.token)
	}
	return cg, nil
}

// leaveGuardWait bounds how long a rank that leaves a call waits for a
// peer's write into its buffers to end (a live writer ends one fragment's
// copy in microseconds; a stopped process may never).
const leaveGuardWait = 5 * time.Second

// leave marks this rank gone from the call, waits until no peer is still
// writing into its buffers for it, and lets the links go. The error names
// a peer that still was when the wait ran out.
func (cg *callGuard) leave() error {
	if cg == nil {
		return nil
	}
	defer func() {
		for _, r := range cg.release {
			r()
		}
	}()
	for _, g := range cg.links {
		atomic.StoreUint64(g.myLive, 0)
	}
	var err error
	deadline := time.Now().Add(leaveGuardWait)
	for peer, g := range cg.links {
		for i := 0; atomic.LoadUint64(g.peerWriting) == cg.token; i++ {
			if g.gone != nil && g.gone() {
				break
			}
			if time.Now().After(deadline) {
				err = errors.Join(err, fmt.Errorf("gotree/backend: rank %d was still writing into this rank's buffers %v after the call ended; do not reuse them", peer, leaveGuardWait))
				break
			}
			if i < 64 {
				runtime.Gosched()
			} else {
				time.Sleep(20 * time.Microsecond)
			}
		}
	}
	return err
}

// beginWrite announces a write into peer's buffers and checks that the
// peer is still in the call; endWrite must follow when it returns nil.
func (cg *callGuard) beginWrite(peer, ch int) error {
	var g guardWords
	ok := cg != nil
	if ok {
		g, ok = cg.links[peer]
	}
	if !ok {
		return fmt.Errorf("gotree/backend: the plan writes into rank %d's memory, which the call did not guard", peer)
	}
	atomic.StoreUint64(g.myWriting, cg.token)
	if atomic.LoadUint64(g.peerLive) != cg.token {
		atomic.StoreUint64(g.myWriting, 0)
		return &PeerError{Peer: peer, Channel: ch, Op: "write", Err: fmt.Errorf("%w: it has left the call (failed or timed out); its buffers are not written", ErrClosed)}
	}
	return nil
}

func (cg *callGuard) endWrite(peer int) { atomic.StoreUint64(cg.links[peer].myWriting, 0) }
