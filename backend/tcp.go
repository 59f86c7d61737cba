package backend

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
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
// to the n-th message. A receiver reads the next message from socket 0
// itself when none is waiting in the FIFO, and a drainer goroutine fills
// the FIFO while nobody receives (see rd); Send writes header and first
// part with one writev.
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

	// Receiving: socket 0 is read by one goroutine at a time, the holder
	// of rd. A Recv (or Probe) that finds the FIFO empty reads the next
	// frame itself, so that the goroutine waiting for a message is the one
	// the arriving data wakes: one wake-up per message. A reader goroutine
	// that handed each message over (the first design) cost a second
	// wake-up on another thread, 13 µs per one-way message here. While
	// nobody receives, the drainer (drainLoop) reads what has arrived into
	// the FIFO now and then, so that a sender never waits for long on a
	// receiver busy elsewhere, and a peer's abort is seen.
	raw     syscall.RawConn // socket 0's descriptor, for pending (nil: not a socket)
	rd      chan struct{}   // the right to read socket 0: held while it has an element
	waiting atomic.Bool     // a receiver waits for rd: the drainer steps aside
	kick    chan struct{}   // wakes the drainer at once
	rguard  ioGuard         // a receiver's context ending interrupts its read
	large   atomic.Bool     // the last frame was cut over the stripes: no spin (see readableSoon)
	wguard  ioGuard         // a sender's context ending interrupts its write

	spin atomic.Int64 // how long readableSoon yields, ns (SetWaitPolicy; yieldSpin until then)
}

// SetWaitPolicy implements WaitTuner: under NoYield a receiver does not
// yield the processor while it waits for the next frame.
func (t *tcpConn) SetWaitPolicy(p WaitPolicy) { t.spin.Store(int64(p.yieldPhase(nil))) }

// ioGuard lets the end of a context interrupt one blocking read (or
// write) of a link, by moving the socket's deadline into the past, and
// never a later one. A deadline is set only when a context ends: one set
// on every call would be a runtime timer earlier than the network
// poller's sleep, which wakes the poller's thread, a second wake-up per
// message.
type ioGuard struct {
	mu      sync.Mutex
	gen     uint64 // the armed call's number; ends of older calls are ignored
	moved   bool   // a deadline was set: clear it before the next call
	inFrame bool   // a read has begun a frame (see readFrame)
}

// arm starts a guarded call: clear resets a deadline an earlier call's
// end left behind, and end(inFrame) runs (under the guard's lock) if ctx
// ends before disarm.
func (g *ioGuard) arm(ctx context.Context, clear func(), end func(inFrame bool)) (disarm func()) {
	g.mu.Lock()
	g.settleLocked(clear)
	g.gen++
	g.inFrame = false
	gen := g.gen
	g.mu.Unlock()
	if ctx.Done() == nil {
		return func() {}
	}
	stop := context.AfterFunc(ctx, func() {
		g.mu.Lock()
		if g.gen == gen {
			end(g.inFrame)
			g.moved = true
		}
		g.mu.Unlock()
	})
	return func() {
		g.mu.Lock()
		g.gen++
		g.mu.Unlock()
		stop()
	}
}

// settle clears a deadline an earlier call's end left behind, for an
// unguarded call.
func (g *ioGuard) settle(clear func()) {
	g.mu.Lock()
	g.settleLocked(clear)
	g.mu.Unlock()
}

func (g *ioGuard) settleLocked(clear func()) {
	if g.moved {
		clear()
		g.moved = false
	}
}

// beginFrame records that the guarded read has begun a frame; undo runs
// (under the lock) if the context's end moved the deadline already.
func (g *ioGuard) beginFrame(undo func()) {
	g.mu.Lock()
	g.inFrame = true
	if g.moved {
		undo()
	}
	g.mu.Unlock()
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
// would cost more than it saves. With the default four sockets and FIFO
// slot only whole 128 KiB slots are cut (32 KiB a socket): 64 KiB, cut
// into four parts of 16 KiB, made a ring allreduce of 256 KiB across 3
// and 4 network namespaces on 2 CPUs 2.5-3x slower than whole messages
// (0.68-0.79 against 0.27-0.30 ms and 1.27-1.66 against 0.38-0.57 ms;
// docs/bench.md, "Striping threshold").
const StripeMin = 128 << 10

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
	// Socket 0 leaves the runtime's poller (rawSocket says why); the
	// stripes stay, read and written by goroutines that park there.
	t := &tcpConn{c: detachSocket(cs[0]), peer: peer, channel: channel, rx: newFIFO(slots, slotBytes), maxMsg: slotBytes,
		closed: make(chan struct{}), kick: make(chan struct{}, 1), rd: make(chan struct{}, 1)}
	t.bufs = make(net.Buffers, 0, 2)
	t.spin.Store(int64(yieldSpin))
	if sc, ok := t.c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			t.raw = rc
		}
	}
	for _, c := range cs[1:] {
		s := &stripe{c: c, wwork: make(chan []byte, 1), rwork: make(chan []byte, 1), wdone: make(chan error, 1), rdone: make(chan error, 1)}
		t.extra = append(t.extra, s)
		go t.stripeLoop(s.wwork, s.wdone, func(b []byte) error { _, err := s.c.Write(b); return err })
		go t.stripeLoop(s.rwork, s.rdone, func(b []byte) error { _, err := io.ReadFull(s.c, b); return err })
	}
	go t.drainLoop()
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

// striped reports whether a message of n bytes goes over the extra
// sockets too, read and written by their goroutines (executor.run).
func (t *tcpConn) striped(n int64) bool { return len(t.extra) > 0 && n >= StripeMin }

// Sockets is how many sockets the link runs over.
func (t *tcpConn) Sockets() int { return 1 + len(t.extra) }

// SocketBuffers returns the kernel's receive and send buffer sizes of the
// link's first socket (SocketBufferSizes).
func (t *tcpConn) SocketBuffers() (recv, send int, err error) {
	sc, ok := t.c.(syscall.Conn)
	if !ok {
		return 0, 0, errors.New("gotree/backend: the link's first connection is not a socket")
	}
	return SocketBufferSizes(sc)
}

// SocketBufferSizes returns the receive and send buffer sizes the kernel
// holds for socket c (SO_RCVBUF, SO_SNDBUF). Linux grants twice what a
// program asks for (its bookkeeping), at most net.core.rmem_max and
// net.core.wmem_max doubled.
func SocketBufferSizes(c syscall.Conn) (recv, send int, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	cerr := rc.Control(func(fd uintptr) {
		if recv, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF); err == nil {
			send, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
		}
	})
	return recv, send, errors.Join(cerr, err)
}

func (t *tcpConn) peerErr(op string, err error) error {
	return &PeerError{Peer: t.peer, Channel: t.channel, Op: op, Err: err}
}

// abortFrame in the length field announces an abort; the tag field then
// holds the length of the reason that follows.
const abortFrame = 0xFFFFFFFF

// errNoFrame: the drainer found nothing to read (no data, or no free slot).
var errNoFrame = errors.New("no frame waiting")

// drainMin and drainMax bound the drainer's interval: it reads again
// after drainMin when it last found a frame, and backs off to drainMax
// while it finds none (the latency with which a peer's abort is seen by
// a rank that is not receiving from it).
const (
	drainMin = time.Millisecond
	drainMax = 20 * time.Millisecond
)

// drainPeek is how long the drainer waits for the first byte of a frame on
// a stream that cannot say whether bytes are waiting (not a socket).
const drainPeek = 50 * time.Microsecond

// drainLoop moves frames that arrived while nobody receives into the FIFO
// (while it has free slots), until the link fails or closes.
func (t *tcpConn) drainLoop() {
	wait := drainMin
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-t.closed:
			return
		case <-t.rx.done:
			return
		case <-timer.C:
		case <-t.kick:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
		found, failed := false, false
		for !t.waiting.Load() && t.tryTakeRead() {
			err := t.readFrame(context.Background(), true)
			<-t.rd
			if err != nil {
				failed = !errors.Is(err, errNoFrame)
				break
			}
			found = true
		}
		if failed {
			return
		}
		if found {
			wait = drainMin
		} else {
			wait = min(2*wait, drainMax)
		}
		timer.Reset(wait)
	}
}

// wakeDrainer makes the drainer look for frames now.
func (t *tcpConn) wakeDrainer() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// tryTakeRead takes the right to read socket 0 if nobody holds it.
func (t *tcpConn) tryTakeRead() bool {
	select {
	case t.rd <- struct{}{}:
		return true
	default:
		return false
	}
}

// recv returns the next message: from the FIFO if the drainer put one
// there, else read from the socket by this goroutine.
func (t *tcpConn) recv(ctx context.Context) ([]byte, uint32, error) {
	if b, tag, ok, err := t.rx.tryRecv(); ok || err != nil {
		return b, tag, err
	}
	// The drainer may be reading a frame: wait for it to publish, or to
	// let go of the socket, within ctx.
	t.waiting.Store(true)
	select {
	case t.rd <- struct{}{}:
		t.waiting.Store(false)
	case m := <-t.rx.ready:
		t.waiting.Store(false)
		return t.rx.borrow(m)
	case <-t.rx.done:
		t.waiting.Store(false)
		return t.rx.afterFailure()
	case <-ctx.Done():
		t.waiting.Store(false)
		return nil, 0, ctxErr(ctx)
	}
	defer func() { <-t.rd }()
	for {
		if b, tag, ok, err := t.rx.tryRecv(); ok || err != nil {
			return b, tag, err
		}
		if err := t.readFrame(ctx, false); err != nil {
			return nil, 0, err
		}
	}
}

// readFrame reads socket 0's next frame into a free slot of the FIFO and
// publishes it (rd held). The drainer (peek) returns errNoFrame when no
// byte is waiting (on a stream other than a socket: none comes within
// drainPeek) or the FIFO has no free slot; a receiver waits within ctx,
// and returns ctx's error with the link intact if ctx ends before the
// frame begins. Once a frame
// has begun, only the deadline of ctx (a receiver) or a close stops it,
// and that fails the link. Any failure of the link fails the FIFO and is
// returned.
func (t *tcpConn) readFrame(ctx context.Context, peek bool) error {
	slot, ok := t.rx.tryFree()
	if !ok {
		if peek {
			return errNoFrame
		}
		// A receiver holds no slot and found none published: all are free.
		return t.linkFailed(fmt.Errorf("%w: no free slot for a receive", ErrProto))
	}
	keep := false
	defer func() {
		if !keep {
			t.rx.free <- slot
		}
	}()
	var hdr [8]byte
	var k int
	var err error
	clear := func() { t.setReadDeadline(time.Time{}) }
	if peek {
		// Read only when bytes are waiting: a socket says so without a
		// read; other streams (tests' pipes) get a short read deadline.
		t.rguard.settle(clear)
		if t.raw != nil {
			if !t.pending() {
				return errNoFrame
			}
		} else {
			_ = t.c.SetReadDeadline(time.Now().Add(drainPeek))
		}
		k, err = t.c.Read(hdr[:])
		_ = t.c.SetReadDeadline(time.Time{})
	} else {
		// ctx ending stops the wait for a frame; once one has begun, only
		// ctx's deadline does (a frame read in part leaves the stream out
		// of step: the link fails). A frame's deadline is every socket's:
		// its other parts come over the stripes, and a link gone silent
		// would leave their readers waiting forever.
		dl, _ := ctx.Deadline()
		disarm := t.rguard.arm(ctx, clear, func(inFrame bool) {
			switch {
			case !inFrame:
				_ = t.c.SetReadDeadline(time.Unix(1, 0)) // also ends a rawSocket's wait
			case errors.Is(ctx.Err(), context.DeadlineExceeded):
				t.setReadDeadline(time.Unix(1, 0))
			case !dl.IsZero():
				t.setReadDeadline(dl)
			}
		})
		defer disarm()
		t.pollReadable()
		k, err = t.c.Read(hdr[:])
		if k > 0 { // a cancellation that raced the first bytes does not count
			t.rguard.beginFrame(func() {
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					t.setReadDeadline(time.Unix(1, 0))
				} else {
					t.setReadDeadline(dl)
				}
			})
		}
	}
	if k == 0 && err != nil && isTimeout(err) {
		select {
		case <-t.closed:
			return t.linkFailed(ErrClosed)
		default:
		}
		if peek {
			return errNoFrame
		}
		if ctx.Err() != nil {
			return ctxErr(ctx)
		}
		return ErrTimeout
	}
	if k > 0 && k < len(hdr) && (err == nil || isTimeout(err)) {
		var m int
		m, err = io.ReadFull(t.c, hdr[k:])
		k += m
	}
	if err != nil {
		return t.linkFailed(t.readErr(err))
	}
	ln := binary.LittleEndian.Uint32(hdr[:4])
	tag := binary.LittleEndian.Uint32(hdr[4:])
	if ln == abortFrame {
		err := t.linkFailed(t.abortReason(tag))
		t.c.Close()
		return err
	}
	n := int(ln)
	t.large.Store(len(t.extra) > 0 && n >= StripeMin)
	if n > t.maxMsg {
		err := t.linkFailed(fmt.Errorf("%w: message of %d bytes exceeds the %d-byte slot", ErrProto, n, t.maxMsg))
		t.c.Close()
		return err
	}
	first, busy := t.parts(slot[:n], func(s *stripe) chan []byte { return s.rwork })
	_, err = io.ReadFull(t.c, slot[:first])
	if werr := t.wait(busy, func(s *stripe) chan error { return s.rdone }); err == nil && werr != nil {
		// A part went missing: a peer that aborted mid-message put its
		// reason on socket 0, after the first part.
		err = t.abortAfter(werr)
	}
	if err != nil {
		return t.linkFailed(t.readErr(err))
	}
	keep = true
	t.rx.publish(slot[:n], tag)
	return nil
}

// pollReadable gives the bytes of the next frame a short time to arrive
// on socket 0, yielding the processor (readableSoon), before the read
// waits for them. Socket 0 is a rawSocket, whose read waits in poll(2) on
// this thread until the bytes come, its deadline moves (ctx ending sets
// it) or the link closes: waiting in the runtime's network poller instead
// would cost a second wake-up when the caller came from C (torch), whose
// goroutine is locked to its thread.
func (t *tcpConn) pollReadable() {
	if t.raw == nil || t.large.Load() {
		return // a stream other than a socket; or the stripes need the CPUs
	}
	spin := time.Duration(t.spin.Load())
	_ = t.raw.Control(func(fd uintptr) { readableSoon(int32(fd), spin) })
}

// readableSoon polls fd without blocking, yielding the processor between
// polls (yieldUntil, as a shared-memory wait does before it sleeps), and
// reports whether it became readable. Sleeping at once lets the
// (virtual) CPU go idle, and waking it costs tens of microseconds, more
// than a small message's round trip; a thread that comes back from sleep
// also finds its caches cold. Both calls are raw: they never block, and
// through Syscall the runtime's monitor would see the P in system calls.
// One receiver of the process spins at a time: more (a channel each)
// would take the CPUs from the threads that move the data (2 ranks with 2
// channels over loopback: 256 KiB took 330-410 µs against 150-320). A
// link whose last frame came over its stripes does not spin either: the
// stripes' readers need the CPUs then, and the wake-up is small beside
// the message (2 namespaces, 256 KiB: 370-590 µs against 315-405).
func readableSoon(fd int32, spin time.Duration) bool {
	if !spinning.CompareAndSwap(false, true) {
		return false
	}
	defer spinning.Store(false)
	pfd := unix.PollFd{Fd: fd, Events: unix.POLLIN}
	var zero unix.Timespec
	readable := func() bool {
		n, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
		return errno == 0 && n > 0
	}
	return readable() || yieldUntil(readable, false, spin)
}

// spinning: a receiver of this process is in readableSoon.
var spinning atomic.Bool

// pending reports, without waiting, whether socket 0 has bytes to read
// (or its end, or an error: anything a read would return at once).
func (t *tcpConn) pending() bool {
	ready := false
	if err := t.raw.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		ready = err != unix.EAGAIN && err != unix.EWOULDBLOCK
		return true
	}); err != nil {
		return true // closed: the read reports it
	}
	return ready
}

// linkFailed fails the receive side with the peer's error and returns it.
func (t *tcpConn) linkFailed(err error) error {
	pe := t.peerErr("recv", err)
	t.rx.fail(pe)
	return pe
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
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
	// ctx ending (its deadline, or an abort) interrupts a blocked write.
	disarm := t.wguard.arm(ctx, func() { t.setWriteDeadline(time.Time{}) },
		func(bool) { t.setWriteDeadline(time.Unix(1, 0)) })
	defer disarm()
	first, busy := t.parts(p, func(s *stripe) chan []byte { return s.wwork })
	binary.LittleEndian.PutUint32(t.hdr[:4], uint32(len(p)))
	binary.LittleEndian.PutUint32(t.hdr[4:], tag)
	t.bufs = append(t.bufs[:0], t.hdr[:], p[:first])
	bufs := t.bufs
	_, err := writeBuffers(t.c, &bufs)
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
		if isTimeout(err) {
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
	t.wakeDrainer()
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

// setReadDeadline sets the read deadline of every socket of the link.
func (t *tcpConn) setReadDeadline(d time.Time) {
	_ = t.c.SetReadDeadline(d)
	for _, s := range t.extra {
		_ = s.c.SetReadDeadline(d)
	}
}

func (t *tcpConn) setWriteDeadline(d time.Time) {
	_ = t.c.SetWriteDeadline(d)
	for _, s := range t.extra {
		_ = s.c.SetWriteDeadline(d)
	}
}

func (t *tcpConn) Recv(ctx context.Context) ([]byte, uint32, error) {
	b, tag, err := t.recv(ctx)
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
	if err := t.rx.probeWith(ctx, t.recv); err != nil {
		return t.recvErr(err)
	}
	return nil
}

func (t *tcpConn) Close() error {
	t.once.Do(func() {
		close(t.closed)
		t.rx.fail(t.peerErr("recv", ErrClosed))
		t.c.Close() // wakes a read waiting on socket 0 and returns once none uses it
		for _, s := range t.extra {
			s.c.Close()
		}
	})
	return nil
}

var _ WaitTuner = (*tcpConn)(nil)
