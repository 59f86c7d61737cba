package backend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Sentinel errors. Errors returned by Conns wrap one of these where it
// applies, and carry the peer and channel in their text.
var (
	ErrClosed  = errors.New("connection closed")
	ErrTimeout = errors.New("timed out")
	ErrAborted = errors.New("aborted")
	ErrProto   = errors.New("protocol violation")
)

// Conn is a message link with one peer on one channel. Send and Recv may be
// called concurrently with each other, but each by one goroutine at a time.
//
// Every message carries a 32-bit tag that names the operation it belongs
// to (a hash of the collective, its sequence number and its shape): a
// receiver that gets a tag it did not expect knows the ranks disagree,
// instead of reducing garbage.
type Conn interface {
	// Send transmits p as one message of len(p) bytes. p may be reused
	// when Send returns. Messages longer than MaxMessage() are an error.
	Send(ctx context.Context, tag uint32, p []byte) error
	// Recv returns the next message and its tag. The slice is borrowed: it
	// stays valid until Release is called, which must happen before the
	// next Recv.
	Recv(ctx context.Context) ([]byte, uint32, error)
	Release()
	// MaxMessage is the largest message Send accepts.
	MaxMessage() int
	// Abort tells the peer, best effort and without blocking for long,
	// why this side is giving up, then closes the link. The peer's
	// blocked and later calls fail with a RemoteAbortError.
	Abort(reason string)
	// Close releases the link; blocked calls return ErrClosed.
	Close() error
}

// DirectSender is a Conn whose outgoing FIFO slots the executor may write
// in place: Acquire waits for a free slot and returns n bytes of it, Post
// publishes them. It saves the copy from a scratch buffer when a reduction
// result goes straight to one peer (RecvReduceSend). Each Acquire must be
// followed by exactly one Post or Cancel before the next Send or Acquire.
type DirectSender interface {
	Acquire(ctx context.Context, n int) ([]byte, error)
	Post(tag uint32, n int)
	// Cancel gives up the acquired slot without publishing anything (the
	// step failed; the peer must not see a message).
	Cancel()
}

// Prober is a Conn that can wait for its next message without taking it:
// after Probe returns nil, the next Recv returns at once. Receive-from-any-
// peer probes every peer's link and receives from the first that is ready.
// Probe is a receive-side call: it must not run concurrently with Recv.
type Prober interface {
	Probe(ctx context.Context) error
}

// failureReporter is a Conn that says why it failed: failure waits up to
// d for the link to fail (its peer aborted, giving a reason, or closed)
// and returns the reason, nil if it still works. An executor that finds a
// peer's process gone asks it for the reason the peer left.
type failureReporter interface {
	failure(d time.Duration) error
}

// RemoteAbortError is the reason a peer gave when it aborted.
type RemoteAbortError struct{ Reason string }

func (e *RemoteAbortError) Error() string { return "the peer aborted: " + e.Reason }

// maxAbortText bounds an abort reason read from the wire.
const maxAbortText = 4096

// PeerError is an error on the link with a peer.
type PeerError struct {
	Peer    int
	Channel int
	Op      string // "send", "recv", "connect"
	Err     error
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("gotree/backend: %s with rank %d on channel %d: %v", e.Op, e.Peer, e.Channel, e.Err)
}

func (e *PeerError) Unwrap() error { return e.Err }

// fifo is a bounded queue of preallocated slots: the receive side of a
// Conn. A producer goroutine takes a free slot, fills it and publishes it;
// the consumer borrows published slots in order and releases them.
type msg struct {
	b   []byte
	tag uint32
}

type fifo struct {
	// live and writing: the guard words of the link's sender (guard.go).
	live, writing uint64
	free          chan []byte
	ready         chan msg
	done          chan struct{} // closed when the link fails or closes
	failOnce      sync.Once
	err           error  // set before done is closed
	cur           []byte // slot borrowed by the consumer
	peeked        *msg   // taken from ready by probe, not yet returned by recv
	curCap        []byte
}

func newFIFO(slots, slotBytes int) *fifo {
	f := &fifo{
		free:  make(chan []byte, slots),
		ready: make(chan msg, slots),
		done:  make(chan struct{}),
	}
	for i := 0; i < slots; i++ {
		f.free <- make([]byte, slotBytes)
	}
	return f
}

// fail records err (the first one wins) and wakes everyone. Both ends of
// a link may fail it at once (each side aborting), so it is guarded.
func (f *fifo) fail(err error) {
	f.failOnce.Do(func() {
		f.err = err
		close(f.done)
	})
}

// tryFree takes a free slot if there is one (producer side).
func (f *fifo) tryFree() ([]byte, bool) {
	select {
	case b := <-f.free:
		return b, true
	default:
		return nil, false
	}
}

func (f *fifo) publish(s []byte, tag uint32) { f.ready <- msg{s, tag} }

// borrow lends m's slot to the consumer until release.
func (f *fifo) borrow(m msg) ([]byte, uint32, error) {
	f.cur = m.b
	return m.b, m.tag, nil
}

// recv borrows the next published slot (consumer side).
func (f *fifo) recv(ctx context.Context) ([]byte, uint32, error) {
	if b, tag, ok, err := f.tryRecv(); ok || err != nil {
		return b, tag, err
	}
	select {
	case m := <-f.ready:
		return f.borrow(m)
	case <-f.done:
		return f.afterFailure()
	case <-ctx.Done():
		return nil, 0, ctxErr(ctx)
	}
}

// tryRecv is recv without waiting: ok says it borrowed a slot; err is set
// when there is nothing to borrow and never will be (a failed link), or
// on misuse.
func (f *fifo) tryRecv() (b []byte, tag uint32, ok bool, err error) {
	if f.cur != nil {
		return nil, 0, false, fmt.Errorf("%w: Recv called before Release", ErrProto)
	}
	if m := f.peeked; m != nil {
		f.peeked = nil
		b, tag, _ = f.borrow(*m)
		return b, tag, true, nil
	}
	select {
	case m := <-f.ready:
		b, tag, _ = f.borrow(m)
		return b, tag, true, nil
	default:
	}
	select {
	case <-f.done:
		b, tag, err = f.afterFailure()
		return b, tag, err == nil, err
	default:
		return nil, 0, false, nil
	}
}

// afterFailure delivers, after a plain close, what arrived before it;
// after an abort it fails at once.
func (f *fifo) afterFailure() ([]byte, uint32, error) {
	var ra *RemoteAbortError
	if !errors.As(f.err, &ra) {
		select {
		case m := <-f.ready:
			return f.borrow(m)
		default:
		}
	}
	return nil, 0, f.err
}

// probe waits for the next published slot and keeps it for recv.
func (f *fifo) probe(ctx context.Context) error { return f.probeWith(ctx, f.recv) }

// probeWith is probe with the receive of the link (which may read the
// next message from the wire itself when none is published).
func (f *fifo) probeWith(ctx context.Context, recv func(context.Context) ([]byte, uint32, error)) error {
	if f.peeked != nil {
		return nil
	}
	if f.cur != nil {
		return fmt.Errorf("%w: Probe called before Release", ErrProto)
	}
	b, tag, err := recv(ctx)
	if err != nil {
		return err
	}
	f.cur = nil
	f.peeked = &msg{b, tag}
	return nil
}

func (f *fifo) release() {
	if f.cur == nil {
		return
	}
	s := f.cur[:cap(f.cur)]
	f.cur = nil
	f.free <- s
}

func ctxErr(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ErrTimeout
	}
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
		return fmt.Errorf("%w: %v", ErrAborted, c)
	}
	return ErrAborted
}
