package main

import (
	"encoding/binary"
	"math"
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
