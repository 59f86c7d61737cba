package backend

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tinyBufferPair is tcpPair over sockets whose kernel buffers hold only
// 16 KiB, so that a sender blocks soon after the FIFO is full.
func tinyBufferPair(t *testing.T, slots, slotBytes int) (Conn, Conn) {
	t.Helper()
	d, s := tcpSockets(t)
	for _, c := range []*net.TCPConn{d, s} {
		require.NoError(t, c.SetReadBuffer(16<<10))
		require.NoError(t, c.SetWriteBuffer(16<<10))
	}
	a, b := NewTCPConn(d, 1, 0, slots, slotBytes), NewTCPConn(s, 0, 0, slots, slotBytes)
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// A receiver reads the socket itself when the FIFO is empty; while it
// receives nothing, the drainer must still move arriving messages into
// the FIFO, or a sender that wrote more than the kernel's socket buffers
// hold would wait for a receiver that is busy elsewhere — the deadlock of
// two ranks sending to each other before receiving.
func TestTCPDrainerTakesMessagesNobodyReceives(t *testing.T) {
	const slots, slotBytes = 8, 256 << 10
	a, b := tinyBufferPair(t, slots, slotBytes)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Both sides send a FIFO's worth (2 MiB, far beyond the 16 KiB
	// buffers) before either receives.
	errc := make(chan error, 2)
	for i, c := range []Conn{a, b} {
		go func(i int, c Conn) {
			for k := 0; k < slots; k++ {
				if err := c.Send(ctx, uint32(k), pattern(slotBytes, 10*i+k)); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}(i, c)
	}
	for range 2 {
		select {
		case err := <-errc:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("sends of a FIFO's worth blocked: nothing drained the receive side")
		}
	}
	for i, c := range []Conn{b, a} { // b receives a's messages (i = 0)
		for k := 0; k < slots; k++ {
			m, tag, err := c.Recv(ctx)
			require.NoError(t, err)
			require.Equal(t, uint32(k), tag)
			require.True(t, bytes.Equal(m, pattern(slotBytes, 10*i+k)), "message %d of side %d", k, i)
			c.Release()
		}
	}
}

// A receive that ends (deadline or cancellation) before a message begins
// leaves the link intact: the message that comes later is received whole.
func TestTCPRecvCancelledBeforeMessage(t *testing.T) {
	a, b := tcpPair(t, 2, 1<<10)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The receive waits in poll(2); the context's end must wake it at once.
	short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancelShort()
	t0 := time.Now()
	_, _, err := b.Recv(short)
	require.ErrorIs(t, err, ErrTimeout)
	require.Less(t, time.Since(t0), 500*time.Millisecond, "the deadline did not wake the receive")

	stopped, stop := context.WithCancel(ctx)
	go func() { time.Sleep(20 * time.Millisecond); stop() }()
	t0 = time.Now()
	_, _, err = b.Recv(stopped)
	require.ErrorIs(t, err, ErrAborted)
	require.Less(t, time.Since(t0), 500*time.Millisecond, "the cancellation did not wake the receive")

	require.NoError(t, a.Send(ctx, 9, pattern(1000, 3)))
	m, tag, err := b.Recv(ctx)
	require.NoError(t, err)
	require.Equal(t, uint32(9), tag)
	require.True(t, bytes.Equal(m, pattern(1000, 3)))
	b.Release()
}

// A cancellation that comes after a message began to arrive does not cut
// it (a half-read message would leave the stream out of step, failing the
// link): the receive reads it whole, or, where it had not begun to read
// when the cancellation came (a loaded machine may start it late, or the
// drainer holds the frame), it returns ErrAborted and the next receive
// gets the message whole.
func TestTCPRecvCancelledMidMessage(t *testing.T) {
	d, s := tcpSockets(t)
	b := NewTCPConn(s, 0, 0, 2, 64<<10)
	t.Cleanup(func() { b.Close(); d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stopped, stop := context.WithCancel(ctx)

	body := pattern(40000, 5)
	frame := make([]byte, 8+len(body))
	binary.LittleEndian.PutUint32(frame[:4], uint32(len(body)))
	binary.LittleEndian.PutUint32(frame[4:8], 77)
	copy(frame[8:], body)
	go func() {
		_, _ = d.Write(frame[:5]) // part of the header
		time.Sleep(30 * time.Millisecond)
		stop()
		time.Sleep(30 * time.Millisecond)
		_, _ = d.Write(frame[5:1000])
		time.Sleep(30 * time.Millisecond)
		_, _ = d.Write(frame[1000:])
	}()
	m, tag, err := b.Recv(stopped)
	if errors.Is(err, ErrAborted) {
		m, tag, err = b.Recv(ctx)
	}
	require.NoError(t, err)
	require.Equal(t, uint32(77), tag)
	require.True(t, bytes.Equal(m, body))
	b.Release()
}

// A peer's abort reaches a rank that is not receiving from it, within the
// drainer's interval: its next Send fails with the peer's reason.
func TestTCPAbortSeenWithoutReceiving(t *testing.T) {
	a, b := tcpPair(t, 2, 1<<10)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a.Abort("rank 1: reduce_scatter #3 timed out")
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := b.Send(ctx, 1, pattern(10, 1))
		if err != nil {
			var ra *RemoteAbortError
			require.True(t, errors.As(err, &ra) || errors.Is(err, ErrClosed), "got %v", err)
			break
		}
		require.True(t, time.Now().Before(deadline), "sends to an aborted peer kept succeeding")
		time.Sleep(5 * time.Millisecond)
	}
	_, _, err := b.Recv(ctx)
	var ra *RemoteAbortError
	require.ErrorAs(t, err, &ra)
	require.Contains(t, ra.Reason, "reduce_scatter #3")
}

// A send blocked on a receiver that does not read ends when its context
// does, by deadline (ErrTimeout) or cancellation (ErrAborted), and the
// deadline moved to interrupt it does not touch the next send.
func TestTCPSendEndsWithItsContext(t *testing.T) {
	const slots, slotBytes = 2, 256 << 10
	a, b := tinyBufferPair(t, slots, slotBytes)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The FIFO's two slots and the socket buffers fill; then sends block.
	sendUntilBlocked := func(end func() (context.Context, context.CancelFunc), want error) int {
		for k := 0; ; k++ {
			c, stop := end()
			t0 := time.Now()
			err := a.Send(c, uint32(k), pattern(slotBytes, k))
			stop()
			if err != nil {
				require.ErrorIs(t, err, want)
				require.Less(t, time.Since(t0), 3*time.Second)
				return k
			}
			require.Less(t, k, 100, "sends never blocked")
		}
	}
	sent := sendUntilBlocked(func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, 300*time.Millisecond)
	}, ErrTimeout)
	require.GreaterOrEqual(t, sent, slots, "the drainer gives the sender the FIFO's slots")
	// The link is out of step now (a message was cut): a new pair checks
	// that cancellation ends a blocked send as well.
	a, b = tinyBufferPair(t, slots, slotBytes)
	// Sends with a context that has ended and been disarmed leave no
	// deadline behind: each of these completes.
	for k := 0; k < slots; k++ {
		c, stop := context.WithCancel(ctx)
		require.NoError(t, a.Send(c, uint32(k), pattern(100, k)))
		stop()
	}
	for k := 0; k < slots; k++ {
		m, tag, err := b.Recv(ctx)
		require.NoError(t, err)
		require.Equal(t, uint32(k), tag)
		require.True(t, bytes.Equal(m, pattern(100, k)))
		b.Release()
	}
	sendUntilBlocked(func() (context.Context, context.CancelFunc) {
		c, stop := context.WithCancel(ctx)
		go func() { time.Sleep(300 * time.Millisecond); stop() }()
		return c, func() {}
	}, ErrAborted)
}

// Closing the link wakes a receive that waits for the next message.
func TestTCPCloseWakesRecv(t *testing.T) {
	_, b := tcpPair(t, 2, 1<<10)
	errc := make(chan error, 1)
	go func() {
		_, _, err := b.Recv(context.Background())
		errc <- err
	}()
	time.Sleep(30 * time.Millisecond)
	t0 := time.Now()
	require.NoError(t, b.Close())
	select {
	case err := <-errc:
		require.ErrorIs(t, err, ErrClosed)
		require.Less(t, time.Since(t0), 500*time.Millisecond)
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake the receive")
	}
}

// readableSoon reports bytes that are waiting, gives up after its
// yielding spin when none come, and lets one receiver of the process
// spin at a time (the others go to sleep in poll at once).
func TestTCPReadableSoon(t *testing.T) {
	d, s := tcpSockets(t)
	t.Cleanup(func() { d.Close(); s.Close() })
	raw, err := s.SyscallConn()
	require.NoError(t, err)
	soon := func() (ok bool) {
		require.NoError(t, raw.Control(func(fd uintptr) { ok = readableSoon(int32(fd), yieldSpin) }))
		return ok
	}
	t0 := time.Now()
	require.False(t, soon(), "nothing was sent")
	require.GreaterOrEqual(t, time.Since(t0), yieldSpin, "gave up before its spin")
	_, err = d.Write([]byte{1})
	require.NoError(t, err)
	require.Eventually(t, soon, time.Second, time.Millisecond, "a byte is waiting")
	spinning.Store(true) // another receiver spins
	require.False(t, soon(), "a second receiver polled (a byte is waiting)")
	spinning.Store(false)
	require.True(t, soon())
}
