package pg

import (
	"fmt"
	"strings"
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

// Ranks whose settings make them choose different algorithms for the
// same allreduce (GOTREE_ALGO differs) fail quickly on each other's data
// tags, and name the two algorithms. (Settings that differ so that one
// rank runs the tree and another the ring can still leave them waiting
// until the timeout: each waits on a link the other never writes.)
func TestRanksThatChooseDifferentAlgorithmsFail(t *testing.T) {
	for _, odd := range []string{"direct", "hd"} {
		t.Run(odd, func(t *testing.T) {
			cfg := testConfig()
			cfg.Timeout = 30 * time.Second
			cfg.MaxChannels = 2
			comms := startCommsEach(t, 3, cfg, func(r int, c *Config) {
				c.Algo = "ring"
				if r == 1 {
					c.Algo = odd
				}
			})
			errs := allReduceEach(t, comms, 1000, func(int) bool { return true })
			named := false
			for _, err := range errs {
				named = named || strings.Contains(err.Error(), "run with the "+odd+" algorithm, which rank 1 chose where this rank chose ring") ||
					strings.Contains(err.Error(), "run with the ring algorithm, which rank 0 chose where this rank chose "+odd) ||
					strings.Contains(err.Error(), "run with the ring algorithm, which rank 2 chose where this rank chose "+odd)
			}
			require.True(t, named, "no rank named the two algorithms")
		})
	}
}

// The cost model may choose by placement (TransportCost.InPlace): a size
// where it does runs the ring check first, so that ranks of which some
// call in place and some not fail at once, naming both algorithms — not
// wait on each other's plans (here the tree in place, the ring out of
// place) until the timeout. Where all ranks agree, the call runs the
// placement's algorithm and sums exactly.
func TestPlacementChoiceAgreement(t *testing.T) {
	tu := algorithms.DefaultTuning()
	tu.Local = nil
	for k := range algorithms.CorrectionBuckets {
		tu.Transports[algorithms.Shm].InPlace[algorithms.Tree][algorithms.Simple][k] = 0.001
	}
	cfg := testConfig()
	cfg.Timeout = 30 * time.Second
	cfg.MaxChannels = 2
	cfg.Tuning = tu
	cfg.Algo = "ring,tree"
	comms := startComms(t, 3, nil, cfg)
	const count = 1000
	out, err := comms[0].PlanOf(algorithms.AllReduce, count, algorithms.Int64, algorithms.Sum, 0, false)
	require.NoError(t, err)
	in, err := comms[0].PlanOf(algorithms.AllReduce, count, algorithms.Int64, algorithms.Sum, 0, true)
	require.NoError(t, err)
	require.Equal(t, algorithms.Ring, out.Algo)
	require.Equal(t, algorithms.Tree, in.Algo)
	for _, inplace := range []bool{true, false, true} {
		checkAllReduceInt64(t, comms, count, inplace)
	}
	errs := allReduceEach(t, comms, count, func(r int) bool { return r == 1 })
	named := false
	for _, err := range errs {
		named = named || strings.Contains(err.Error(), "with the tree algorithm where this rank runs ring") ||
			strings.Contains(err.Error(), "with the ring algorithm where this rank runs tree")
	}
	require.True(t, named, "no rank named the two algorithms")
}

// allReduceEach issues an int64 sum of count elements on every rank (in
// place where inPlace says), expects every rank to fail well before the
// communicators' timeout, and returns the errors.
func allReduceEach(t *testing.T, comms []*Comm, count int64, inPlace func(r int) bool) []error {
	t.Helper()
	start := time.Now()
	reqs := make([]*Request, len(comms))
	for r, c := range comms {
		buf, out := make([]byte, 8*count), make([]byte, 8*count)
		if inPlace(r) {
			out = buf
		}
		var err error
		reqs[r], err = c.AllReduce(buf, out, count, algorithms.Int64, algorithms.Sum)
		require.NoError(t, err)
	}
	errs := make([]error, len(reqs))
	for r, q := range reqs {
		errs[r] = q.Wait(-1)
		require.Error(t, errs[r], "rank %d got no error", r)
		t.Logf("rank %d: %v", r, errs[r])
	}
	require.Less(t, time.Since(start), 10*time.Second, "errors came from the timeout, not from detection")
	return errs
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
