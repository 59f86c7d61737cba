package main

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/gotree/gotree/algorithms"
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
