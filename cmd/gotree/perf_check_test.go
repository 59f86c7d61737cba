package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/pg"
)

// checkPerf against outputs built from the ranks' fillPerf buffers, at a
// prime count larger than perfBlock (so several blocks and a short last
// one), with wrong elements planted in the first and the last block.
func TestCheckPerfCountsWrongElements(t *testing.T) {
	const n = 3
	for _, count := range []int64{0, 1, perfBlock + 1, 3*perfBlock + 7} {
		ins := make([][]byte, n)
		for r := range ins {
			ins[r] = make([]byte, count*4)
			fillPerf(ins[r], algorithms.Float32, r, count)
		}
		f32 := func(b []byte, i int64) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])) }
		put := func(b []byte, i int64, v float32) { binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v)) }

		sum := make([]byte, count*4)
		for i := int64(0); i < count; i++ {
			var s float64
			for r := range ins {
				s += float64(f32(ins[r], i))
			}
			put(sum, i, float32(s))
		}
		ar := perfOpts{coll: algorithms.AllReduce, dtype: algorithms.Float32, op: algorithms.Sum}
		if got := checkPerf(sum, ar, 0, n, count); got != 0 {
			t.Errorf("allreduce count %d: %d wrong, want 0", count, got)
		}
		gathered := make([]byte, 0, n*count*4)
		for r := range ins {
			gathered = append(gathered, ins[r]...)
		}
		ag := perfOpts{coll: algorithms.AllGather, dtype: algorithms.Float32, op: algorithms.Sum}
		if got := checkPerf(gathered, ag, 0, n, count); got != 0 {
			t.Errorf("allgather count %d: %d wrong, want 0", count, got)
		}
		// reduce-scatter: rank r's output is block r of the sum of the
		// ranks' inputs of n*count elements; reduce: rank 0's the sum, and
		// nothing is checked elsewhere.
		rs := perfOpts{coll: algorithms.ReduceScatter, dtype: algorithms.Float32, op: algorithms.Sum}
		full := make([][]byte, n)
		for r := range full {
			full[r] = make([]byte, n*count*4)
			fillPerf(full[r], algorithms.Float32, r, n*count)
		}
		for r := 0; r < n; r++ {
			block := make([]byte, count*4)
			for i := int64(0); i < count; i++ {
				var s float64
				for q := range full {
					s += float64(f32(full[q], int64(r)*count+i))
				}
				put(block, i, float32(s))
			}
			if got := checkPerf(block, rs, r, n, count); got != 0 {
				t.Errorf("reducescatter count %d rank %d: %d wrong, want 0", count, r, got)
			}
			if count > 0 {
				put(block, count-1, f32(block, count-1)+1)
				if got := checkPerf(block, rs, r, n, count); got != 1 {
					t.Errorf("reducescatter count %d rank %d with 1 planted error: %d wrong", count, r, got)
				}
			}
		}
		rd := perfOpts{coll: algorithms.Reduce, dtype: algorithms.Float32, op: algorithms.Sum}
		if got := checkPerf(sum, rd, 0, n, count); got != 0 {
			t.Errorf("reduce count %d: %d wrong on the root, want 0", count, got)
		}
		if got := checkPerf(make([]byte, count*4), rd, 1, n, count); got != 0 {
			t.Errorf("reduce count %d: %d wrong off the root, want 0 (nothing written there)", count, got)
		}
		if count < 2 {
			continue
		}
		put(sum, 0, f32(sum, 0)+1)
		put(sum, count-1, f32(sum, count-1)-1)
		if got := checkPerf(sum, ar, 0, n, count); got != 2 {
			t.Errorf("allreduce count %d with 2 planted errors: %d wrong", count, got)
		}
	}
}

// recordingMem is host memory that counts what perfSize does to it.
type recordingMem struct {
	hostMem
	fills, runs int
}

func (m *recordingMem) fill(r perfRegion, encode func([]byte)) error {
	m.fills++
	return m.hostMem.fill(r, encode)
}

func (m *recordingMem) run(comm *pg.Comm, o perfOpts, in, out perfRegion, count int64) error {
	m.runs++
	return m.hostMem.run(comm, o, in, out, count)
}

// perfSize fills the input also with -c 0: an input never written reads
// as the kernel's zero page, which would time a collective that touches
// no memory. With -c 0 the only calls are the warm-up and timed ones.
func TestPerfSizeFillsInputWithoutCheck(t *testing.T) {
	cfg := pg.Config{Timeout: 20 * time.Second, SocketIfname: "lo"}
	uid, err := pg.NewUniqueID(cfg)
	if err != nil {
		t.Fatal(err)
	}
	comm, err := pg.Init(uid, 0, 1, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer comm.Destroy()
	const count = 4099 // prime, not a multiple of perfBlock's factors
	for _, check := range []int{0, 1} {
		for _, inplace := range []bool{false, true} {
			m := &recordingMem{hostMem: hostMem{send: make([]byte, 4*count), recv: make([]byte, 4*count)}}
			o := perfOpts{iters: 3, warmup: 2, check: check, dtype: algorithms.Float32, op: algorithms.Sum, coll: algorithms.AllReduce}
			times, wrong, err := perfSize(comm, o, count, m, inplace)
			require.NoError(t, err)
			assert.Len(t, times, 3)
			assert.Zero(t, wrong)
			assert.Equal(t, 1, m.fills, "check %d in place %v: fills", check, inplace)
			assert.Equal(t, 2+3+check, m.runs, "check %d in place %v: calls", check, inplace)
			in := m.send
			if inplace {
				in = m.recv
			}
			want := make([]byte, 4*count)
			fillPerf(want, algorithms.Float32, 0, count)
			// One rank: every call copies the input to the output.
			assert.Equal(t, want, in, "check %d in place %v: the input is not fillPerf's", check, inplace)
			assert.Equal(t, want, m.recv, "check %d in place %v: the output", check, inplace)
		}
	}
}

// The checker's expected values agree with the reference reduction of the
// inputs fillPerf writes, for every dtype and op perf accepts and for world
// sizes 1, 2, 3, 5 and 8: so a wrong count from perf is the library's, not
// the checker's (it once counted every uint8 min, bool sum and float product
// with a -0 as wrong).
func TestPerfCheckAgreesWithReference(t *testing.T) {
	const count = 37
	for dt := algorithms.DType(0); dt.Valid(); dt++ {
		for op := algorithms.Sum; op <= algorithms.BXor; op++ {
			if algorithms.Supports(op, dt) != nil {
				continue
			}
			for _, n := range []int{1, 2, 3, 5, 8} {
				es := int64(dt.Size())
				acc := make([]byte, count*es)
				fillPerf(acc, dt, 0, count)
				in := make([]byte, len(acc))
				for r := 1; r < n; r++ {
					fillPerf(in, dt, r, count)
					algorithms.ReduceInto(acc, in, dt, op)
				}
				algorithms.Finalize(acc, dt, op, n)
				o := perfOpts{dtype: dt, op: op, coll: algorithms.AllReduce}
				if w := checkPerf(acc, o, 0, n, count); w != 0 {
					t.Errorf("%v %v on %d ranks: the checker counts %d of %d reference results wrong", dt, op, n, w, count)
				}
				// And it sees a wrong element.
				acc[len(acc)-int(es)] ^= 0x01
				if w := checkPerf(acc, o, 0, n, count); w != 1 {
					t.Errorf("%v %v on %d ranks: one flipped bit counted as %d wrong", dt, op, n, w)
				}
			}
		}
	}
}

// gotree perf for every collective it offers on 3 ranks of this process
// (host memory): every row checked without a wrong element, out of place
// and in place (all-to-all, gather and scatter: out of place only); sizes
// as nccl-tests (allgather, reduce-scatter, all-to-all, gather and scatter
// count the whole buffer, a multiple of 3 elements, algbw = those bytes /
// time), busbw = algbw × the collective's factor.
func TestPerfCollectives(t *testing.T) {
	const n = 3
	cfg := pg.Config{Timeout: 30 * time.Second, SocketIfname: "lo"}
	for _, coll := range []algorithms.Collective{algorithms.AllReduce, algorithms.AllGather, algorithms.ReduceScatter, algorithms.Broadcast, algorithms.Reduce,
		algorithms.AllToAll, algorithms.Gather, algorithms.Scatter} {
		o := perfOpts{minBytes: 4, maxBytes: 1 << 16, factor: 13, iters: 2, warmup: 1, check: 1, dtype: algorithms.Int32,
			op: algorithms.Sum, algo: "auto", coll: coll, asJSON: true, timeout: cfg.Timeout, settle: 10 * time.Millisecond}
		uid, err := pg.NewUniqueID(cfg)
		require.NoError(t, err)
		var outs, errs [n]bytes.Buffer
		rcs := make([]int, n)
		var wg sync.WaitGroup
		for r := 0; r < n; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rcs[r] = perfRun(o, uid, r, n, cfg, &outs[r], &errs[r])
			}()
		}
		wg.Wait()
		require.Equal(t, []int{0, 0, 0}, rcs, "%v: %s %s %s", coll, errs[0].String(), errs[1].String(), errs[2].String())
		var res struct {
			Rows []perfRow `json:"rows"`
		}
		require.NoError(t, json.Unmarshal(outs[0].Bytes(), &res), outs[0].String())
		per := int64(1)
		if coll == algorithms.AllGather || coll == algorithms.ReduceScatter || pointToPoint(coll) {
			per = n
		}
		var want []int64
		for s := max(o.minBytes, 4*per); s <= o.maxBytes; s *= o.factor {
			want = append(want, s/4/per*per*4)
		}
		var got []int64
		for _, row := range res.Rows {
			got = append(got, row.Bytes)
			assert.Equal(t, row.Bytes/4, row.Count, "%v size %d: count", coll, row.Bytes)
			assert.Zero(t, row.OutWrong, "%v size %d out of place", coll, row.Bytes)
			assert.Zero(t, row.InWrong, "%v size %d in place", coll, row.Bytes)
			if pointToPoint(coll) {
				assert.Zero(t, row.InTime, "%v: no in-place form", coll)
				assert.Equal(t, "p2p", row.PlanAlgo)
			} else {
				assert.Positive(t, row.InTime, "%v size %d: in place timed", coll, row.Bytes)
			}
			assert.InDelta(t, float64(row.Bytes)/(row.OutTime*1e3), row.OutAlgBW, 1e-9*row.OutAlgBW+1e-12, "%v algbw", coll)
			assert.InDelta(t, row.OutAlgBW*busFactor(coll, n), row.OutBusBW, 1e-12, "%v busbw", coll)
		}
		assert.Equal(t, want, got, "%v sizes", coll)
	}
}

// startLocalComms forms n communicators of this process over loopback,
// destroyed when the test ends.
func startLocalComms(t *testing.T, n int) []*pg.Comm {
	t.Helper()
	cfg := pg.Config{Timeout: 20 * time.Second, SocketIfname: "lo"}
	uid, err := pg.NewUniqueID(cfg)
	require.NoError(t, err)
	comms := make([]*pg.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = pg.Init(uid, r, n, cfg)
		}()
	}
	wg.Wait()
	for r, c := range comms {
		require.NoError(t, errs[r])
		t.Cleanup(func() { c.Destroy() })
	}
	return comms
}

// The settling rounds before the sweep stop after the same round on every
// rank, also when the ranks' communicators formed at different times (one
// rank here 40 ms "earlier"), and last at least the settling time on the
// ranks that formed at the start.
func TestSettleCallsAgree(t *testing.T) {
	const n = 3
	comms := startLocalComms(t, n)
	errs := make([]error, n)
	rounds := make([]int, n)
	var wg sync.WaitGroup
	o := perfOpts{settle: 30 * time.Millisecond}
	took := make([]time.Duration, n)
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			formed := start
			if r == 1 {
				formed = formed.Add(-40 * time.Millisecond)
			}
			rounds[r], errs[r] = settleCalls(comms[r], o, formed)
			took[r] = time.Since(start)
		}()
	}
	wg.Wait()
	for r := range comms {
		require.NoError(t, errs[r], "rank %d", r)
		require.Equal(t, rounds[0], rounds[r], "rank %d stopped after another round", r)
		if r != 1 { // rank 1 is done at once and waits for the others, which may have started a little before it
			require.GreaterOrEqual(t, took[r], o.settle, "rank %d", r)
		}
	}
	require.Greater(t, rounds[0], 1)
}

// perf's agreements give every rank the element-wise maximum or total of
// the ranks' values, and never start autotuning: an allreduce of the same
// bytes does.
func TestAgree(t *testing.T) {
	const n = 3
	comms := startLocalComms(t, n)
	got := make([][]float64, n)
	sums := make([][]float64, n)
	errs := make([]error, 2*n)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Rank r holds -r, r*r, 7 - r, 1e15 + r.
			got[r] = []float64{float64(-r), float64(r * r), float64(7 - r), 1e15 + float64(r)}
			errs[r] = agree(comms[r], got[r], false)
			sums[r] = []float64{float64(-r), float64(r * r), float64(7 - r), 1e15 + float64(r)}
			errs[n+r] = agree(comms[r], sums[r], true)
		}()
	}
	wg.Wait()
	for r := range comms {
		require.NoError(t, errs[r], "rank %d", r)
		require.NoError(t, errs[n+r], "rank %d", r)
		require.Equal(t, []float64{0, 4, 7, 1e15 + 2}, got[r], "rank %d: maximum", r)
		require.Equal(t, []float64{-3, 5, 18, 3e15 + 3}, sums[r], "rank %d: total", r)
	}
	// Four float64s are 32 bytes: the agreement left that size untuned,
	// and an allreduce of it starts exploring (when there is more than
	// one candidate to explore, as on three ranks here).
	for r, c := range comms {
		require.False(t, c.Exploring(4, algorithms.Float64), "rank %d: an agreement started autotuning", r)
	}
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 32)
			errs[r] = reduceOnce(comms[r], buf)
		}()
	}
	wg.Wait()
	for r, c := range comms {
		require.NoError(t, errs[r], "rank %d", r)
		require.True(t, c.Exploring(4, algorithms.Float64), "rank %d: an allreduce of 32 bytes did not explore", r)
	}
}

// reduceOnce is one blocking float64 sum allreduce of buf in place.
func reduceOnce(c *pg.Comm, buf []byte) error {
	r, err := c.AllReduce(buf, buf, int64(len(buf)/8), algorithms.Float64, algorithms.Sum)
	if err == nil {
		err = r.Wait(-1)
	}
	return err
}

// On one host an iteration lasts from the last rank's end of the one
// before to the last rank's end of it, however the ranks' own iterations
// alternate; without the clock it is the slowest rank's time.
func TestCombineTimes(t *testing.T) {
	comms := startLocalComms(t, 3)
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	run := func(times, ends [][]float64) [][]float64 {
		for r := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = combineTimes(comms[r], times[r], ends[r])
			}()
		}
		wg.Wait()
		for r := range comms {
			require.NoError(t, errs[r], "rank %d", r)
		}
		return times
	}
	// Rank 0 runs half an iteration ahead on every other call, rank 2
	// always ends 20 µs after rank 1; the loop takes 100 µs a call.
	ends := [][]float64{
		{1000, 1050, 1200, 1250, 1400},
		{1000, 1100, 1200, 1300, 1400},
		{1020, 1120, 1220, 1320, 1420},
	}
	times := [][]float64{{50, 150, 50, 150}, {100, 100, 100, 100}, {100, 100, 100, 100}}
	for r, got := range run(times, ends) {
		require.Equal(t, []float64{100, 100, 100, 100}, got, "rank %d", r)
	}
	// No clock (ends[0] == 0 on every rank): the slowest rank per iteration.
	none := [][]float64{make([]float64, 3), make([]float64, 3), make([]float64, 3)}
	times = [][]float64{{5, 9}, {7, 3}, {6, 1}}
	for r, got := range run(times, none) {
		require.Equal(t, []float64{7, 9}, got, "rank %d", r)
	}
}

// The bound's copy time on one host is the span of all ranks' copies:
// 4 ranks on 2 CPUs copying two at a time (6 µs each, the second pair
// after the first) took 12 µs together, though no rank timed more than 6.
// Across hosts it is the slowest rank's. Each is the median of the copies.
func TestCopyTime(t *testing.T) {
	slowest := []float64{6, 6, 7, 6, 40}
	negStarts := []float64{-100, -200, -300, -400, -500}
	ends := []float64{112, 212, 313, 430, 511}
	require.Equal(t, 12.0, copyTime(slowest, negStarts, ends, true))
	require.Equal(t, 6.0, copyTime(slowest, negStarts, ends, false))
	require.Equal(t, []float64{6, 6, 7, 6, 40}, slowest, "copyTime must not reorder its input")
}
