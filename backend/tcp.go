package backend

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Default FIFO geometry for TCP links: 8 slots of 128 KiB, so a plan step of
// up to 512 KiB (half the FIFO, as NCCL's chunkSteps 4 of 8) never blocks
// its sender on the receiver's progress.
const (
	DefaultSlots     = 8
	DefaultSlotBytes = 128 << 10
)

// tcpConn is a Conn over one or more TCP sockets (NCCL's sockets per
// connection). Socket 0 carries every message's header, the abort frame
// and all of a small message; a message of at least StripeMin bytes is cut
// into one part per socket (stripeSize), and each extra socket carries its
// part, written and read by its own goroutines, so the parts travel in
// parallel. Sockets keep order, so the n-th part on every socket belongs
// to the n-th message. A reader goroutine moves incoming messages into the
// FIFO; Send writes header and first part with one writev.
type tcpConn struct {
	c       net.Conn
	extra   []*stripe
	peer    int
	channel int
	rx      *fifo
	maxMsg  int

	sendMu sync.Mutex // Send is single-goroutine by contract; this guards Abort racing it
	hdr    [8]byte
	bufs   net.Buffers
	closed chan struct{}
	once   sync.Once
}

// stripe is one extra socket with its writer and reader goroutines: a part
// to write or to read into goes in on wwork/rwork, the result comes back on
// wdone/rdone (buffered: a goroutine never blocks on a caller that left).
type stripe struct {
	c            net.Conn
	wwork, rwork chan []byte
	wdone, rdone chan error
}

// StripeMin is the smallest message cut over several sockets; smaller ones
// go whole over the first socket, where a hand-off to other goroutines
// would cost more than it saves.
const StripeMin = 64 << 10

// stripeSize is the part length of an n-byte message over k sockets (part
// i covers [i·size, (i+1)·size) clipped to n): n itself below StripeMin or
// with one socket, else n/k rounded up to 64 bytes.
func stripeSize(n, k int) int {
	if k <= 1 || n < StripeMin {
		return n
	}
	return ((n+k-1)/k + 63) &^ 63
}

// NewTCPConn wraps an established (and authenticated) socket as a Conn with
// the given FIFO geometry; slots <= 0 or slotBytes <= 0 pick the defaults.
// Any stream connection works (tests use net.Pipe).
func NewTCPConn(c net.Conn, peer, channel, slots, slotBytes int) Conn {
	return NewStripedTCPConn([]net.Conn{c}, peer, channel, slots, slotBytes)
}

// NewStripedTCPConn is NewTCPConn over several sockets to the same peer,
// in the same order at both ends.
func NewStripedTCPConn(cs []net.Conn, peer, channel, slots, slotBytes int) Conn {
	if slots <= 0 {
		slots = DefaultSlots
	}
	if slotBytes <= 0 {
		slotBytes = DefaultSlotBytes
	}
	for _, c := range cs {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
	}
	t := &tcpConn{c: cs[0], peer: peer, channel: channel, rx: newFIFO(slots, slotBytes), maxMsg: slotBytes, closed: make(chan struct{})}
	t.bufs = make(net.Buffers, 0, 2)
	for _, c := range cs[1:] {
		s := &stripe{c: c, wwork: make(chan []byte, 1), rwork: make(chan []byte, 1), wdone: make(chan error, 1), rdone: make(chan error, 1)}
		t.extra = append(t.extra, s)
		go t.stripeLoop(s.wwork, s.wdone, func(b []byte) error { _, err := s.c.Write(b); return err })
		go t.stripeLoop(s.rwork, s.rdone, func(b []byte) error { _, err := io.ReadFull(s.c, b); return err })
	}
	go t.readLoop()
	return t
}

// stripeLoop runs one direction of an extra socket until the link closes.
func (t *tcpConn) stripeLoop(work <-chan []byte, done chan<- error, do func([]byte) error) {
	for {
		select {
		case b := <-work:
			done <- do(b)
		case <-t.closed:
			return
		}
	}
}

// parts hands the parts of an n-byte message after the first to the extra
// sockets' work channels (slicing buf) and returns the first part's length
// and the stripes that got a part.
func (t *tcpConn) parts(buf []byte, pick func(*stripe) chan []byte) (first int, busy []*stripe) {
	n := len(buf)
	size := stripeSize(n, len(t.extra)+1)
	for i, s := range t.extra {
		lo := min((i+1)*size, n)
		hi := min(lo+size, n)
		if lo == hi {
			break
		}
		pick(s) <- buf[lo:hi]
		busy = append(busy, s)
	}
	return min(size, n), busy
}

// wait collects the results of the stripes' parts: the first error, or
// ErrClosed when the link closes first.
func (t *tcpConn) wait(busy []*stripe, pick func(*stripe) chan error) error {
	var first error
	for _, s := range busy {
		select {
		case err := <-pick(s):
			if first == nil {
				first = err
			}
		case <-t.closed:
			return ErrClosed
		}
	}
	return first
}

func (t *tcpConn) MaxMessage() int { return t.maxMsg }

// Sockets is how many sockets the link runs over.
func (t *tcpConn) Sockets() int { return 1 + len(t.extra) }

func (t *tcpConn) peerErr(op string, err error) error {
	return &PeerError{Peer: t.peer, Channel: t.channel, Op: op, Err: err}
}

// abortFrame in the length field announces an abort; the tag field then
// holds the length of the reason that follows.
const abortFrame = 0xFFFFFFFF

func (t *tcpConn) readLoop() {
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(t.c, hdr[:]); err != nil {
			t.rx.fail(t.peerErr("recv", t.readErr(err)))
			return
		}
		ln := binary.LittleEndian.Uint32(hdr[:4])
		tag := binary.LittleEndian.Uint32(hdr[4:])
		if ln == abortFrame {
			t.rx.fail(t.peerErr("recv", t.abortReason(tag)))
			t.c.Close()
			return
		}
		n := int(ln)
		if n > t.maxMsg {
			t.rx.fail(t.peerErr("recv", fmt.Errorf("%w: message of %d bytes exceeds the %d-byte slot", ErrProto, n, t.maxMsg)))
			t.c.Close()
			return
		}
		slot, err := t.rx.getFree()
		if err != nil {
			return
		}
		first, busy := t.parts(slot[:n], func(s *stripe) chan []byte { return s.rwork })
		_, err = io.ReadFull(t.c, slot[:first])
		if werr := t.wait(busy, func(s *stripe) chan error { return s.rdone }); err == nil && werr != nil {
			// A part went missing: a peer that aborted mid-message put its
			// reason on socket 0, after the first part.
			err = t.abortAfter(werr)
		}
		if err != nil {
			t.rx.fail(t.peerErr("recv", t.readErr(err)))
			return
		}
		t.rx.publish(slot[:n], tag)
	}
}

// abortAfter reads socket 0 briefly for an abort frame and returns its
// reason, or err when there is none.
func (t *tcpConn) abortAfter(err error) error {
	var hdr [8]byte
	_ = t.c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, rerr := io.ReadFull(t.c, hdr[:]); rerr != nil || binary.LittleEndian.Uint32(hdr[:4]) != abortFrame {
		return err
	}
	return t.abortReason(binary.LittleEndian.Uint32(hdr[4:]))
}

// abortReason reads the n-byte reason that follows an abort frame.
func (t *tcpConn) abortReason(n uint32) *RemoteAbortError {
	why := make([]byte, min(int(n), maxAbortText))
	_ = t.c.SetReadDeadline(time.Now().Add(time.Second))
	k, _ := io.ReadFull(t.c, why)
	return &RemoteAbortError{string(why[:k])}
}

func (t *tcpConn) readErr(err error) error {
	select {
	case <-t.closed:
		return ErrClosed
	default:
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: peer closed the connection", ErrClosed)
	}
	return err
}

func (t *tcpConn) Send(ctx context.Context, tag uint32, p []byte) error {
	if len(p) > t.maxMsg {
		return t.peerErr("send", fmt.Errorf("message of %d bytes exceeds the %d-byte slot", len(p), t.maxMsg))
	}
	t.sendMu.Lock()
	locked := true
	defer func() {
		if locked {
			t.sendMu.Unlock()
		}
	}()
	select {
	case <-t.closed:
		return t.peerErr("send", ErrClosed)
	default:
	}
	dl, _ := ctx.Deadline() // zero: none
	t.setWriteDeadline(dl)
	// Abort (context cancellation) interrupts a blocked write.
	stop := context.AfterFunc(ctx, func() { t.setWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	first, busy := t.parts(p, func(s *stripe) chan []byte { return s.wwork })
	binary.LittleEndian.PutUint32(t.hdr[:4], uint32(len(p)))
	binary.LittleEndian.PutUint32(t.hdr[4:], tag)
	t.bufs = append(t.bufs[:0], t.hdr[:], p[:first])
	bufs := t.bufs
	_, err := bufs.WriteTo(t.c)
	if err == nil && len(busy) > 0 {
		// Socket 0 is at a message boundary: an Abort may write its frame
		// there while the other parts are still on their way (the reader
		// looks for it when a part fails to arrive).
		t.sendMu.Unlock()
		locked = false
	}
	if werr := t.wait(busy, func(s *stripe) chan error { return s.wdone }); err == nil {
		err = werr
	}
	if err != nil {
		if ctx.Err() != nil {
			return t.peerErr("send", ctxErr(ctx))
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return t.peerErr("send", ErrTimeout)
		}
		if ra := t.remoteAbort(200 * time.Millisecond); ra != nil {
			return t.peerErr("send", ra) // the peer said why before it closed
		}
		return t.peerErr("send", t.readErr(err))
	}
	return nil
}

// remoteAbort waits up to d for the reader to finish (a failed write means
// the peer closed, and an abort frame with its reason may be on its way
// in) and returns the peer's reason, or nil.
func (t *tcpConn) remoteAbort(d time.Duration) *RemoteAbortError {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-t.rx.done:
	case <-timer.C:
		return nil
	}
	var ra *RemoteAbortError
	if errors.As(t.rx.err, &ra) {
		return ra
	}
	return nil
}

func (t *tcpConn) setWriteDeadline(d time.Time) {
	_ = t.c.SetWriteDeadline(d)
	for _, s := range t.extra {
		_ = s.c.SetWriteDeadline(d)
	}
}

func (t *tcpConn) Recv(ctx context.Context) ([]byte, uint32, error) {
	b, tag, err := t.rx.recv(ctx)
	if err != nil {
		return nil, 0, t.recvErr(err)
	}
	return b, tag, nil
}

// recvErr names the peer in a receive-side error unless it already does.
func (t *tcpConn) recvErr(err error) error {
	var pe *PeerError
	if errors.As(err, &pe) {
		return err
	}
	return t.peerErr("recv", err)
}

// Abort sends an abort frame with the reason, unless a send is in
// progress (then the peer sees the connection close instead), and closes.
func (t *tcpConn) Abort(reason string) {
	if t.sendMu.TryLock() {
		if len(reason) > maxAbortText {
			reason = reason[:maxAbortText]
		}
		var hdr [8]byte
		binary.LittleEndian.PutUint32(hdr[:4], abortFrame)
		binary.LittleEndian.PutUint32(hdr[4:], uint32(len(reason)))
		_ = t.c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
		_, _ = t.c.Write(append(hdr[:], reason...))
		t.sendMu.Unlock()
	}
	t.Close()
}

func (t *tcpConn) Release() { t.rx.release() }

// Probe implements Prober.
func (t *tcpConn) Probe(ctx context.Context) error {
	if err := t.rx.probe(ctx); err != nil {
		return t.recvErr(err)
	}
	return nil
}

func (t *tcpConn) Close() error {
	t.once.Do(func() {
		close(t.closed)
		t.rx.fail(t.peerErr("recv", ErrClosed))
		t.c.Close()
		for _, s := range t.extra {
			s.c.Close()
		}
	})
	return nil
}
