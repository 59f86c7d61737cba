package pg

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
)

// TestManyInFlight issues thousands of allreduces on every rank before
// waiting for any (torch code that issues one asynchronous allreduce per
// parameter does): none is refused, and each has its own sum.
func TestManyInFlight(t *testing.T) {
	const calls = 3001 // the queue once held 1024
	comms := startComms(t, 3, nil, testConfig())
	reqs := make([][]*Request, len(comms))
	bufs := make([][][]byte, len(comms))
	for r, c := range comms {
		for i := range calls {
			b := i64s([]int64{int64(i*10 + r + 1), int64(-i)})
			bufs[r] = append(bufs[r], b)
			q, err := c.AllReduce(b, b, 2, algorithms.Int64, algorithms.Sum)
			require.NoError(t, err, "rank %d call %d", r, i)
			reqs[r] = append(reqs[r], q)
		}
	}
	for r := range comms {
		for i, q := range reqs[r] {
			require.NoError(t, q.Wait(-1), "rank %d call %d", r, i)
			got0 := int64(binary.LittleEndian.Uint64(bufs[r][i]))
			got1 := int64(binary.LittleEndian.Uint64(bufs[r][i][8:]))
			require.Equal(t, []int64{int64(30*i + 6), int64(-3 * i)}, []int64{got0, got1}, "rank %d call %d", r, i)
		}
	}
}

func TestOpQueue(t *testing.T) {
	q := newOpQueue()
	var in []*Request
	for i := range 200 {
		r := newRequest("", 0, nil)
		r.source = i
		in = append(in, r)
		require.True(t, q.push(r))
		if i%3 == 2 { // interleave pops with pushes: the slice is compacted on the way
			got, ok := q.pop()
			require.True(t, ok)
			require.Equal(t, in[0], got)
			in = in[1:]
		}
	}
	done := make(chan []*Request)
	go func() {
		var out []*Request
		for {
			r, ok := q.pop()
			if !ok {
				done <- out
				return
			}
			out = append(out, r)
		}
	}()
	last := newRequest("", 0, nil)
	require.True(t, q.push(last))
	in = append(in, last)
	q.close()
	require.False(t, q.push(newRequest("", 0, nil)), "push after close")
	require.Equal(t, in, <-done, "everything queued before close comes out, in order")
}
