package algorithms

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// Bruck's order at 5 ranks, derived by hand: rank 0 sends to ranks
// 4, 3, 1 (positions −1, −2, −4) and receives from 1, 2, 4. The
// reduce-scatter handles the distances 3 1 2 4 0 (hdUnitOrder(8) without
// 5, 6, 7); the block at distance 1 collects what rank 3 sent before it
// goes on to rank 1. The allgather runs it backwards.
func TestBruckOrder(t *testing.T) {
	show := func(coll Collective) []string { return hdRank0Steps(t, 5, coll, 1) }
	require.Equal(t, []string{
		"Send[][2]{in 3}{- 0}", "RecvReduceSend[3][1]{in 1}{- 0}", "Send[][2]{in 2}{- 0}", "Send[][4]{in 4}{- 0}",
		"RecvReduceCopySend[4 3 1][]{in 0}{out 0}",
	}, show(ReduceScatter))
	require.Equal(t, []string{
		"Send[][4 3 1]{in 0}{- 0}", "Copy[][]{in 0}{out 0}", "Recv[4][]{- 0}{out 4}", "Recv[2][]{- 0}{out 2}",
		"RecvCopySend[1][3]{- 0}{out 1}", "Recv[2][]{- 0}{out 3}",
	}, show(AllGather))
}

// The links a Bruck plan uses are exactly GatherScatterPeers, for ring
// orders that are not the rank order too; and every rank receives each
// block of the allgather once.
func TestBruckPeers(t *testing.T) {
	for _, n := range []int{3, 5, 6, 7, 11, 12, 24, 31} {
		l := randomLayoutIntra(rand.New(rand.NewPCG(uint64(n), 9)), UniformLayout(1, n, 2, TreePattern))
		g := mustGraph(t, l)
		for _, coll := range []Collective{AllGather, ReduceScatter} {
			p, err := BuildPlan(g, PlanRequest{Coll: coll, Algo: HalvingDoubling, Proto: Simple, Count: 97, DType: Int32, Op: Sum})
			require.NoError(t, err)
			for _, rp := range p.Ranks {
				for _, cp := range rp.Channels {
					want, err := GatherScatterPeers(g, cp.Channel, rp.Rank)
					require.NoError(t, err)
					var used []int
					received := map[int64]int{}
					for _, st := range cp.Streams[0] {
						for _, q := range append(slices.Clone(st.SendTo), st.RecvFrom...) {
							if !slices.Contains(used, q) {
								used = append(used, q)
							}
						}
						if coll == AllGather && len(st.RecvFrom) > 0 {
							received[st.Dst.Off]++
						}
					}
					name := fmt.Sprintf("%v n=%d rank %d channel %d", coll, n, rp.Rank, cp.Channel)
					require.ElementsMatch(t, want, used, name)
					require.LessOrEqual(t, len(want), 2*log2Floor(2*n-1), name)
					if coll == AllGather {
						require.Len(t, received, n-1, name)
						for off, k := range received {
							require.Equal(t, 1, k, "%s: block at %d received %d times", name, off, k)
						}
					}
				}
			}
		}
	}
}
