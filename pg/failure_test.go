package pg

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
)

// Ranks that disagree on the op (same sizes) or on the count all get an
// error quickly, not a garbage result and not a hang until the timeout.
func TestMismatchedCollectivesFailEveryRank(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hosts []string
		count func(r int) int64
		op    func(r int) algorithms.Op
	}{
		{"op-shm", nil, func(int) int64 { return 1000 }, func(r int) algorithms.Op {
			if r == 2 {
				return algorithms.Max
			}
			return algorithms.Sum
		}},
		{"count-tcp", []string{"a", "b", "c"}, func(r int) int64 { return int64(1000 + r/2) }, func(int) algorithms.Op { return algorithms.Sum }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Timeout = 30 * time.Second
			comms := startComms(t, 3, tc.hosts, cfg)
			start := time.Now()
			reqs := make([]*Request, 3)
			for r, c := range comms {
				n := tc.count(r)
				buf := make([]byte, 8*n)
				var err error
				reqs[r], err = c.AllReduce(buf, buf, n, algorithms.Int64, tc.op(r))
				require.NoError(t, err)
			}
			for r, q := range reqs {
				err := q.Wait(-1)
				require.Error(t, err, "rank %d got no error", r)
				t.Logf("rank %d: %v", r, err)
			}
			require.Less(t, time.Since(start), 10*time.Second, "errors came from the timeout, not from detection")
			for r, c := range comms {
				_, err := c.Barrier()
				require.ErrorIs(t, err, ErrAborted, "rank %d", r)
			}
		})
	}
}

// One rank times out waiting for a peer that never issues the collective;
// it aborts, and the peer's next call fails at once, naming why.
func TestTimeoutAbortsAndTellsPeers(t *testing.T) {
	cfg := testConfig()
	cfg.Timeout = 1 * time.Second
	comms := startComms(t, 2, nil, cfg)
	buf := make([]byte, 64)
	r, err := comms[0].AllReduce(buf, buf, 8, algorithms.Int64, algorithms.Sum)
	require.NoError(t, err)
	err = r.Wait(-1)
	require.ErrorIs(t, err, ErrTimeout)
	require.Contains(t, err.Error(), "allreduce #1")
	// Rank 1 learns of it within two calls (the first may legitimately
	// complete from what rank 0 sent before it gave up), with rank 0's
	// reason, quickly.
	start := time.Now()
	var last error
	for i := 0; i < 2 && last == nil; i++ {
		r1, err := comms[1].AllReduce(buf, buf, 8, algorithms.Int64, algorithms.Sum)
		if err == nil {
			err = r1.Wait(-1)
		}
		last = err
	}
	require.Error(t, last)
	require.Contains(t, fmt.Sprint(last), "rank 0")
	require.Less(t, time.Since(start), 3*time.Second)
}
