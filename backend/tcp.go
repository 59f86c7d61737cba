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

// tcpConn is a Conn over one TCP socket. A reader goroutine moves incoming
// messages into the FIFO; Send writes header and payload with one writev.
type tcpConn struct {
	c       net.Conn
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

// NewTCPConn wraps an established (and authenticated) socket as a Conn with
// the given FIFO geometry; slots <= 0 or slotBytes <= 0 pick the defaults.
// Any stream connection works (tests use net.Pipe).
func NewTCPConn(c net.Conn, peer, channel, slots, slotBytes int) Conn {
	if slots <= 0 {
		slots = DefaultSlots
	}
	if slotBytes <= 0 {
		slotBytes = DefaultSlotBytes
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	t := &tcpConn{c: c, peer: peer, channel: channel, rx: newFIFO(slots, slotBytes), maxMsg: slotBytes, closed: make(chan struct{})}
	t.bufs = make(net.Buffers, 0, 2)
	go t.readLoop()
	return t
}

func (t *tcpConn) MaxMessage() int { return t.maxMsg }

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
			why := make([]byte, min(int(tag), maxAbortText))
			_ = t.c.SetReadDeadline(time.Now().Add(time.Second))
			k, _ := io.ReadFull(t.c, why)
			t.rx.fail(t.peerErr("recv", &RemoteAbortError{string(why[:k])}))
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
		if _, err := io.ReadFull(t.c, slot[:n]); err != nil {
			t.rx.fail(t.peerErr("recv", t.readErr(err)))
			return
		}
		t.rx.publish(slot[:n], tag)
	}
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
	defer t.sendMu.Unlock()
	select {
	case <-t.closed:
		return t.peerErr("send", ErrClosed)
	default:
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = t.c.SetWriteDeadline(dl)
	} else {
		_ = t.c.SetWriteDeadline(time.Time{})
	}
	// Abort (context cancellation) interrupts a blocked write.
	stop := context.AfterFunc(ctx, func() { _ = t.c.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	binary.LittleEndian.PutUint32(t.hdr[:4], uint32(len(p)))
	binary.LittleEndian.PutUint32(t.hdr[4:], tag)
	t.bufs = append(t.bufs[:0], t.hdr[:], p)
	bufs := t.bufs
	_, err := bufs.WriteTo(t.c)
	if err != nil {
		if ctx.Err() != nil {
			return t.peerErr("send", ctxErr(ctx))
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return t.peerErr("send", ErrTimeout)
		}
		return t.peerErr("send", t.readErr(err))
	}
	return nil
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
	})
	return nil
}
