package pg

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend"
)

// Stall check: ranks that issue different calls at the same sequence
// number and so run different plans can wait on each other forever.
// Every data message carries the call's tag, and a rank that reads a
// foreign one fails at once (mismatch.go); but two plans can also leave
// every rank waiting on a link that the others never write. At 4 ranks,
// an allreduce of 3 elements runs halving-doubling while one of 5 runs
// the ring: the halving-doubling rank sends to rank 2 and waits for it,
// rank 2 waits for its ring predecessor, rank 1, and rank 1 for rank 0.
// Without this check every rank waited for the timeout (30 minutes by
// default) and then reported a timeout, not the disagreement.
//
// A call that has not finished after Config.StallCheck sends its view
// (sequence number, tag, description) to both neighbours in rank order
// over a control link (made on first use, like the point-to-point ones).
// A call costs one pointer store on entry and one compare-and-swap on
// exit; a goroutine per communicator looks at the running call every
// StallCheck/2 and sends the view of one it saw in three looks in a row
// (running for StallCheck to 1.5 StallCheck).
// A rank that gets a view for the call it is running, or later starts,
// compares it with its own: a different tag at the same sequence number
// means the ranks disagree, and the rank fails its communicator with both
// views named, which wakes every peer. Comparing neighbours is enough:
// when every rank has issued call s and two disagree, some pair of
// neighbours disagrees, and both of them stall there. A rank that is
// merely late only costs its neighbours two small messages per call that
// waits longer than StallCheck.

// ctrlChannel is the channel number of the control links.
const ctrlChannel = p2pChannel - 1

// ctrlTag is the tag of control messages.
const ctrlTag uint32 = 0x67747374 // "gtst"

// DefaultStallCheck is how long a call runs before its view goes to the
// neighbours (Config.StallCheck).
const DefaultStallCheck = time.Second

// maxViewText bounds a view's description on the wire.
const maxViewText = 512

// ctrlSlotBytes is the FIFO slot of a control link: one view fits.
const ctrlSlotBytes = 1024

// callView is what a rank says about the call it is stuck in.
type callView struct {
	seq  uint64
	tag  uint32
	desc string // "allreduce #74 (3 x int64, sum) with the hd plan"
}

func (v callView) encode() []byte {
	d := v.desc
	if len(d) > maxViewText {
		d = d[:maxViewText]
	}
	b := make([]byte, 12+len(d))
	binary.LittleEndian.PutUint64(b, v.seq)
	binary.LittleEndian.PutUint32(b[8:], v.tag)
	copy(b[12:], d)
	return b
}

func decodeView(b []byte) (callView, error) {
	if len(b) < 12 || len(b) > 12+maxViewText {
		return callView{}, fmt.Errorf("a control message of %d bytes", len(b))
	}
	return callView{seq: binary.LittleEndian.Uint64(b), tag: binary.LittleEndian.Uint32(b[8:]), desc: string(b[12:])}, nil
}

// runningCall is the collective this rank runs, described only when a
// view of it is needed (most calls never are).
type runningCall struct {
	seq       uint64
	tag       uint32
	desc      fmt.Stringer
	algo      algorithms.Algorithm
	announced atomic.Bool // its view went to the neighbours
}

func (r *runningCall) view() callView {
	return callView{seq: r.seq, tag: r.tag, desc: fmt.Sprintf("%s with the %v plan", r.desc, r.algo)}
}

// stallState is the communicator's side of the check.
type stallState struct {
	cur     atomic.Pointer[runningCall] // the collective running now; nil: none
	npeers  atomic.Int32                // len(peers): the entry's fast path skips mu
	mu      sync.Mutex
	peers   map[int]callView // the latest view each neighbour sent
	readers map[int]bool     // control links with a reader
	sending map[int]bool     // neighbours a view is on its way to
	closed  bool             // the communicator is going away: no new goroutines
	wg      sync.WaitGroup   // the watcher, readers and senders
}

// goRun runs f on a goroutine of its own unless the check was closed.
func (s *stallState) goRun(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

// close waits for the watcher, readers and senders, which end once the
// communicator's context is cancelled and its links are closed.
func (s *stallState) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
}

// errStallMismatch marks a disagreement found by the stall check.
var errStallMismatch = errors.New("found by the stall check")

// stallNeighbours are the ranks this one sends its view to: both sides in
// rank order (one for two ranks).
func (c *Comm) stallNeighbours() []int {
	n := c.nranks
	prev, next := (c.rank-1+n)%n, (c.rank+1)%n
	if prev == next {
		return []int{next}
	}
	return []int{prev, next}
}

// startStallWatch starts the goroutine that sends the view of a call
// seen running in three looks StallCheck/2 apart (Init).
func (c *Comm) startStallWatch() {
	if c.nranks < 2 || c.cfg.StallCheck < 0 {
		return
	}
	every := max(c.cfg.StallCheck/2, time.Millisecond)
	c.stall.goRun(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		var seen, sent *runningCall
		looks := 0
		for {
			select {
			case <-c.ctx.Done():
				return
			case <-t.C:
			}
			r := c.stall.cur.Load()
			if r != seen {
				seen, looks = r, 0
			}
			looks++
			// Three looks: running for at least two intervals, StallCheck.
			if r != nil && looks >= 3 && r != sent {
				sent = r
				r.announced.Store(true)
				c.announceStall(r.view())
			}
		}
	})
}

// stallEnter marks r as the running call; a neighbour's view of it that
// came first is compared now.
func (c *Comm) stallEnter(r *runningCall) {
	s := &c.stall
	s.cur.Store(r)
	if s.npeers.Load() == 0 {
		return
	}
	s.mu.Lock()
	var early []peerView
	for p, pv := range s.peers {
		if pv.seq == r.seq {
			early = append(early, peerView{p, pv})
		}
	}
	s.mu.Unlock()
	for _, e := range early {
		c.compareStallView(e.peer, e.view)
	}
}

// stallLeave marks r as finished.
func (c *Comm) stallLeave(r *runningCall) { c.stall.cur.CompareAndSwap(r, nil) }

type peerView struct {
	peer int
	view callView
}

// announceStall sends v to the neighbours, each on its own goroutine: a
// neighbour that has not made the control link yet (the lower rank
// dials) may be busy elsewhere, and nobody must wait for it. A neighbour
// that still has a view on its way gets none more (a rank whose lower
// neighbour is always later than it, and never dials, keeps one
// goroutine waiting, not one per call).
func (c *Comm) announceStall(v callView) {
	c.log.Infof("COLL", "%s has not finished after %v; sending its view to ranks %v to compare", v.desc, c.cfg.StallCheck, c.stallNeighbours())
	msg := v.encode()
	s := &c.stall
	for _, p := range c.stallNeighbours() {
		s.mu.Lock()
		busy := s.sending[p]
		if !busy {
			if s.sending == nil {
				s.sending = map[int]bool{}
			}
			s.sending[p] = true
		}
		s.mu.Unlock()
		if busy {
			continue
		}
		s.goRun(func() {
			defer func() {
				s.mu.Lock()
				delete(s.sending, p)
				s.mu.Unlock()
			}()
			l, err := c.ctrlLink(p)
			if err == nil {
				ctx, cancel := context.WithTimeout(c.ctx, c.cfg.Timeout)
				err = l.Send(ctx, ctrlTag, msg)
				cancel()
			}
			if err != nil && c.ctx.Err() == nil {
				c.log.Infof("COLL", "stall check: could not send the view of %s to rank %d: %v", v.desc, p, err)
			}
		})
	}
}

// ctrlLink returns the control link with peer, making it if needed, with
// a reader on it.
func (c *Comm) ctrlLink(peer int) (backend.Conn, error) {
	l, err := c.lazyLink(linkKey{ctrlChannel, peer}, "the stall check", nil)
	if err != nil {
		return nil, err
	}
	c.startCtrlReader(peer, l)
	return l, nil
}

// startCtrlReader reads peer's views from l until the link closes (once
// per link).
func (c *Comm) startCtrlReader(peer int, l backend.Conn) {
	s := &c.stall
	s.mu.Lock()
	if s.readers[peer] {
		s.mu.Unlock()
		return
	}
	if s.readers == nil {
		s.readers = map[int]bool{}
	}
	s.readers[peer] = true
	s.mu.Unlock()
	s.goRun(func() {
		for {
			b, tag, err := l.Recv(c.ctx)
			if err != nil {
				return
			}
			v, derr := decodeView(b)
			l.Release()
			if tag != ctrlTag || derr != nil {
				c.log.Warnf("rank %d: stall check: ignoring a control message from rank %d (tag %08x): %v", c.rank, peer, tag, derr)
				continue
			}
			s.mu.Lock()
			if s.peers == nil {
				s.peers = map[int]callView{}
			}
			s.peers[peer] = v
			s.npeers.Store(int32(len(s.peers)))
			s.mu.Unlock()
			c.compareStallView(peer, v)
		}
	})
}

// compareStallView fails the communicator when peer's view is of the call
// this rank runs and differs from it.
func (c *Comm) compareStallView(peer int, pv callView) {
	cur := c.stall.cur.Load()
	if cur == nil || cur.seq != pv.seq || cur.tag == pv.tag {
		return
	}
	c.fail(fmt.Errorf("%w: rank %d: %s failed: rank %d issued %s at this point (%w: %w)",
		ErrInvalidArgument, c.rank, cur.view().desc, peer, pv.desc, errMismatch, errStallMismatch))
}

// stallNote is what the neighbours said about their own calls, for the
// error of a call that timed out after the stall check sent its view
// ("" before that): a neighbour stuck in the same call is waiting too, so
// the rank to look at is one that sent no view (it was not stuck in a
// collective of this communicator) or one stuck elsewhere.
func (c *Comm) stallNote() string {
	cur := c.stall.cur.Load()
	if cur == nil || !cur.announced.Load() {
		return ""
	}
	s := &c.stall
	var parts []string
	for _, p := range c.stallNeighbours() {
		s.mu.Lock()
		v, ok := s.peers[p]
		s.mu.Unlock()
		switch {
		case !ok:
			parts = append(parts, fmt.Sprintf("rank %d sent no view (it was not stuck in a collective of this group)", p))
		case v.seq == cur.seq && v.tag == cur.tag:
			parts = append(parts, fmt.Sprintf("rank %d is stuck in the same call", p))
		case v.seq < cur.seq:
			parts = append(parts, fmt.Sprintf("rank %d's last view is of %s, an earlier call", p, v.desc))
		default:
			parts = append(parts, fmt.Sprintf("rank %d is stuck in %s", p, v.desc))
		}
	}
	return "; the stall check's neighbours: " + strings.Join(parts, ", ")
}
