package backend

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// rawPair is two connected sockets taken out of the runtime's poller.
func rawPair(t *testing.T) (*rawSocket, *rawSocket) {
	t.Helper()
	d, s := tcpSockets(t)
	a, ok := detachSocket(d).(*rawSocket)
	require.True(t, ok, "a *net.TCPConn is detached")
	b, ok := detachSocket(s).(*rawSocket)
	require.True(t, ok)
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// blockedRead starts a read on s that nothing will satisfy and returns
// its result channel once the read has had time to block.
func blockedRead(t *testing.T, s *rawSocket) chan error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := s.Read(make([]byte, 8))
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	return errc
}

// A link's socket 0 is read and written outside the runtime's poller;
// its data, deadlines, end of stream and close behave as net.Conn's.
func TestRawSocket(t *testing.T) {
	t.Run("link uses it", func(t *testing.T) {
		d, s := tcpSockets(t)
		c := NewTCPConn(d, 1, 0, 2, 1024).(*tcpConn)
		defer c.Close()
		defer s.Close()
		require.IsType(t, &rawSocket{}, c.c)
		require.NotNil(t, c.raw, "pollReadable and pending keep their descriptor access")
		// A pipe end is no socket: kept as it is.
		p, q := net.Pipe()
		defer q.Close()
		require.Equal(t, p, detachSocket(p))
		p.Close()
	})
	t.Run("data both ways, several buffers in one call, partial sends", func(t *testing.T) {
		a, b := rawPair(t)
		msg := pattern(300000, 3) // more than the socket buffers: partial sends
		done := make(chan error, 1)
		go func() {
			_, err := writeBuffers(a, &net.Buffers{[]byte("hdr:"), msg, nil, []byte(":end")})
			done <- err
		}()
		got := make([]byte, 4+len(msg)+4)
		_, err := io.ReadFull(b, got)
		require.NoError(t, err)
		require.NoError(t, <-done)
		require.Equal(t, "hdr:", string(got[:4]))
		require.Equal(t, msg, got[4:4+len(msg)])
		require.Equal(t, ":end", string(got[4+len(msg):]))
		_, err = b.Write([]byte("back"))
		require.NoError(t, err)
		_, err = io.ReadFull(a, got[:4])
		require.NoError(t, err)
		require.Equal(t, "back", string(got[:4]))
	})
	t.Run("a deadline moved into the past ends a blocked read", func(t *testing.T) {
		a, _ := rawPair(t)
		errc := blockedRead(t, a)
		select {
		case err := <-errc:
			t.Fatalf("read returned with nothing sent: %v", err)
		default:
		}
		require.NoError(t, a.SetReadDeadline(time.Unix(1, 0)))
		select {
		case err := <-errc:
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			require.True(t, isTimeout(err))
		case <-time.After(5 * time.Second):
			t.Fatal("the read did not end")
		}
		// A future deadline passes by itself.
		require.NoError(t, a.SetReadDeadline(time.Now().Add(30*time.Millisecond)))
		t0 := time.Now()
		_, err := a.Read(make([]byte, 8))
		require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		require.Less(t, time.Since(t0), 5*time.Second)
	})
	t.Run("a write deadline ends a write the peer never reads", func(t *testing.T) {
		a, _ := rawPair(t)
		require.NoError(t, a.SetWriteDeadline(time.Now().Add(100*time.Millisecond)))
		_, err := a.Write(make([]byte, 64<<20))
		require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	})
	t.Run("close wakes a blocked read and waits for it", func(t *testing.T) {
		a, _ := rawPair(t)
		errc := blockedRead(t, a)
		require.NoError(t, a.Close())
		select {
		case err := <-errc:
			require.ErrorIs(t, err, net.ErrClosed)
		case <-time.After(5 * time.Second):
			t.Fatal("close did not end the read")
		}
		_, err := a.Write([]byte("x"))
		require.ErrorIs(t, err, net.ErrClosed)
		require.NoError(t, a.Close(), "a second close is harmless")
	})
	t.Run("the peer's close is end of stream, then a failed write", func(t *testing.T) {
		a, b := rawPair(t)
		require.NoError(t, b.Close())
		_, err := a.Read(make([]byte, 8))
		require.ErrorIs(t, err, io.EOF)
		// Writes to a closed peer fail (EPIPE or a reset), never a signal.
		var werr error
		for i := 0; i < 100 && werr == nil; i++ {
			_, werr = a.Write(make([]byte, 4096))
			time.Sleep(time.Millisecond)
		}
		require.Error(t, werr)
		require.False(t, errors.Is(werr, net.ErrClosed), "the local end is open: %v", werr)
	})
}
