package pg

import (
	"errors"
	"fmt"
	"strings"
	"sync"
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
			// Err: the rank that saw the disagreement has it as invalid
			// argument, the ones it told as a peer's failure, all with why.
			detected := 0
			for r, c := range comms {
				err := c.Err()
				require.Error(t, err, "rank %d", r)
				require.Contains(t, err.Error(), "different operation", "rank %d", r)
				if errors.Is(err, ErrInvalidArgument) {
					detected++
				} else {
					require.ErrorIs(t, err, ErrRemote, "rank %d", r)
				}
			}
			require.Positive(t, detected, "no rank has the mismatch as its own failure")
			for r, c := range comms {
				_, err := c.Barrier()
				require.ErrorIs(t, err, ErrAborted, "rank %d", r)
			}
		})
	}
}

// initEach runs Init on n ranks of one new communicator at once, each
// with cfg adjusted by set, destroys those that succeed and returns every
// rank's error.
func initEach(t *testing.T, n int, cfg Config, set func(r int, c *Config)) []error {
	t.Helper()
	uid, err := NewUniqueID(cfg)
	require.NoError(t, err)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cfg
			set(r, &c)
			var comm *Comm
			if comm, errs[r] = Init(uid, r, n, c); comm != nil {
				comm.Destroy()
			}
		}()
	}
	wg.Wait()
	return errs
}

// Ranks whose settings would make them choose different plans for the
// same call (GOTREE_ALGO, channels, tuning), or send messages larger than
// their peers' slots (GOTREE_BUFFSIZE), fail in Init, every one of
// them, naming both settings, instead of waiting on each other later.
func TestDifferentChoiceSettingsFailInit(t *testing.T) {
	tu := algorithms.DefaultTuning()
	tu.Transports[algorithms.Shm].HopUs[algorithms.Tree][algorithms.Simple] = 0.5
	for _, tc := range []struct {
		name string
		set  func(c *Config)
		want string
	}{
		{"algo", func(c *Config) { c.Algo = "direct" }, `rank 1 has GOTREE_ALGO="direct" where rank 0 has GOTREE_ALGO="":`},
		{"algo list", func(c *Config) { c.Algo = "allreduce:tree; allgather:ring" }, `rank 1 has GOTREE_ALGO="allreduce:tree; allgather:ring" where rank 0 has GOTREE_ALGO="":`},
		{"channels", func(c *Config) { c.MaxChannels = 1 }, "rank 1 has GOTREE_MAX_NCHANNELS=1 where rank 0 has GOTREE_MAX_NCHANNELS=2:"},
		{"tuning", func(c *Config) { c.Tuning = tu }, "has tuning=sha256:"},
		{"shm", func(c *Config) { c.ShmDisable = true }, "rank 1 has GOTREE_SHM_DISABLE=1 where rank 0 has GOTREE_SHM_DISABLE=0:"},
		{"buffsize", func(c *Config) { c.SlotBytes = 512 << 10 }, "rank 1 has GOTREE_BUFFSIZE=4194304 where rank 0 has GOTREE_BUFFSIZE=1048576:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.MaxChannels = 2
			errs := initEach(t, 3, cfg, func(r int, c *Config) {
				if r == 1 {
					tc.set(c)
				}
			})
			for r, err := range errs {
				require.ErrorIs(t, err, ErrInvalidArgument, "rank %d", r)
				require.ErrorContains(t, err, "rank 1 has ", "rank %d", r)
				require.ErrorContains(t, err, tc.want, "rank %d", r)
				require.ErrorContains(t, err, "where rank 0 has ", "rank %d", r)
			}
			t.Logf("%v", errs[0])
		})
	}
}

// A rank that runs another gotree release (or wire protocol) fails Init on
// every rank, naming it and both versions, as NCCL refuses mismatched
// versions; a rank of an older gotree that names no version is called
// that. Different builds of one version only warn.
func TestDifferentVersionFailsInit(t *testing.T) {
	errs := initEach(t, 3, testConfig(), func(r int, c *Config) {
		c.HostID = fmt.Sprintf("node%d", r)
		if r == 2 {
			c.versionTag = "0.2.0/wire2"
		}
	})
	for r, err := range errs {
		require.ErrorIs(t, err, ErrInvalidArgument, "rank %d", r)
		require.ErrorContains(t, err, `rank 2 (host "node2") runs gotree 0.2.0 (wire protocol 2)`, "rank %d", r)
		require.ErrorContains(t, err, fmt.Sprintf(`rank 0 (host "node0") runs gotree %s (wire protocol %d)`, Version, WireVersion), "rank %d", r)
		require.ErrorContains(t, err, "install the same wheel on every node", "rank %d", r)
	}
	t.Logf("%v", errs[0])

	same := []rankInfo{{Rank: 0, HostID: "a", Version: versionTag()}, {Rank: 1, HostID: "b", Version: versionTag()}}
	require.NoError(t, sameVersion(same))
	old := append(same[:1:1], rankInfo{Rank: 1, HostID: "b"})
	require.ErrorContains(t, sameVersion(old), `rank 1 (host "b") runs a gotree from before the version check`)

	require.Empty(t, otherBuilds(same, 0), "builds unknown")
	same[0].Build, same[1].Build = "0123456789ab", "0123456789ab"
	require.Empty(t, otherBuilds(same, 1))
	same[1].Build = "ba9876543210+dirty"
	require.Contains(t, otherBuilds(same, 0), `rank 1 (host "b") runs gotree built from ba9876543210+dirty, this rank from 0123456789ab`)
}

// A data message of the same call run with another plan is named as such
// (planTag): the ring's tag is the call's, the others' differ.
func TestExplainTagNamesOtherPlan(t *testing.T) {
	c := &Comm{rank: 0, nranks: 3}
	a := collArgs{coll: algorithms.AllReduce, count: 1000, dt: algorithms.Int64, op: algorithms.Sum, seq: 4}
	base := opTag(a.coll, a.seq, a.count, a.dt, a.op, a.root)
	require.Equal(t, base, planTag(base, algorithms.Ring))
	a.algo = uint8(algorithms.Ring) + 1
	got := c.explainTag(a, 1, planTag(base, algorithms.Direct))
	require.Contains(t, got, "the same call run with the direct algorithm, which rank 1 chose where this rank chose ring")
	// Another call run with another plan is still found.
	b := a
	b.op = algorithms.Max
	got = c.explainTag(a, 2, planTag(opTag(b.coll, b.seq, b.count, b.dt, b.op, b.root), algorithms.HalvingDoubling))
	require.Contains(t, got, "allreduce #4 (1000 x int64, max), which is what rank 2 issued")
}

// placementSplitConfig allows ring and tree for allreduce and makes the
// tree's in-place calls inPlaceFactor times as cheap to the model, so
// that at some sizes it picks the tree in place and the ring out of place.
func placementSplitConfig(inPlaceFactor float64) Config {
	tu := algorithms.DefaultTuning()
	tu.Local = nil
	for k := range algorithms.CorrectionBuckets {
		tu.Transports[algorithms.Shm].InPlace[algorithms.Tree][algorithms.Simple][k] = inPlaceFactor
	}
	cfg := testConfig()
	cfg.Timeout = 30 * time.Second
	cfg.MaxChannels = 2
	cfg.Tuning = tu
	cfg.Algo = "ring,tree"
	return cfg
}

// The cost model may choose by placement (TransportCost.InPlace): a size
// where it does runs the ring check first, so that ranks of which some
// call in place and some not fail at once, naming both algorithms — not
// wait on each other's plans (here the tree in place, the ring out of
// place) until the timeout. Where all ranks agree, the call runs the
// placement's algorithm and sums exactly.
func TestPlacementChoiceAgreement(t *testing.T) {
	cfg := placementSplitConfig(0.001)
	cfg.NoAutoTune = true // autotuned sizes run one algorithm in either placement (TestAutotuneMixedPlacement)
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
	for _, c := range comms {
		require.NoError(t, c.Err())
	}
	r, err := comms[0].AllReduce(buf, buf, 8, algorithms.Int64, algorithms.Sum)
	require.NoError(t, err)
	err = r.Wait(-1)
	require.ErrorIs(t, err, ErrTimeout)
	require.Contains(t, err.Error(), "allreduce #1")
	require.ErrorIs(t, comms[0].Err(), ErrTimeout, "Err keeps the failure that aborted the communicator")
	require.Contains(t, comms[0].Err().Error(), "allreduce #1")
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
	require.ErrorIs(t, comms[1].Err(), ErrRemote, "rank 1 failed because its peer gave up")
	require.ErrorIs(t, comms[0].Err(), ErrTimeout, "the first failure stays")
}
