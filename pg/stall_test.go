package pg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
)

// mismatchedPlans issues an allreduce of 3 int64 on rank 0 and of 5 on
// the others, at 4 ranks: with the built-in tuning the first runs
// halving-doubling and the others the ring, and no rank ever reads a
// message of the other plan (rank 0 sends to rank 2 and waits for it;
// rank 2 waits for rank 1, rank 1 for rank 0). It returns each rank's
// error and how long the slowest took.
func mismatchedPlans(t *testing.T, cfg Config) ([]error, time.Duration) {
	t.Helper()
	cfg.NoAutoTune = true // the model's choice, the same on every run
	comms := startComms(t, 4, nil, cfg)
	const small, large = 3, 5
	ps, err := comms[0].PlanOf(algorithms.AllReduce, small, algorithms.Int64, algorithms.Sum, 0, false)
	require.NoError(t, err)
	pl, err := comms[0].PlanOf(algorithms.AllReduce, large, algorithms.Int64, algorithms.Sum, 0, false)
	require.NoError(t, err)
	require.NotEqual(t, ps.Algo, pl.Algo, "the scenario needs two plans; the built-in tuning changed: pick other counts")
	start := time.Now()
	errs := issueEach(comms, func(r int, c *Comm) (*Request, error) {
		n := int64(large)
		if r == 0 {
			n = small
		}
		buf := make([]byte, 8*n)
		return c.AllReduce(buf, buf, n, algorithms.Int64, algorithms.Sum)
	})
	return errs, time.Since(start)
}

// issueEach issues one operation on every rank at once (issue returns
// nil, nil for a rank that issues nothing), waits for each, and returns
// every rank's error.
func issueEach(comms []*Comm, issue func(r int, c *Comm) (*Request, error)) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q, err := issue(r, c)
			if err == nil && q != nil {
				err = q.Wait(-1)
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	return errs
}

// Ranks that run different plans and wait on each other fail within
// about the stall check's delay, every one of them, and the error names
// both calls; without the check they wait for the timeout.
func TestStallCheckFindsDifferentPlans(t *testing.T) {
	cfg := testConfig()
	cfg.Timeout = 30 * time.Second
	cfg.StallCheck = 100 * time.Millisecond
	errs, took := mismatchedPlans(t, cfg)
	require.Less(t, took, 10*time.Second, "the errors came from the timeout")
	named := false
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		t.Logf("rank %d: %v", r, err)
		require.True(t, errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrRemote), "rank %d: %v", r, err)
		if s := err.Error(); errors.Is(err, errStallMismatch) || (strings.Contains(s, "(3 x int64, sum)") && strings.Contains(s, "(5 x int64, sum)")) {
			named = true
		}
	}
	require.True(t, named, "no rank's error names both calls")

	cfg.Timeout = 2 * time.Second
	cfg.StallCheck = -1
	errs, took = mismatchedPlans(t, cfg)
	require.GreaterOrEqual(t, took, cfg.Timeout, "without the stall check something else found the disagreement: the scenario no longer needs the check")
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
	}
}

// A rank that is merely late makes its neighbours send their views, and
// nothing fails: the views agree, or arrive before the late rank's call.
func TestStallCheckQuietForLateRank(t *testing.T) {
	cfg := testConfig()
	cfg.StallCheck = 30 * time.Millisecond
	comms := startComms(t, 3, nil, cfg)
	const count = 1000
	for it := 0; it < 4; it++ {
		late := it % 3
		outs := make([][]byte, 3)
		errs := issueEach(comms, func(r int, c *Comm) (*Request, error) {
			if r == late {
				time.Sleep(200 * time.Millisecond)
			}
			v := make([]int64, count)
			for i := range v {
				v[i] = val(r, int64(i))
			}
			outs[r] = i64s(v)
			return c.AllReduce(outs[r], outs[r], count, algorithms.Int64, algorithms.Sum)
		})
		for r := range comms {
			require.NoError(t, errs[r], "iteration %d rank %d", it, r)
			for i := int64(0); i < count; i++ {
				want := val(0, i) + val(1, i) + val(2, i)
				require.Equal(t, want, int64(binary.LittleEndian.Uint64(outs[r][8*i:])), "iteration %d rank %d element %d", it, r, i)
			}
		}
	}
	views := 0
	for r, c := range comms {
		require.NoError(t, c.Err(), "rank %d", r)
		c.stall.mu.Lock()
		views += len(c.stall.peers)
		c.stall.mu.Unlock()
	}
	require.Positive(t, views, "no rank received a view: the check never ran")
}

func TestCallViewEncoding(t *testing.T) {
	v := callView{seq: 1<<40 + 7, tag: 0xdeadbeef, desc: "allreduce #7 (3 x int64, sum) with the hd plan"}
	got, err := decodeView(v.encode())
	require.NoError(t, err)
	require.Equal(t, v, got)
	_, err = decodeView(make([]byte, 11))
	require.Error(t, err)
	long := callView{desc: string(make([]byte, 2*maxViewText))}
	got, err = decodeView(long.encode())
	require.NoError(t, err)
	require.Len(t, got.desc, maxViewText)
}

// A call that times out because a rank never issued it says so: the
// neighbours stuck in the same call say so, the missing rank sent no
// view.
func TestStallNoteNamesTheMissingRank(t *testing.T) {
	t.Run("shm", func(t *testing.T) { stallNoteNamesTheMissingRank(t, nil) })
	t.Run("tcp", func(t *testing.T) { stallNoteNamesTheMissingRank(t, []string{"a", "b", "c"}) })
}

func stallNoteNamesTheMissingRank(t *testing.T, hosts []string) {
	cfg := testConfig()
	cfg.Timeout = 1500 * time.Millisecond
	cfg.StallCheck = 50 * time.Millisecond
	comms := startComms(t, 3, hosts, cfg)
	errs := issueEach(comms, func(r int, c *Comm) (*Request, error) {
		if r == 0 {
			return nil, nil // never issues it
		}
		buf := make([]byte, 8*100)
		return c.AllReduce(buf, buf, 100, algorithms.Int64, algorithms.Sum)
	})
	timedOut := 0
	for r := 1; r < 3; r++ {
		require.Error(t, errs[r], "rank %d", r)
		t.Logf("rank %d: %v", r, errs[r])
		if errors.Is(errs[r], ErrTimeout) {
			timedOut++
			other := 3 - r
			require.Contains(t, errs[r].Error(), "rank 0 sent no view", "rank %d", r)
			require.Contains(t, errs[r].Error(), fmt.Sprintf("rank %d is stuck in the same call", other), "rank %d", r)
		}
	}
	require.Positive(t, timedOut, "no rank timed out")
}

// More calls that leave every rank waiting without the check (found by
// trying each collective on rank 0 against allreduces of 1, 3, 5, 64,
// 1000 and 100000 elements on the others, at 4 ranks: these four waited
// for the timeout, every other pair failed at once): with it they fail
// within a few stall-check delays.
func TestStallCheckMixedCalls(t *testing.T) {
	allreduce := func(count int64) func(c *Comm) (*Request, error) {
		return func(c *Comm) (*Request, error) {
			buf := make([]byte, 8*count)
			return c.AllReduce(buf, buf, count, algorithms.Int64, algorithms.Sum)
		}
	}
	barrier := func(c *Comm) (*Request, error) { return c.Barrier() }
	for _, tc := range []struct {
		name        string
		odd, others func(c *Comm) (*Request, error)
	}{
		{"allreduce-3-vs-1", allreduce(3), allreduce(1)},
		{"allreduce-7-vs-3", allreduce(7), allreduce(3)},
		{"barrier-vs-allreduce-3", barrier, allreduce(3)},
		{"barrier-vs-allreduce-1000", barrier, allreduce(1000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Timeout = 20 * time.Second
			cfg.StallCheck = 100 * time.Millisecond
			cfg.NoAutoTune = true
			comms := startComms(t, 4, nil, cfg)
			start := time.Now()
			errs := issueEach(comms, func(r int, c *Comm) (*Request, error) {
				if r == 0 {
					return tc.odd(c)
				}
				return tc.others(c)
			})
			require.Less(t, time.Since(start), 5*time.Second, "the errors came from the timeout")
			for r, err := range errs {
				require.Error(t, err, "rank %d", r)
				require.True(t, errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrRemote), "rank %d: %v", r, err)
			}
		})
	}
}
