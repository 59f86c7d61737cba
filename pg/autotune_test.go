package pg

import (
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
)

// fakeTuneTimes makes autotuning measure each algorithm at the given
// time on every rank (algorithms not listed: 10 ms) and restores the hook.
func fakeTuneTimes(t *testing.T, us map[algorithms.Algorithm]float64) {
	testHookTuneDuration = func(_ int, a algorithms.Algorithm, _ time.Duration) time.Duration {
		if v, ok := us[a]; ok {
			return time.Duration(v * 1e3)
		}
		return 10 * time.Millisecond
	}
	t.Cleanup(func() { testHookTuneDuration = nil })
}

// exploreAll issues allreduces of count int64s until autotuning has
// decided, placements by inPlace(rank, call), checking every call's sums
// exactly; it returns the number of calls.
func exploreAll(t *testing.T, comms []*Comm, count int64, inPlace func(r, call int) bool) int {
	t.Helper()
	calls := 0
	for first := true; first || comms[0].Exploring(count, algorithms.Int64); first = false {
		require.Less(t, calls, (1+tuneFreshRepeats)*tuneRounds*tuneMaxCands*(tuneWarmups+tuneMaxTimed), "autotuning never decided")
		checkAllReduceInt64Each(t, comms, count, func(r int) bool { return inPlace(r, calls) })
		calls++
	}
	for r, c := range comms {
		require.False(t, c.Exploring(count, algorithms.Int64), "rank %d still explores after rank 0 stopped", r)
	}
	return calls
}

// timedOf is the timed calls per block of comm's exploration of count
// int64s (tuneTimedFor; the state must exist).
func timedOf(t *testing.T, c *Comm, count int64) int {
	t.Helper()
	st := c.tuneView(tuneKey(collArgs{coll: algorithms.AllReduce, count: count, dt: algorithms.Int64}))
	require.NotNil(t, st, "no autotuning state for %d int64s", count)
	return st.timed
}

// The ranks measure the model's candidates, gather the times and all
// keep the fastest, which need not be the model's choice; every call,
// exploring or not, sums exactly. 3 ranks (odd), a prime count.
func TestAutotuneKeepsTheMeasuredFastest(t *testing.T) {
	cfg := testConfig()
	cfg.Algo = "ring,hd"
	comms := startComms(t, 3, nil, cfg)
	const count = 1009
	model := comms[0].choice(collArgs{coll: algorithms.AllReduce, count: count, dt: algorithms.Int64, inPlace: true}).Algo
	other := algorithms.Ring
	if model == algorithms.Ring {
		other = algorithms.HalvingDoubling
	}
	fakeTuneTimes(t, map[algorithms.Algorithm]float64{model: 200, other: 100})
	calls := exploreAll(t, comms, count, func(r, call int) bool { return call%2 == 0 })
	require.Equal(t, tuneRounds*2*(tuneWarmups+timedOf(t, comms[0], count)), calls, "two candidates, one block each per round (plus none after)")
	for r, c := range comms {
		p := c.decidedChoice(tuneKey(collArgs{coll: algorithms.AllReduce, count: count, dt: algorithms.Int64}))
		require.NotNil(t, p, "rank %d has no decision", r)
		require.Equal(t, other, p.Algo, "rank %d", r)
		for _, inPlace := range []bool{false, true} {
			plan, err := c.PlanOf(algorithms.AllReduce, count, algorithms.Int64, algorithms.Sum, 0, inPlace)
			require.NoError(t, err)
			require.Equal(t, other, plan.Algo, "rank %d in place %v: PlanOf follows the decision", r, inPlace)
		}
	}
	for _, inPlace := range []bool{false, true} {
		checkAllReduceInt64(t, comms, count, inPlace)
	}
	// Another size tunes on its own; the model's choice stays when
	// nothing beats it by more than tuneKeepModel.
	fakeTuneTimes(t, map[algorithms.Algorithm]float64{model: 100, other: 100 / (1 + tuneKeepModel/2)})
	const count2 = 2003
	exploreAll(t, comms, count2, func(int, int) bool { return false })
	for r, c := range comms {
		p := c.decidedChoice(tuneKey(collArgs{coll: algorithms.AllReduce, count: count2, dt: algorithms.Int64}))
		require.NotNil(t, p)
		require.Equal(t, comms[0].choice(collArgs{coll: algorithms.AllReduce, count: count2, dt: algorithms.Int64, inPlace: true}).Algo, p.Algo, "rank %d", r)
	}
}

// Exploration runs the candidates in blocks of tuneWarmups+timed
// calls, round after round, each round rotated by one: no candidate
// always runs first, and none runs two blocks in a row.
func TestAutotuneRotatedRounds(t *testing.T) {
	order := map[int][]int{1: {0, 0, 0}, 2: {0, 1, 0, 1, 0, 1}, 3: {0, 1, 2, 1, 2, 0, 2, 0, 1}, 4: {0, 1, 2, 3, 1, 2, 3, 0, 2, 3, 0, 1}, 5: {0, 1, 2, 3, 4, 1, 2, 3, 4, 0, 2, 3, 4, 0, 1}}
	for n := 1; n <= tuneMaxCands; n++ {
		var got []int
		for b := 0; b < tuneRounds*n; b++ {
			got = append(got, exploreCandidate(b, n))
			if b > 0 && n > 1 {
				require.NotEqual(t, got[b-1], got[b], "%d candidates: block %d repeats the one before", n, b)
			}
		}
		require.Equal(t, order[n], got, "%d candidates", n)
		for c := 0; c < n; c++ {
			runs := 0
			for _, g := range got {
				if g == c {
					runs++
				}
			}
			require.Equal(t, tuneRounds, runs, "%d candidates: candidate %d runs once per round", n, c)
		}
	}

	cfg := testConfig()
	cfg.Algo = "ring,hd"
	comms := startComms(t, 3, nil, cfg)
	const count = 4001
	var mu sync.Mutex
	var seq []algorithms.Algorithm // rank 0's exploring calls in order
	testHookTuneDuration = func(rank int, a algorithms.Algorithm, d time.Duration) time.Duration {
		if rank == 0 {
			mu.Lock()
			seq = append(seq, a)
			mu.Unlock()
		}
		return d
	}
	t.Cleanup(func() { testHookTuneDuration = nil })
	exploreAll(t, comms, count, func(int, int) bool { return true })
	model := comms[0].choice(collArgs{coll: algorithms.AllReduce, count: count, dt: algorithms.Int64, inPlace: true}).Algo
	other := algorithms.Ring
	if model == algorithms.Ring {
		other = algorithms.HalvingDoubling
	}
	per := tuneWarmups + timedOf(t, comms[0], count)
	var want []algorithms.Algorithm
	for _, a := range []algorithms.Algorithm{model, other, model, other, model, other} {
		for range per {
			want = append(want, a)
		}
	}
	require.Equal(t, want, seq)
}

// Where ranks outnumber the cores the model cannot predict one-shot and
// leaves it out of its choice, but autotuning measures it (last), and
// keeps it when it is the fastest; every call sums exactly. 3 ranks on a
// tuning for 2 cores, a prime count of int64 (4 KiB: one-shot's range).
func TestAutotuneMeasuresUnmodelledOneShot(t *testing.T) {
	cfg := testConfig()
	cfg.Tuning = algorithms.DefaultTuning()
	cfg.Tuning.Cores = 2
	comms := startComms(t, 3, nil, cfg)
	const count = 509
	a := collArgs{coll: algorithms.AllReduce, count: count, dt: algorithms.Int64, inPlace: true}
	require.NotEqual(t, algorithms.OneShot, comms[0].choice(a).Algo, "the model alone never picks it here")
	calls := exploreKeeps(t, comms, a, algorithms.OneShot)
	require.Zero(t, calls%(tuneRounds*(tuneWarmups+timedOf(t, comms[0], count))), "whole blocks")
}

// exploreKeeps explores a's size on every rank (placements mixed) with
// algo timed fastest, checks that every rank keeps algo and that calls
// after sum exactly, and returns the exploring calls.
func exploreKeeps(t *testing.T, comms []*Comm, a collArgs, algo algorithms.Algorithm) int {
	t.Helper()
	fakeTuneTimes(t, map[algorithms.Algorithm]float64{algo: 50})
	calls := exploreAll(t, comms, a.count, func(r, call int) bool { return (r+call)%2 == 0 })
	for r, c := range comms {
		p := c.decidedChoice(tuneKey(a))
		require.NotNil(t, p, "rank %d", r)
		require.Equal(t, algo, p.Algo, "rank %d", r)
	}
	checkAllReduceInt64(t, comms, a.count, true)
	checkAllReduceInt64(t, comms, a.count, false)
	return calls
}

// Where the model chooses differently in place and out of place (the
// case TestPlacementChoiceAgreement fails without autotuning), autotuned
// calls run one algorithm whatever each rank's placement: ranks that mix
// placements at the same call sum exactly, while exploring and after.
func TestAutotuneMixedPlacement(t *testing.T) {
	comms := startComms(t, 3, nil, placementSplitConfig(0.3))
	const count = 1000
	a := collArgs{coll: algorithms.AllReduce, count: count, dt: algorithms.Int64}
	out := comms[0].choice(a).Algo
	a.inPlace = true
	in := comms[0].choice(a).Algo
	require.NotEqual(t, in, out, "the test needs a size where the placements choose differently")
	fakeTuneTimes(t, map[algorithms.Algorithm]float64{algorithms.Ring: 100, algorithms.Tree: 150})
	calls := exploreAll(t, comms, count, func(r, call int) bool { return (r+call)%2 == 1 })
	require.Equal(t, tuneRounds*2*(tuneWarmups+timedOf(t, comms[0], count)), calls, "ring and tree explored")
	for r, c := range comms {
		p := c.decidedChoice(tuneKey(a))
		require.NotNil(t, p)
		require.Equal(t, algorithms.Ring, p.Algo, "rank %d", r)
	}
	for call := 0; call < 3; call++ {
		checkAllReduceInt64Each(t, comms, count, func(r int) bool { return r == call%3 })
	}
}

// GOTREE_AUTOTUNE=0: no call explores; the model's choice stands.
func TestAutotuneOff(t *testing.T) {
	cfg := testConfig()
	cfg.NoAutoTune = true
	comms := startComms(t, 2, nil, cfg)
	fakeTuneTimes(t, nil)
	checkAllReduceInt64(t, comms, 1000, true)
	require.False(t, comms[0].Exploring(1000, algorithms.Int64))
	require.Nil(t, comms[0].decidedChoice(tuneKey(collArgs{coll: algorithms.AllReduce, count: 1000, dt: algorithms.Int64})))
}

// With GOTREE_AUTOTUNE=again a decision is measured again once the size
// has run tuneReexplore times its exploration's calls on it, at the same
// call on every rank, and the new measurement decides (the count alone
// here: the exploration's time is the test's, not the faked one;
// reexploreAfter is tested on its own); by default nothing is measured
// again. Every call sums exactly; describe says "exploring" from the call
// that starts a new exploration and counts the explorations.
func TestAutotuneExploresAgain(t *testing.T) {
	savedEvery, savedTime := tuneReexplore, tuneReexploreTime
	tuneReexplore, tuneReexploreTime = 2, 0
	t.Cleanup(func() { tuneReexplore, tuneReexploreTime = savedEvery, savedTime })
	const count = 1009
	key := tuneKey(collArgs{coll: algorithms.AllReduce, count: count, dt: algorithms.Int64})
	for _, again := range []bool{true, false} {
		once := !again
		cfg := testConfig()
		cfg.Algo = "ring,hd"
		cfg.TuneAgain = again
		comms := startComms(t, 3, nil, cfg)
		// decided runs n calls on the decision, none of them exploring,
		// and says whether the next one explores (on every rank alike).
		decided := func(n int) bool {
			for call := 0; call < n; call++ {
				for r, c := range comms {
					require.False(t, c.Exploring(count, algorithms.Int64), "once=%v: rank %d explores again after %d of %d calls", once, r, call, n)
				}
				checkAllReduceInt64Each(t, comms, count, func(r int) bool { return (r+call)%2 == 1 })
			}
			next := comms[0].Exploring(count, algorithms.Int64)
			for r, c := range comms {
				require.Equal(t, next, c.Exploring(count, algorithms.Int64), "rank %d", r)
			}
			return next
		}
		describe := func(r int) DescChoice {
			d, err := comms[r].Describe([]int64{count * 8})
			require.NoError(t, err)
			return d.Choices[0]
		}
		model := comms[0].choice(collArgs{coll: algorithms.AllReduce, count: count, dt: algorithms.Int64, inPlace: true}).Algo
		other := algorithms.Ring
		if model == algorithms.Ring {
			other = algorithms.HalvingDoubling
		}
		fakeTuneTimes(t, map[algorithms.Algorithm]float64{model: 200, other: 100})
		explore := exploreAll(t, comms, count, func(r, call int) bool { return (r+call)%2 == 0 })
		require.Equal(t, other, comms[0].decidedChoice(key).Algo)
		// The machine changes: the kept algorithm is now the slow one.
		fakeTuneTimes(t, map[algorithms.Algorithm]float64{model: 100, other: 300})
		require.Equal(t, !once, decided(tuneReexplore*explore), "once=%v: due after %d calls on the decision", once, tuneReexplore*explore)
		for r := range comms {
			require.Equal(t, map[bool]string{false: "exploring", true: "autotuning"}[once], describe(r).By, "once=%v rank %d", once, r)
			require.Equal(t, 1, describe(r).Explored)
		}
		if once {
			require.False(t, decided(2*tuneReexplore*explore))
			require.Equal(t, other, comms[0].decidedChoice(key).Algo, "without GOTREE_AUTOTUNE=again the first decision stays")
			continue
		}
		require.Equal(t, explore, exploreAll(t, comms, count, func(r, call int) bool { return call%3 == r }), "the second exploration takes as many calls as the first")
		for r, c := range comms {
			require.Equal(t, model, c.decidedChoice(key).Algo, "rank %d keeps what the second exploration measured", r)
			require.Equal(t, "autotuning", describe(r).By)
			require.Equal(t, 2, describe(r).Explored)
		}
		// And again: the same decision, confirmed.
		require.True(t, decided(tuneReexplore*explore), "due after %d calls on the second decision", tuneReexplore*explore)
		exploreAll(t, comms, count, func(r, call int) bool { return false })
		require.Equal(t, model, comms[0].decidedChoice(key).Algo)
		require.Equal(t, 3, describe(1).Explored)
	}
}

// A decision runs tuneReexplore times its exploration's calls, and at
// least tuneReexploreTime times the exploration's time (the longest any
// rank saw from its first timed start to its last timed end) at the kept
// algorithm's time per call.
func TestReexploreAfter(t *testing.T) {
	rec := func(base float64, us float64) tuneRecord {
		r := tuneRecord{samples: 3, algos: [tuneMaxCands]int{int(algorithms.Ring), int(algorithms.HalvingDoubling), -1, -1, -1}}
		for i := 0; i < 2; i++ {
			for j := 0; j < 3; j++ {
				r.at[i][j], r.us[i][j] = base+float64(30*i+10*j), us
			}
		}
		r.at[2][0], r.us[2][0] = 1e9, 1e9 // past the last candidate: not counted
		return r
	}
	all := []tuneRecord{rec(0, 5), rec(1000, 30)} // spans 55 and 80 µs
	require.Equal(t, 4000, reexploreAfter(12, all, 2), "100 × 80 µs at 2 µs a call")
	require.Equal(t, 1200, reexploreAfter(12, all, 20), "100 × 12 calls: more than 100 × 80 µs at 20 µs a call")
	require.Equal(t, 1200, reexploreAfter(12, all, 0), "no kept time: the count alone")
	require.Equal(t, 1200, reexploreAfter(12, nil, 2), "no records: the count alone")
}

// A slow stretch of the machine as long as two blocks, wherever it falls
// in the exploration, does not decide: every call in it takes 10 times
// as long, yet the fastest candidate (by 20%) is kept, for 2 to 5
// candidates and each of them the fastest in turn.
func TestAutotuneSlowStretch(t *testing.T) {
	algos := []algorithms.Algorithm{algorithms.Direct, algorithms.Ring, algorithms.HalvingDoubling, algorithms.OneShot, algorithms.Shared}
	require.Len(t, algos, tuneMaxCands)
	for n := 2; n <= tuneMaxCands; n++ {
		cands := make([]algorithms.Prediction, n)
		for i := range cands {
			cands[i] = algorithms.Prediction{Algo: algos[i], TimeUs: 100}
		}
		for fast := range n {
			for _, timed := range []int{1, tuneTimed, tuneMaxTimed} {
				for start := 0; start+2 <= tuneRounds*n; start++ {
					rec := tuneRecord{bytes: 1 << 22, samples: tuneRounds * timed}
					for i := range rec.algos {
						rec.algos[i] = -1
						if i < n {
							rec.algos[i] = int(algos[i])
						}
					}
					seen := make([]int, n)
					for b := 0; b < tuneRounds*n; b++ {
						c := exploreCandidate(b, n)
						for range timed {
							us := 1200.0
							if c == fast {
								us = 1000
							}
							if b == start || b == start+1 {
								us *= 10
							}
							rec.us[c][seen[c]] = us
							seen[c]++
						}
					}
					for _, oneHost := range []bool{false, true} {
						pick, why, err := decideTuning(0, cands, []tuneRecord{rec, rec}, oneHost)
						require.NoError(t, err)
						require.Equal(t, fast, pick, "%d candidates, %d timed calls per block, slow blocks %d and %d: %s", n, timed, start, start+1, why)
					}
				}
			}
		}
	}
}

// The decision: per candidate the median over its timed calls of the
// shortest time any rank measured for the call; the model's choice
// (first) within tuneKeepModel stays; records of other calls fail,
// naming both ranks' calls.
func TestDecideTuning(t *testing.T) {
	cands := []algorithms.Prediction{{Algo: algorithms.Direct, TimeUs: 50}, {Algo: algorithms.Ring, TimeUs: 60}, {Algo: algorithms.HalvingDoubling, TimeUs: 70}}
	// rec gives every timed call of candidate i the time us[i], but
	// call 0 of each candidate 1000 µs (an outlier the median drops).
	rec := func(us ...float64) tuneRecord {
		r := tuneRecord{bytes: 4096, samples: tuneSamples}
		for i := range r.algos {
			r.algos[i] = -1 // past the last candidate
		}
		copy(r.algos[:], []int{int(algorithms.Direct), int(algorithms.Ring), int(algorithms.HalvingDoubling)})
		for i, v := range us {
			for j := range r.us[i] {
				r.us[i][j] = v
			}
			r.us[i][0] = 1000
		}
		return r
	}
	// A rank that arrives early measures the others' lateness: the
	// shortest time of a call counts (ring: 100, not 220 or the mean).
	pick, why, err := decideTuning(0, cands, []tuneRecord{rec(300, 220, 140), rec(300, 100, 150)}, false)
	require.NoError(t, err)
	require.Equal(t, 1, pick, why)
	require.Contains(t, why, "ring 100.0 us")
	require.Contains(t, why, "hd 140.0 us")
	require.Contains(t, why, "instead of the model's direct")
	// The shortest per call, not per rank: rank 0 is quick on the odd
	// calls 1, 3, … of hd, rank 1 on the even ones; each of those calls,
	// more than half of all, then takes 90, and so does their median.
	a, b := rec(300, 100, 500), rec(300, 100, 500)
	for j := 1; j <= tuneSamples/2+1; j++ {
		if j%2 == 1 {
			a.us[2][j] = 90
		} else {
			b.us[2][j] = 90
		}
	}
	pick, _, err = decideTuning(1, cands, []tuneRecord{a, b}, false)
	require.NoError(t, err)
	require.Equal(t, 2, pick)
	pick, _, err = decideTuning(1, cands, []tuneRecord{rec(102, 100, 140), rec(102, 100, 140)}, false)
	require.NoError(t, err)
	require.Equal(t, 0, pick, "2% slower than the best: the model's choice stays")
	pick, _, err = decideTuning(1, cands, []tuneRecord{rec(104, 100, 140), rec(104, 100, 140)}, false)
	require.NoError(t, err)
	require.Equal(t, 1, pick, "4% slower: the measured best wins")
	bad := rec(1, 1, 1)
	bad.bytes = 8192
	_, _, err = decideTuning(0, cands, []tuneRecord{rec(1, 1, 1), bad}, false)
	require.ErrorContains(t, err, fmt.Sprintf("rank 0: autotuning allreduce of 4096 bytes with candidates direct,ring,hd (%d timed calls each), but rank 1 tuned allreduce of 8192 bytes", tuneSamples))
	short := rec(1, 1, 1)
	short.samples = tuneSamples / 2
	_, _, err = decideTuning(0, cands, []tuneRecord{rec(1, 1, 1), short}, false)
	require.ErrorContains(t, err, fmt.Sprintf("(%d timed calls each), but rank 1 tuned allreduce of 4096 bytes with candidates direct,ring,hd (%d timed calls each)", tuneSamples, tuneSamples/2))
	none := rec(1, 1, 1)
	none.samples = 0
	_, _, err = decideTuning(0, cands, []tuneRecord{none, none}, false)
	require.ErrorContains(t, err, "record of 0 timed calls per candidate")
	var wire [8 * tuneRecordLen]byte
	r := rec(1.5, 2.5, 3.5)
	r.us[1][2] = 7.25
	r.at[2][1] = 5e11 + 0.125 // µs since boot, after six days
	r.encode(wire[:])
	require.Equal(t, r, decodeTuneRecord(wire[:]))
	require.False(t, strings.Contains(r.String(), "-1"))
}

// On one host a call's time runs from the last rank's start to the last
// rank's end: a candidate whose last arrival finishes at once (one-shot:
// the others' data is there) but whose other ranks wait a while longer
// for its data loses to one that is shorter from the last start on,
// though the shortest single time would favour it.
func TestDecideTuningOneHost(t *testing.T) {
	cands := []algorithms.Prediction{{Algo: algorithms.OneShot, TimeUs: 5}, {Algo: algorithms.Ring, TimeUs: 8}}
	// rank 0 starts every call at 1000 µs, rank 1 140 µs later.
	recs := make([]tuneRecord, 2)
	for r := range recs {
		recs[r] = tuneRecord{bytes: 64, samples: tuneSamples}
		for i := range recs[r].algos {
			recs[r].algos[i] = -1
		}
		recs[r].algos[0], recs[r].algos[1] = int(algorithms.OneShot), int(algorithms.Ring)
		for j := range tuneSamples {
			recs[r].at[0][j] = 1000 + 140*float64(r)
			recs[r].at[1][j] = 1000 + 140*float64(r)
		}
	}
	for j := range tuneSamples {
		// one-shot: rank 1 arrives last and is done in 5 µs; rank 0
		// ends 10 µs after rank 1's start.
		recs[0].us[0][j], recs[1].us[0][j] = 150, 5
		// ring: both end 8 µs after rank 1's start.
		recs[0].us[1][j], recs[1].us[1][j] = 148, 8
	}
	pick, why, err := decideTuning(0, cands, recs, true)
	require.NoError(t, err)
	require.Equal(t, 1, pick, why)
	require.Contains(t, why, "oneshot 10.0 us, ring 8.0 us")
	require.Contains(t, why, "from the last of 2 ranks' starts to the last end")
	pick, why, err = decideTuning(0, cands, recs, false)
	require.NoError(t, err)
	require.Equal(t, 0, pick, "across hosts the shortest time counts: %s", why)
	require.Contains(t, why, "oneshot 5.0 us, ring 8.0 us")
}

// Where the model predicts a long exploration (large messages) the blocks
// have fewer timed calls, down to one, and where it predicts a cheap one
// (small messages) more, up to tuneMaxTimed; the number depends only on
// the candidates' predictions.
func TestTuneTimedFor(t *testing.T) {
	p := func(us ...float64) []algorithms.Prediction {
		var out []algorithms.Prediction
		for _, v := range us {
			out = append(out, algorithms.Prediction{TimeUs: v})
		}
		return out
	}
	perCand := func(timed int) float64 { return float64(tuneRounds * (tuneWarmups + timed)) }
	require.Equal(t, tuneMaxTimed, tuneTimedFor(p(10, 20, 30)), "4 B on 3 ranks here: 60 µs for the three, 3 ms in all")
	// 600 µs for the three: 3 rounds of 1+10 calls take 19.8 ms, of 1+11 21.6 ms
	require.Equal(t, 10, tuneTimedFor(p(100, 200, 300)))
	cheap := tuneCheapUs / perCand(tuneTimed+1) // exactly tuneCheapUs with one more than tuneTimed
	require.Equal(t, tuneTimed+1, tuneTimedFor(p(cheap/2, cheap/2)))
	require.Equal(t, tuneTimed, tuneTimedFor(p(cheap/2, cheap/2*1.01)))
	sum := tuneBudgetUs / perCand(tuneTimed) // exactly on budget with tuneTimed
	require.Equal(t, tuneTimed, tuneTimedFor(p(sum/2, sum/2)))
	require.Equal(t, tuneTimed-1, tuneTimedFor(p(sum/2, sum/2*1.01)))
	require.Equal(t, 1, tuneTimedFor(p(tuneBudgetUs, 1)), "over budget even with one: one")
	// 4 ranks, 256 MiB here: ~160 ms a call, 4 candidates
	require.Equal(t, 1, tuneTimedFor(p(160e3, 170e3, 200e3, 300e3)))
	// no usable prediction (0, +Inf) counts as the model's choice
	two := tuneBudgetUs / perCand(2) / 2
	require.Equal(t, 2, tuneTimedFor(p(two, math.Inf(1))))
	require.Equal(t, 2, tuneTimedFor(p(two, 0)))
}

// A size whose exploration the model predicts over the budget explores
// in blocks of one timed call: 2 candidates, tuneRounds rounds of
// tuneWarmups+1 calls each, and still keeps the measured fastest; every
// call sums exactly. 3 ranks, a prime count.
func TestAutotuneBudget(t *testing.T) {
	defer func(b float64) { tuneBudgetUs = b }(tuneBudgetUs)
	tuneBudgetUs = 1 // every size is over it
	cfg := testConfig()
	cfg.Algo = "ring,hd"
	comms := startComms(t, 3, nil, cfg)
	const count = 1013
	a := collArgs{coll: algorithms.AllReduce, count: count, dt: algorithms.Int64, inPlace: true}
	model := comms[0].choice(a).Algo
	other := algorithms.Ring
	if model == algorithms.Ring {
		other = algorithms.HalvingDoubling
	}
	fakeTuneTimes(t, map[algorithms.Algorithm]float64{model: 300, other: 100})
	calls := exploreAll(t, comms, count, func(r, call int) bool { return (r+call)%2 == 0 })
	require.Equal(t, tuneRounds*2*(tuneWarmups+1), calls)
	for r, c := range comms {
		p := c.decidedChoice(tuneKey(a))
		require.NotNil(t, p, "rank %d", r)
		require.Equal(t, other, p.Algo, "rank %d", r)
	}
	checkAllReduceInt64(t, comms, count, false)
}

// gotree.bench warms gotree's allreduce up past autotuning's calls (at
// most this many; it stops once gotree.describe says they are over); its
// count must follow the constants here.
func TestBenchKnowsAutotuneCalls(t *testing.T) {
	src, err := os.ReadFile("../python/gotree/bench.py")
	require.NoError(t, err)
	want := fmt.Sprintf("\nAUTOTUNE_CALLS = %d\n", tuneRounds*tuneMaxCands*(tuneWarmups+tuneMaxTimed))
	require.Contains(t, string(src), want)
}

// Beyond tuneMaxSizes sizes new sizes run the model's choice without
// exploring (memory stays flat under ever new sizes); sums stay exact.
func TestAutotuneSizeLimit(t *testing.T) {
	defer func(n int) { tuneMaxSizes = n }(tuneMaxSizes)
	tuneMaxSizes = 2
	cfg := testConfig()
	cfg.Algo = "ring,hd"
	comms := startComms(t, 2, nil, cfg)
	for _, count := range []int64{101, 103, 107, 109} {
		checkAllReduceInt64(t, comms, count, true)
	}
	for r, c := range comms {
		c.tuner.mu.Lock()
		n := len(c.tuner.states)
		c.tuner.mu.Unlock()
		require.Equal(t, 2, n, "rank %d", r)
		require.True(t, c.Exploring(101, algorithms.Int64))
		require.False(t, c.Exploring(107, algorithms.Int64), "rank %d: a size past the limit explores", r)
	}
}

// Calls in which a rank mapped a peer's shared buffer for the first time
// (filed with a negative time) are left out of a candidate's score, on one
// host and across hosts, unless every call of the candidate was one.
func TestTuneMediansLeaveOutFreshMappings(t *testing.T) {
	rec := func(us0, us1 []float64) tuneRecord {
		r := tuneRecord{samples: 3}
		for j := 0; j < 3; j++ {
			r.us[0][j], r.us[1][j] = us0[j], us1[j]
			r.at[0][j], r.at[1][j] = float64(1000*j), float64(10000+1000*j)
		}
		return r
	}
	// Candidate 0: rank 1's first call mapped (900 µs); the others take
	// 100-120. Candidate 1: every call of rank 0 mapped.
	all := []tuneRecord{
		rec([]float64{100, 110, 120}, []float64{-300, -310, -320}),
		rec([]float64{-900, 100, 100}, []float64{200, 210, 220}),
	}
	for _, oneHost := range []bool{false, true} {
		med := tuneMedians(3, 2, all, oneHost)
		if oneHost {
			// from the last start to the last end: the longer of the two
			require.InDelta(t, 115, med[0], 1e-9, "calls 1 and 2: max(110,100), max(120,100)")
			require.InDelta(t, 310, med[1], 1e-9, "all mapped: all kept, their times positive")
		} else {
			require.InDelta(t, 100, med[0], 1e-9, "calls 1 and 2: min(110,100), min(120,100)")
			require.InDelta(t, 210, med[1], 1e-9, "all mapped: all kept, their times positive")
		}
	}
}

// An exploration in which every timed call of a candidate mapped a peer's
// shared buffer for the first time (on some rank) is run again, up to
// tuneFreshRepeats times, and then decides with what it has; every call
// sums exactly and every rank answers Exploring alike throughout.
func TestAutotuneExploresAgainAfterFirstMappings(t *testing.T) {
	const count = 1013
	key := tuneKey(collArgs{coll: algorithms.AllReduce, count: count, dt: algorithms.Int64})
	for _, mappedRounds := range []int{1, 100} {
		cfg := testConfig()
		cfg.Algo = "ring,hd"
		comms := startComms(t, 3, nil, cfg)
		model := comms[0].choice(collArgs{coll: algorithms.AllReduce, count: count, dt: algorithms.Int64, inPlace: true}).Algo
		other := algorithms.Ring
		if model == algorithms.Ring {
			other = algorithms.HalvingDoubling
		}
		fakeTuneTimes(t, map[algorithms.Algorithm]float64{model: 200, other: 100})
		var mu sync.Mutex
		calls := 0 // of other on rank 1
		one := 0   // calls of other on rank 1 per exploration
		testHookTuneMapped = func(rank int, a algorithms.Algorithm) bool {
			if rank != 1 || a != other {
				return false
			}
			mu.Lock()
			defer mu.Unlock()
			calls++
			return one == 0 || (calls-1)/one < mappedRounds
		}
		t.Cleanup(func() { testHookTuneMapped = nil })
		st := comms[1].tuneView(key)
		require.Nil(t, st)
		// One exploration's calls of other on rank 1: known once the
		// state exists (after the first call).
		checkAllReduceInt64Each(t, comms, count, func(int) bool { return false })
		st = comms[1].tuneView(key)
		require.NotNil(t, st)
		mu.Lock()
		one = tuneRounds * (tuneWarmups + st.timed)
		calls = 0
		if st.cands[exploreCandidate(0, 2)].Algo == other {
			calls = 1 // the call above ran other
		}
		mu.Unlock()
		n := 1 + exploreAll(t, comms, count, func(r, call int) bool { return (r+call)%2 == 0 })
		explorations := min(mappedRounds, tuneFreshRepeats) + 1
		require.Equal(t, explorations*len(st.cands)*tuneRounds*(tuneWarmups+st.timed), n, "mapped in %d explorations", mappedRounds)
		for r, c := range comms {
			require.Equal(t, other, c.decidedChoice(key).Algo, "rank %d: the faster, once measured (or measured as it is)", r)
			require.Equal(t, 1, c.tuneView(key).rounds, "one decision")
		}
	}
}
