package backend

import (
	"context"
	"fmt"
	"sync"
)

// memConn is one end of an in-memory link, for tests and for the
// single-process executor checks.
type memConn struct {
	peer, channel int
	rx            *fifo // ours
	tx            *fifo // the other end's
	maxMsg        int
	once          sync.Once
}

// NewMemPair returns two connected in-memory Conns: a (rank ra) talks to b
// (rank rb) on channel ch.
func NewMemPair(ra, rb, ch, slots, slotBytes int) (a, b Conn) {
	if slots <= 0 {
		slots = DefaultSlots
	}
	if slotBytes <= 0 {
		slotBytes = DefaultSlotBytes
	}
	fa, fb := newFIFO(slots, slotBytes), newFIFO(slots, slotBytes)
	return &memConn{peer: rb, channel: ch, rx: fa, tx: fb, maxMsg: slotBytes},
		&memConn{peer: ra, channel: ch, rx: fb, tx: fa, maxMsg: slotBytes}
}

func (m *memConn) MaxMessage() int { return m.maxMsg }

// guard implements guarded: the words sit in the two FIFOs.
func (m *memConn) guard() (guardWords, func(), bool) {
	return guardWords{myLive: &m.tx.live, myWriting: &m.tx.writing, peerLive: &m.rx.live, peerWriting: &m.rx.writing}, func() {}, true
}

func (m *memConn) Send(ctx context.Context, tag uint32, p []byte) error {
	if len(p) > m.maxMsg {
		return &PeerError{m.peer, m.channel, "send", fmt.Errorf("message of %d bytes exceeds the %d-byte slot", len(p), m.maxMsg)}
	}
	select {
	case s := <-m.tx.free:
		n := copy(s, p)
		m.tx.publish(s[:n], tag)
		return nil
	case <-m.tx.done:
		return &PeerError{m.peer, m.channel, "send", ErrClosed}
	case <-ctx.Done():
		return &PeerError{m.peer, m.channel, "send", ctxErr(ctx)}
	}
}

func (m *memConn) Recv(ctx context.Context) ([]byte, uint32, error) {
	b, tag, err := m.rx.recv(ctx)
	if err != nil {
		return nil, 0, &PeerError{m.peer, m.channel, "recv", err}
	}
	return b, tag, nil
}

func (m *memConn) Abort(reason string) {
	m.tx.fail(&RemoteAbortError{reason})
	m.rx.fail(ErrClosed)
}

func (m *memConn) Release() { m.rx.release() }

// Probe implements Prober.
func (m *memConn) Probe(ctx context.Context) error {
	if err := m.rx.probe(ctx); err != nil {
		return &PeerError{m.peer, m.channel, "recv", err}
	}
	return nil
}

func (m *memConn) Close() error {
	m.once.Do(func() {
		m.rx.fail(ErrClosed)
		m.tx.fail(fmt.Errorf("%w: peer closed the connection", ErrClosed))
	})
	return nil
}
