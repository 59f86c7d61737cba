package algorithms

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every rank reads each element of its input once and writes each element
// of its output once: 2n accesses per element, whichever way the ring or
// chain runs, in place or not.
func TestTrafficAllReduce(t *testing.T) {
	for _, n := range []int{2, 3, 4, 5, 7} {
		for _, ch := range []int{1, 2, 3} {
			g := mustGraph(t, UniformLayout(1, n, ch, TreePattern))
			for _, algo := range []Algorithm{Ring, Tree} {
				for _, count := range []int64{0, 1, 2, 13, 1009, 65537} {
					for _, dt := range []DType{Int8, Float32, Float64} {
						p, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Algo: algo, Proto: Simple, Count: count, DType: dt, Op: Sum, ChunkBytes: 96})
						require.NoError(t, err)
						want := count * int64(dt.Size()) * int64(2*n)
						name := fmt.Sprintf("n=%d ch=%d %v count=%d %v", n, ch, algo, count, dt)
						require.Equal(t, want, p.Traffic(false), name)
						require.Equal(t, want, p.Traffic(true), name)
					}
				}
			}
		}
	}
}

// One rank: the out-of-place call copies input to output (read + write),
// the in-place call touches nothing.
func TestTrafficOneRank(t *testing.T) {
	g := mustGraph(t, UniformLayout(1, 1, 1, TreePattern))
	p, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Algo: Ring, Proto: Simple, Count: 101, DType: Float32, Op: Sum})
	require.NoError(t, err)
	require.Equal(t, int64(2*101*4), p.Traffic(false))
	require.Equal(t, int64(0), p.Traffic(true))
}

// A ring allgather reads each rank's block once (the owner sends it) and
// writes it into the n-1 other ranks' outputs; out of place every rank
// also copies its own block into its output (read + write), which in
// place (the input is that block) costs nothing.
func TestTrafficAllGather(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		g := mustGraph(t, UniformLayout(1, n, 2, TreePattern))
		for _, count := range []int64{1, 7, 4099} {
			p, err := BuildPlan(g, PlanRequest{Coll: AllGather, Algo: Ring, Proto: Simple, Count: count, DType: Int32, ChunkBytes: 64})
			require.NoError(t, err)
			block := count * 4
			perBlock := 1 + int64(n-1)
			require.Equal(t, int64(n)*block*perBlock, p.Traffic(true), "n=%d count=%d in place", n, count)
			require.Equal(t, int64(n)*block*(perBlock+2), p.Traffic(false), "n=%d count=%d out of place", n, count)
		}
	}
}
