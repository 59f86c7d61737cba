package pg

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
)

// A call announced with WillWait runs on its waiter's goroutine, and its
// results are exact; calls of other ranks without the announcement
// interleave with it.
func TestWillWaitRunsOnWaiter(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			comms := startComms(t, n, nil, testConfig())
			for it := 0; it < 50; it++ {
				bufs := make([][]byte, n)
				reqs := make([]*Request, n)
				for r, c := range comms {
					bufs[r] = i64s([]int64{int64(r + it), int64(3 * r)})
					if r%2 == 0 {
						c.WillWait(true)
					}
					q, err := c.AllReduce(bufs[r], bufs[r], 2, algorithms.Int64, algorithms.Sum)
					require.NoError(t, err)
					reqs[r] = q
				}
				errs := make(chan error, n)
				for _, q := range reqs {
					go func(q *Request) { errs <- q.Wait(-1) }(q)
				}
				for range reqs {
					require.NoError(t, <-errs)
				}
				var want0, want1 int64
				for r := 0; r < n; r++ {
					want0 += int64(r + it)
					want1 += int64(3 * r)
				}
				for r := range comms {
					require.Equal(t, want0, getI64(bufs[r], 0))
					require.Equal(t, want1, getI64(bufs[r], 1))
				}
			}
		})
	}
}

// A broken promise (announced, then only tested or waited for with a time
// limit, or followed by more calls) never stalls the call.
func TestWillWaitBrokenPromise(t *testing.T) {
	comms := startComms(t, 2, nil, testConfig())
	issue := func(c *Comm, hint bool) *Request {
		if hint {
			c.WillWait(true)
		}
		q, err := c.AllReduce(make([]byte, 8), make([]byte, 8), 1, algorithms.Int64, algorithms.Sum)
		require.NoError(t, err)
		return q
	}
	// Test polling.
	a, b := issue(comms[0], true), issue(comms[1], true)
	deadline := time.Now().Add(10 * time.Second)
	for { // each rank polls its own call, as separate processes would
		da, err := a.Test()
		require.NoError(t, err)
		db, err := b.Test()
		require.NoError(t, err)
		if da && db {
			break
		}
		require.True(t, time.Now().Before(deadline), "a tested deferred call never ran")
		time.Sleep(time.Millisecond)
	}
	// Wait with a time limit.
	a, b = issue(comms[0], true), issue(comms[1], true)
	go func() { _ = b.Wait(10 * time.Second) }()
	require.NoError(t, a.Wait(10*time.Second))
	require.NoError(t, b.Wait(10*time.Second))
	// Followed by another call; the first is waited for last.
	a1, b1 := issue(comms[0], true), issue(comms[1], true)
	a2, b2 := issue(comms[0], false), issue(comms[1], false)
	require.NoError(t, a2.Wait(-1))
	require.NoError(t, b2.Wait(-1))
	require.NoError(t, a1.Wait(-1))
	require.NoError(t, b1.Wait(-1))
	// A withdrawn announcement, and one left pending at Destroy.
	comms[0].WillWait(true)
	comms[0].WillWait(false)
	a, b = issue(comms[0], false), issue(comms[1], true)
	errb := make(chan error, 1)
	go func() { errb <- b.Wait(-1) }()
	require.NoError(t, a.Wait(10*time.Second))
	require.NoError(t, <-errb)
	a, b = issue(comms[0], true), issue(comms[1], true)
	errs := make(chan error, 2)
	for _, c := range comms {
		go func(c *Comm) { errs <- c.Destroy() }(c)
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	require.NoError(t, a.Wait(time.Second))
	require.NoError(t, b.Wait(time.Second))
}

// A small call run on its waiter's goroutine has its waits yield longer
// (backend.CallerWaitsKey); one run by the worker, or above
// callerYieldMaxBytes, does not.
func TestCallerWaitsMarksSmallSyncCalls(t *testing.T) {
	var mu sync.Mutex
	seen := map[int64][]bool{} // count -> callerWaits of each rank's call
	t.Cleanup(func() { testHookRunColl = nil })
	testHookRunColl = func(a collArgs, callerWaits bool) {
		mu.Lock()
		seen[a.count] = append(seen[a.count], callerWaits)
		mu.Unlock()
	}
	comms := startComms(t, 2, nil, testConfig())
	call := func(count int64, sync bool) {
		reqs := make([]*Request, len(comms))
		for r, c := range comms {
			if sync {
				c.WillWait(true)
			}
			b := make([]byte, count*8)
			q, err := c.AllReduce(b, b, count, algorithms.Int64, algorithms.Sum)
			require.NoError(t, err)
			reqs[r] = q
		}
		// A wait with a time limit never runs the call itself.
		timeout := time.Duration(-1)
		if !sync {
			timeout = time.Minute
		}
		errs := make(chan error, len(reqs))
		for _, q := range reqs {
			go func(q *Request) { errs <- q.Wait(timeout) }(q)
		}
		for range reqs {
			require.NoError(t, <-errs)
		}
	}
	big := int64(callerYieldMaxBytes/8 + 1)
	call(3, true)
	call(5, false)
	call(big, true)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []bool{true, true}, seen[3], "small call waited for by its caller")
	require.Equal(t, []bool{false, false}, seen[5], "small call run by the worker")
	require.Equal(t, []bool{false, false}, seen[big], "call above callerYieldMaxBytes")
}
