package backend

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func tcpPair(t *testing.T, slots, slotBytes int) (Conn, Conn) {
	t.Helper()
	d, s := tcpSockets(t)
	a, b := NewTCPConn(d, 1, 0, slots, slotBytes), NewTCPConn(s, 0, 0, slots, slotBytes)
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func memPair(t *testing.T, slots, slotBytes int) (Conn, Conn) {
	a, b := NewMemPair(0, 1, 0, slots, slotBytes)
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

var pairs = map[string]func(*testing.T, int, int) (Conn, Conn){"tcp": tcpPair, "mem": memPair}

func pattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31 + seed*7)
	}
	return b
}

// Messages of awkward sizes arrive intact and in order, through many FIFO
// wrap-arounds, in both directions at once.
func TestConnOrderAndWrap(t *testing.T) {
	for name, mk := range pairs {
		t.Run(name, func(t *testing.T) {
			a, b := mk(t, 3, 1000)
			exchangeBothWays(t, a, b, []int{0, 1, 2, 999, 1000, 7, 13, 0, 512}, 50, 10*time.Second)
		})
	}
}

// exchangeBothWays sends rounds × sizes messages from a to b and from b to
// a at once and checks that each arrives whole, in order, with its tag.
func exchangeBothWays(t *testing.T, a, b Conn, sizes []int, rounds int, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	errc := make(chan error, 2)
	for dir, tx := range []Conn{a, b} {
		go func(dir int, tx Conn) {
			for r := 0; r < rounds; r++ {
				for i, n := range sizes {
					if err := tx.Send(ctx, uint32(r*100+i), pattern(n, r*100+i+dir)); err != nil {
						errc <- err
						return
					}
				}
			}
			errc <- nil
		}(dir, tx)
	}
	for dir, rx := range []Conn{b, a} {
		for r := 0; r < rounds; r++ {
			for i, n := range sizes {
				m, tag, err := rx.Recv(ctx)
				require.NoError(t, err)
				require.True(t, bytes.Equal(m, pattern(n, r*100+i+dir)), "dir %d round %d msg %d (%d bytes)", dir, r, i, n)
				require.Equal(t, uint32(r*100+i), tag)
				rx.Release()
			}
		}
	}
	require.NoError(t, <-errc)
	require.NoError(t, <-errc)
}

func TestConnErrors(t *testing.T) {
	for name, mk := range pairs {
		t.Run(name, func(t *testing.T) {
			a, b := mk(t, 2, 64)
			ctx := context.Background()
			err := a.Send(ctx, 0, make([]byte, 65))
			require.Error(t, err)
			require.Contains(t, err.Error(), "exceeds")

			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			_, _, err = b.Recv(short)
			require.ErrorIs(t, err, ErrTimeout)
			var pe *PeerError
			require.ErrorAs(t, err, &pe)

			require.NoError(t, a.Close())
			_, _, err = b.Recv(ctx)
			require.ErrorIs(t, err, ErrClosed)
		})
	}
}

func shmPair(t *testing.T, slots, slotBytes int) (Conn, Conn) {
	t.Helper()
	ta, tb := tcpSockets(t)
	type res struct {
		c   Conn
		err error
	}
	ch := make(chan res, 1)
	dl := time.Now().Add(5 * time.Second)
	go func() {
		c, err := OpenShmConn(tb, 0, 0, dl)
		ch <- res{c, err}
	}()
	a, err := CreateShmConn(ta, 1, 0, slots, slotBytes, dl)
	require.NoError(t, err)
	r := <-ch
	require.NoError(t, r.err)
	t.Cleanup(func() { a.Close(); r.c.Close() })
	return a, r.c
}

func tcpSockets(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer ln.Close()
	acc := make(chan *net.TCPConn, 1)
	go func() {
		c, _ := ln.AcceptTCP()
		acc <- c
	}()
	d, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	require.NoError(t, err)
	s := <-acc
	require.NotNil(t, s)
	return d, s
}

func init() { pairs["shm"] = shmPair }

// An abort reaches the peer with its reason, waking a blocked receive.
func TestConnAbortCarriesReason(t *testing.T) {
	for name, mk := range pairs {
		t.Run(name, func(t *testing.T) {
			a, b := mk(t, 2, 64)
			errc := make(chan error, 1)
			go func() {
				_, _, err := b.Recv(context.Background())
				errc <- err
			}()
			time.Sleep(20 * time.Millisecond)
			a.Abort("rank 0: allreduce #7 timed out")
			select {
			case err := <-errc:
				var ra *RemoteAbortError
				require.ErrorAs(t, err, &ra)
				require.Contains(t, ra.Reason, "allreduce #7")
			case <-time.After(5 * time.Second):
				t.Fatal("blocked Recv did not wake on the peer's abort")
			}
		})
	}
}

// Probe waits for a message without taking it: the next Recv returns the
// same message, and a probe that times out leaves the link usable.
func TestConnProbe(t *testing.T) {
	for name, mk := range pairs {
		t.Run(name, func(t *testing.T) {
			a, b := mk(t, 2, 64)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p, ok := b.(Prober)
			require.True(t, ok, "%s links must implement Prober", name)

			short, cancelShort := context.WithTimeout(ctx, 30*time.Millisecond)
			defer cancelShort()
			require.ErrorIs(t, p.Probe(short), ErrTimeout)

			for i, n := range []int{5, 0, 64} {
				require.NoError(t, a.Send(ctx, uint32(40+i), pattern(n, i)))
				require.NoError(t, p.Probe(ctx))
				require.NoError(t, p.Probe(ctx), "a second probe sees the same message")
				m, tag, err := b.Recv(ctx)
				require.NoError(t, err)
				require.Equal(t, uint32(40+i), tag)
				require.True(t, bytes.Equal(m, pattern(n, i)))
				b.Release()
			}
			require.NoError(t, a.Close())
			require.ErrorIs(t, p.Probe(ctx), ErrClosed)
		})
	}
}

// An operation whose caller waits for it yields longer before its waits
// sleep, also under contexts derived from its own (several streams);
// under NoYield no wait yields at all.
func TestYieldPhase(t *testing.T) {
	var pol WaitPolicy
	require.Equal(t, yieldSpin, pol.yieldPhase(context.Background()))
	ctx := context.WithValue(context.Background(), CallerWaitsKey, true)
	require.Equal(t, callerYieldSpin, pol.yieldPhase(ctx))
	derived, cancel := context.WithCancel(ctx)
	defer cancel()
	require.Equal(t, callerYieldSpin, pol.yieldPhase(derived))
	require.Greater(t, callerYieldSpin, yieldSpin)

	pol.NoYield = true
	require.Equal(t, time.Duration(0), pol.yieldPhase(context.Background()))
	require.Equal(t, time.Duration(0), pol.yieldPhase(nil))
	require.Equal(t, time.Duration(0), pol.yieldPhase(derived), "nor does a waiting caller's")
}

// Busy polling turns itself off for busyBackoff after busyMissLimit
// waits in a row showed that it held the CPU its peer needed, and the
// waiter leaves its CPU; then one more such wait does both again, and a
// wait that shows the peer has a CPU of its own clears the count.
func TestBusyGuard(t *testing.T) {
	saved := leaveCPU
	defer func() { leaveCPU = saved }()
	left := 0
	leaveCPU = func() bool { left++; return true }
	var g busyGuard
	at := func(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }
	for i := 1; i < busyMissLimit; i++ {
		g.record(true, at(1))
		require.True(t, g.allow(at(1)), "after %d misses", i)
	}
	g.record(false, 0) // clears the count
	for i := 1; i < busyMissLimit; i++ {
		g.record(true, at(2))
	}
	require.True(t, g.allow(at(2)))
	require.Zero(t, left)
	g.record(true, at(2))
	require.False(t, g.allow(at(2)), "off after %d in a row", busyMissLimit)
	require.Equal(t, 1, left, "and the waiter left its CPU")
	require.False(t, g.allow(at(2)+busyBackoff-1))
	require.True(t, g.allow(at(2)+busyBackoff), "back after the back-off")
	g.record(true, at(30))
	require.False(t, g.allow(at(30)), "one more turns it off again")
	require.Equal(t, 2, left)
	require.True(t, g.allow(at(30)+busyBackoff))
	g.record(false, 0)
	g.record(true, at(60))
	require.True(t, g.allow(at(60)), "the count starts over")
	require.Equal(t, 2, left)
}

// leaveCPU moves the calling thread to another CPU of its affinity and
// gives the affinity back; with one CPU allowed it stays.
func TestLeaveCPU(t *testing.T) {
	var all unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &all))
	if all.Count() < 2 {
		t.Skip("one CPU: nowhere to go")
	}
	type result struct {
		moved, sameMask bool
		from, to        int
		err             error
	}
	onThread := func(mask *unix.CPUSet) result {
		done := make(chan result)
		go func() {
			runtime.LockOSThread() // not unlocked: the thread ends with the goroutine
			var r result
			if mask != nil {
				if r.err = unix.SchedSetaffinity(0, mask); r.err != nil {
					done <- r
					return
				}
			}
			var before, after unix.CPUSet
			unix.SchedGetaffinity(0, &before)
			r.from, _ = currentCPU()
			r.moved = leaveCPU()
			r.to, _ = currentCPU()
			unix.SchedGetaffinity(0, &after)
			r.sameMask = before == after
			done <- r
		}()
		return <-done
	}
	r := onThread(nil)
	require.NoError(t, r.err)
	require.True(t, r.moved)
	require.NotEqual(t, r.from, r.to, "the thread runs on another CPU")
	require.True(t, r.sameMask, "with its affinity as it was")
	var one unix.CPUSet
	for c := 0; ; c++ {
		if all.IsSet(c) {
			one.Set(c)
			break
		}
	}
	r = onThread(&one)
	require.NoError(t, r.err)
	require.False(t, r.moved, "one CPU allowed")
	require.Equal(t, r.from, r.to)
	require.True(t, r.sameMask)
}

// Through pollThenYield: a wait whose data comes as soon as it yields
// (the peer ran on its CPU) counts against busy polling, one whose data
// comes later (a late peer) or during the poll does not; once off, the
// wait skips the poll.
func TestBusyGuardWaits(t *testing.T) {
	busy = busyGuard{}
	saved, savedLeave := yieldOnce, leaveCPU
	defer func() { busy, yieldOnce, leaveCPU = busyGuard{}, saved, savedLeave }()
	left := 0
	leaveCPU = func() bool { left++; return true }
	pol := WaitPolicy{BusyPoll: 30 * time.Microsecond, Pollers: 1}
	ctx := context.Background()

	// The peer runs only when this thread yields.
	var sent bool
	polls := 0
	yieldOnce = func() { sent = true }
	onYield := func() bool { polls++; return sent }
	for i := 0; i < busyMissLimit; i++ {
		sent = false
		require.True(t, pollThenYield(ctx, onYield, pol))
	}
	require.False(t, busy.allow(time.Since(pollEpoch)), "off after %d such waits", busyMissLimit)
	require.Equal(t, 1, left, "and the waiter left its CPU")
	require.Positive(t, polls)
	require.Equal(t, pollSkipped, busyPoll(func() bool { return false }, pol), "no busy poll while off")

	// A late peer (no data after the yield either) and a prompt one (data
	// at the first check of the busy poll, whatever the clock says: a
	// loaded machine may stop this thread for longer than BusyPoll) clear
	// the count.
	busy = busyGuard{}
	busy.misses.Store(busyMissLimit - 1)
	yieldOnce = saved
	require.False(t, pollThenYield(ctx, func() bool { return false }, pol), "the caller would sleep now")
	require.Zero(t, busy.misses.Load())
	busy.misses.Store(busyMissLimit - 1)
	n := 0
	require.True(t, pollThenYield(ctx, func() bool { n++; return n > prePolls }, pol))
	require.Equal(t, prePolls+1, n, "caught by the busy poll's first check")
	require.Zero(t, busy.misses.Load())
	require.True(t, busy.allow(time.Since(pollEpoch)))
}

// A shm link reports why it failed (failureReporter): nothing while the
// peer is there, the peer's reason once it aborts.
func TestShmFailureReason(t *testing.T) {
	a, b := shmPair(t, 4, 4096)
	f, ok := a.(failureReporter)
	require.True(t, ok)
	start := time.Now()
	require.NoError(t, f.failure(20*time.Millisecond))
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)
	b.Abort("rank 1 gave up: rank 2 is gone")
	err := f.failure(5 * time.Second)
	var ra *RemoteAbortError
	require.ErrorAs(t, err, &ra)
	require.Equal(t, "rank 1 gave up: rank 2 is gone", ra.Reason)
}

// A shared-memory link closed while an operation is in flight unmaps its
// segment when that operation leaves, and Close waits for it (up to
// shmCloseWait), so nothing stays mapped after Close returns; Abort does
// not wait.
func TestShmCloseWaitsForInflight(t *testing.T) {
	mapped := func(c Conn) bool {
		s := c.(*shmConn)
		s.mu.Lock()
		defer s.mu.Unlock()
		return !s.unmapped
	}
	a, b := shmPair(t, 4, 4096)
	sa := a.(*shmConn)
	require.True(t, sa.enter())
	const hold = 50 * time.Millisecond
	go func() { time.Sleep(hold); sa.exit() }()
	start := time.Now()
	require.NoError(t, a.Close())
	require.GreaterOrEqual(t, time.Since(start), hold, "Close returned before the operation in flight left")
	require.False(t, mapped(a), "segment still mapped after Close")

	sb := b.(*shmConn)
	require.True(t, sb.enter())
	start = time.Now()
	b.Abort("test")
	require.Less(t, time.Since(start), hold, "Abort waited for an operation in flight")
	require.True(t, mapped(b), "Abort unmapped under an operation in flight")
	sb.exit()
	require.False(t, mapped(b), "the last operation to leave did not unmap")
}
