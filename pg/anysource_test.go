package pg

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
)

// Rank 0 receives from any source while every other rank sends it msgs
// messages: it gets each rank's messages exactly once, in each sender's
// order, and Source names the sender. Runs over shm (one host) and TCP.
func TestRecvAnySource(t *testing.T) {
	for _, tc := range []struct {
		n     int
		hosts []string
	}{{2, nil}, {3, nil}, {4, []string{"a", "b", "a", "c"}}} {
		t.Run(fmt.Sprintf("%d-%v", tc.n, tc.hosts != nil), func(t *testing.T) {
			cfg := testConfig()
			cfg.SlotBytes = 4096
			comms := startComms(t, tc.n, tc.hosts, cfg)
			const msgs = 5
			const count = 1031 // spans several slots
			var sends []*Request
			for r := 1; r < tc.n; r++ {
				for m := 0; m < msgs; m++ {
					v := make([]int64, count)
					for i := range v {
						v[i] = val(r, int64(m*count+i))
					}
					q, err := comms[r].Send(i64s(v), count, algorithms.Int64, 0)
					require.NoError(t, err)
					sends = append(sends, q)
				}
			}
			next := make([]int, tc.n) // next message index expected per sender
			for k := 0; k < msgs*(tc.n-1); k++ {
				buf := make([]byte, 8*count)
				q, err := comms[0].RecvAny(buf, count, algorithms.Int64)
				require.NoError(t, err)
				require.NoError(t, q.Wait(-1))
				src := q.Source()
				require.True(t, src >= 1 && src < tc.n, "source %d", src)
				m := next[src]
				next[src]++
				for i := int64(0); i < count; i++ {
					require.Equal(t, val(src, int64(m*count)+i), getI64(buf, i), "message %d from rank %d elem %d", m, src, i)
				}
			}
			for r := 1; r < tc.n; r++ {
				require.Equal(t, msgs, next[r], "messages from rank %d", r)
			}
			for _, q := range sends {
				require.NoError(t, q.Wait(-1))
			}
		})
	}
}

// A receive from any source and receives from one peer issued around it
// keep their order: recv(1), any, recv(1) take rank 1's messages 0, 1, 2
// when only rank 1 sends.
func TestRecvAnySourceOrdering(t *testing.T) {
	cfg := testConfig()
	comms := startComms(t, 3, nil, cfg)
	bufs := make([][]byte, 3)
	var reqs []*Request
	for m := range bufs {
		bufs[m] = make([]byte, 8)
		var q *Request
		var err error
		if m == 1 {
			q, err = comms[0].RecvAny(bufs[m], 1, algorithms.Int64)
		} else {
			q, err = comms[0].Recv(bufs[m], 1, algorithms.Int64, 1)
		}
		require.NoError(t, err)
		reqs = append(reqs, q)
	}
	for m := 0; m < 3; m++ {
		q, err := comms[1].Send(i64s([]int64{int64(100 + m)}), 1, algorithms.Int64, 0)
		require.NoError(t, err)
		require.NoError(t, q.Wait(-1))
	}
	for m, q := range reqs {
		require.NoError(t, q.Wait(-1))
		require.Equal(t, int64(100+m), getI64(bufs[m], 0), "message %d", m)
	}
	require.Equal(t, 1, reqs[1].Source())
	require.Equal(t, -1, reqs[0].Source(), "a receive from a named peer has no Source")
}

// Nobody sends: the receive fails with a timeout naming it, and an
// aborted communicator fails a pending one at once.
func TestRecvAnySourceTimeout(t *testing.T) {
	cfg := testConfig()
	cfg.Timeout = 300 * time.Millisecond
	comms := startComms(t, 3, nil, cfg)
	q, err := comms[2].RecvAny(make([]byte, 8), 1, algorithms.Int64)
	require.NoError(t, err)
	err = q.Wait(-1)
	require.ErrorIs(t, err, ErrTimeout)
	require.Contains(t, err.Error(), "any source")

	_, err = comms[1].RecvAny(nil, 0, algorithms.Int64)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Contains(t, err.Error(), "0 elements")

	one := startComms(t, 1, nil, testConfig())
	_, err = one[0].RecvAny(make([]byte, 8), 1, algorithms.Int64)
	require.ErrorIs(t, err, ErrInvalidArgument)
}
