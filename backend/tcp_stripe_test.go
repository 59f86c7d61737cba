package backend

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
)

// stripedPair connects k sockets and wraps them, in the same order, at
// both ends.
func stripedPair(t *testing.T, k, slots, slotBytes int) (Conn, Conn) {
	t.Helper()
	var as, bs []net.Conn
	for i := 0; i < k; i++ {
		a, b := tcpSockets(t)
		as, bs = append(as, a), append(bs, b)
	}
	a, b := NewStripedTCPConn(as, 1, 0, slots, slotBytes), NewStripedTCPConn(bs, 0, 0, slots, slotBytes)
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func init() {
	pairs["tcp3"] = func(t *testing.T, slots, slotBytes int) (Conn, Conn) { return stripedPair(t, 3, slots, slotBytes) }
}

func TestStripeSize(t *testing.T) {
	for _, c := range []struct{ n, k, want int }{
		{0, 4, 0}, {StripeMin - 1, 4, StripeMin - 1}, {1 << 20, 1, 1 << 20},
		{StripeMin, 4, StripeMin / 4}, {StripeMin + 1, 4, StripeMin/4 + 64}, {300007, 3, 100032},
	} {
		got := stripeSize(c.n, c.k)
		require.Equal(t, c.want, got, "n=%d k=%d", c.n, c.k)
		if c.k > 1 && c.n >= StripeMin {
			require.Zero(t, got%64, "n=%d k=%d: a multiple of 64", c.n, c.k)
		}
		require.GreaterOrEqual(t, got*c.k, c.n, "the parts cover the message")
	}
}

// Large messages cut over 2, 3 and 5 sockets arrive whole and in order,
// at sizes around the cut-off and that leave the last parts short or
// empty, through FIFO wrap-arounds, in both directions at once.
func TestStripedLargeMessages(t *testing.T) {
	sizes := []int{StripeMin - 1, StripeMin, StripeMin + 1, 100003, 1, 0, 150001, 200000, 3*64 + StripeMin, 262144}
	for _, k := range []int{2, 3, 5} {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			a, b := stripedPair(t, k, 3, 262144)
			exchangeBothWays(t, a, b, sizes, 8, 20*time.Second)
		})
	}
}

// A peer that closes while a striped message is half read fails the
// receive instead of hanging; a send into a closed link fails too.
func TestStripedPeerGone(t *testing.T) {
	a, b := stripedPair(t, 3, 2, 262144)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, a.Send(ctx, 1, pattern(200000, 1)))
	m, _, err := b.Recv(ctx)
	require.NoError(t, err)
	require.True(t, bytes.Equal(m, pattern(200000, 1)))
	b.Release()
	a.Close()
	_, _, err = b.Recv(ctx)
	require.ErrorIs(t, err, ErrClosed)
	err = a.Send(ctx, 2, pattern(200000, 2))
	require.Error(t, err)
}

// rawStriped returns 3 connected sockets, bare at one end (a test writes
// frames to them by hand) and wrapped as a striped link at the other.
func rawStriped(t *testing.T) (raw []net.Conn, rx Conn) {
	var wrapped []net.Conn
	for i := 0; i < 3; i++ {
		a, b := tcpSockets(t)
		raw, wrapped = append(raw, a), append(wrapped, b)
	}
	rx = NewStripedTCPConn(wrapped, 0, 0, 2, 262144)
	t.Cleanup(func() {
		rx.Close()
		for _, c := range raw {
			c.Close()
		}
	})
	return raw, rx
}

// sendFirstPart writes the header of a 200,000-byte striped message and
// its first part to socket 0, and returns the part size.
func sendFirstPart(t *testing.T, raw []net.Conn) int {
	const n = 200000
	size := stripeSize(n, len(raw))
	var hdr [8]byte
	binary.LittleEndian.PutUint32(hdr[:4], n)
	_, err := raw[0].Write(append(hdr[:], pattern(size, 1)...))
	require.NoError(t, err)
	return size
}

// A peer that gives up in the middle of a striped message (first part
// sent, the others not) leaves its reason on socket 0 after the first
// part: the receive fails with that reason, not with a bare reset.
func TestStripedAbortMidMessage(t *testing.T) {
	raw, rx := rawStriped(t)
	size := sendFirstPart(t, raw)
	reason := "rank 5 gave up: rank 7 died"
	frame := []byte{0xFF, 0xFF, 0xFF, 0xFF, byte(len(reason)), 0, 0, 0}
	_, err := raw[0].Write(append(frame, reason...))
	require.NoError(t, err)
	_, err = raw[1].Write(pattern(size/2, 2)) // half a part, then gone
	require.NoError(t, err)
	for _, c := range raw[1:] {
		c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err = rx.Recv(ctx)
	var ra *RemoteAbortError
	require.ErrorAs(t, err, &ra)
	require.Contains(t, err.Error(), reason)
}

// A link that goes silent in the middle of a striped message (the first
// part came, the others never do, and no socket closes: a cable pulled)
// ends the receive at its context's deadline, cancelled before or after
// the frame began, instead of waiting for the missing parts forever.
func TestStripedSilentMidMessageEndsAtDeadline(t *testing.T) {
	for _, name := range []string{"deadline", "cancel-then-deadline"} {
		t.Run(name, func(t *testing.T) {
			raw, rx := rawStriped(t)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if name == "cancel-then-deadline" {
				// Cancelled once the frame has begun: ignored until the
				// deadline, which still ends the receive.
				c, stop := context.WithCancel(ctx)
				time.AfterFunc(100*time.Millisecond, stop)
				ctx = c
			}
			t0 := time.Now()
			errc := make(chan error, 1)
			// The receive waits first, so that it (not the drainer) reads
			// the frame.
			go func() { _, _, err := rx.Recv(ctx); errc <- err }()
			time.Sleep(20 * time.Millisecond)
			size := sendFirstPart(t, raw)
			_, err := raw[1].Write(pattern(size/2, 2)) // half a part, then silence
			require.NoError(t, err)
			select {
			case err := <-errc:
				require.Error(t, err)
				require.Less(t, time.Since(t0), 3*time.Second)
			case <-time.After(5 * time.Second):
				t.Fatal("a receive waited past its deadline for parts that never came")
			}
			// The link is out of step: it stays failed (the next receive
			// fails at once, or by its own deadline).
			short, stop := context.WithTimeout(context.Background(), time.Second)
			defer stop()
			_, _, err = rx.Recv(short)
			require.Error(t, err)
		})
	}
}

// linkConns gives one link to every peer on every channel (stripesOnCaller
// asks for the links of a plan's steps).
type linkConns struct{ c Conn }

func (l linkConns) Conn(ch, peer int) (Conn, error) { return l.c, nil }

// A synchronous call from C runs its only stream in a goroutine of its own
// exactly where a step's fragment goes over a striped link: not for a Go
// caller, not over one socket, not for fragments below StripeMin.
func TestStripesOnCaller(t *testing.T) {
	g, err := algorithms.BuildGraph(algorithms.UniformLayout(2, 1, 1, algorithms.BalancedTree))
	require.NoError(t, err)
	plan := func(bytes int64) *algorithms.RankPlan {
		p, err := algorithms.BuildPlan(g, algorithms.PlanRequest{Coll: algorithms.AllReduce, Algo: algorithms.Ring, Proto: algorithms.Simple,
			Count: bytes / 4, DType: algorithms.Float32, Op: algorithms.Sum, Channels: 1, FragmentBytes: 128 << 10})
		require.NoError(t, err)
		return &p.Ranks[0]
	}
	striped, _ := stripedPair(t, 3, 4, 128<<10)
	single, _ := stripedPair(t, 1, 4, 128<<10)
	fromC := context.WithValue(context.Background(), CallerThreadKey, true)
	for _, c := range []struct {
		ctx   context.Context
		link  Conn
		bytes int64 // a 2-rank ring sends and receives half the message per step, in 128 KiB fragments
		want  bool
	}{
		{fromC, striped, 1 << 20, true},
		{fromC, striped, 2 * StripeMin, true},
		{fromC, striped, 2*StripeMin - 1024, false},
		{fromC, striped, 4, false},
		{fromC, single, 1 << 20, false},
		{context.Background(), striped, 1 << 20, false},
	} {
		x := executor{conns: linkConns{c.link}, esize: 4, frag: (128 << 10) / 4}
		require.Equal(t, c.want, x.stripesOnCaller(c.ctx, plan(c.bytes)), "%d bytes, caller from C %v", c.bytes, c.ctx != context.Background())
	}
}
