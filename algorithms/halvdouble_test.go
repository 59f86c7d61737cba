package algorithms

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every peer a halving-doubling plan talks to is one HalvingDoublingPeers
// names (the links a communicator opens), the number of exchanges matches
// the cost model's hops, and every rank moves what ShapeOf says.
func TestHalvingDoublingPeersAndShape(t *testing.T) {
	for n := 2; n <= 17; n++ {
		for _, intra := range []bool{false, true} {
			l := UniformLayout(1, n, 2, TreePattern)
			if intra { // a ring order that is not 0..n-1
				rng := rand.New(rand.NewPCG(uint64(n), 3))
				l = randomLayoutIntra(rng, l)
			}
			g := mustGraph(t, l)
			const count = 3 << 14 // every block of 16 non-empty on both channels
			p, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Algo: HalvingDoubling, Proto: Simple, Count: count, DType: Int8, Op: Sum, ChunkBytes: 1 << 20})
			require.NoError(t, err)
			require.NoError(t, CheckPlan(p))
			pw := 1
			for pw*2 <= n {
				pw *= 2
			}
			folded := 0
			var maxSent int64
			for _, rp := range p.Ranks {
				for _, cp := range rp.Channels {
					want, err := HalvingDoublingPeers(g, cp.Channel, rp.Rank)
					require.NoError(t, err)
					name := fmt.Sprintf("n=%d intra=%v rank %d channel %d", n, intra, rp.Rank, cp.Channel)
					var order []int // peers in the order of first use
					var sent int64
					reduces := false
					for _, s := range cp.Streams {
						for _, st := range s {
							reduces = reduces || st.Prim == RecvReduceCopySend
							for _, q := range append(slices.Clone(st.SendTo), st.RecvFrom...) {
								require.Contains(t, want, q, name)
								if !slices.Contains(order, q) {
									order = append(order, q)
								}
							}
							sent += st.Count * int64(len(st.SendTo))
						}
					}
					require.Equal(t, want, order, name)
					if !reduces { // folded out: sends its input, receives the result
						folded++
					}
					maxSent = max(maxSent, sent)
				}
			}
			require.Equal(t, (n-pw)*p.Channels, folded, "n=%d: ranks folded out, per channel", n)
			sh := ShapeOf(AllReduce, HalvingDoubling, CostTopo{NRanks: n, NNodes: 1, RanksPerNode: n, Channels: 1})
			lg := 0
			for 1<<lg < pw {
				lg++
			}
			hops := 2 * lg
			if n != pw {
				hops += 2
			}
			require.Equal(t, float64(hops), sh.IntraHops, "n=%d", n)
			// A rank of the power-of-two group sends (p-1)/p of its channel's
			// slice in each phase; a fold partner also sends it whole once.
			perCh := int64(count / p.Channels)
			want := 2 * perCh * int64(pw-1) / int64(pw)
			if n != pw {
				want += perCh
			}
			require.InDelta(t, float64(want), float64(maxSent), float64(perCh)/100+64, "n=%d", n)
		}
	}
}

// An exchange alternates: send chunk j, receive chunk j.
func TestHalvingDoublingInterleave(t *testing.T) {
	g := mustGraph(t, UniformLayout(1, 4, 1, TreePattern))
	p, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Algo: HalvingDoubling, Proto: Simple, Count: 4 * 1024, DType: Int8, Op: Sum, ChunkBytes: 512})
	require.NoError(t, err)
	var got []string
	for _, st := range p.Ranks[0].Channels[0].Streams[0] {
		got = append(got, fmt.Sprintf("%v%v%v/%d", st.Prim, st.SendTo, st.RecvFrom, st.Count))
	}
	// Rank 0 keeps blocks 0-1 against rank 2, then block 0 against rank 1;
	// then gathers: block 1 from rank 1, blocks 2-3 from rank 2. 1 KiB
	// blocks, 512-byte chunks.
	want := []string{
		"Send[2][]/512", "RecvReduceCopySend[][2]/512", "Send[2][]/512", "RecvReduceCopySend[][2]/512", "Send[2][]/512", "RecvReduceCopySend[][2]/512", "Send[2][]/512", "RecvReduceCopySend[][2]/512",
		"Send[1][]/512", "RecvReduceCopySend[][1]/512", "Send[1][]/512", "RecvReduceCopySend[][1]/512",
		"Send[1][]/512", "Recv[][1]/512", "Send[1][]/512", "Recv[][1]/512",
		"Send[2][]/512", "Recv[][2]/512", "Send[2][]/512", "Recv[][2]/512", "Send[2][]/512", "Recv[][2]/512", "Send[2][]/512", "Recv[][2]/512",
	}
	require.Equal(t, want, got)
}

func TestHalvingDoublingOnlyAllReduce(t *testing.T) {
	g := mustGraph(t, UniformLayout(1, 4, 1, TreePattern))
	_, err := BuildPlan(g, PlanRequest{Coll: AllGather, Algo: HalvingDoubling, Proto: Simple, Count: 8, DType: Int8})
	require.ErrorIs(t, err, ErrAlgoNotSupported)
	_, err = DefaultTuning().Predict(AllReduce, HalvingDoubling, Simple, CostTopo{NRanks: 4, NNodes: 2, RanksPerNode: 2, Intra: Shm, Inter: TCP, Channels: 1}, 1<<20, 0)
	require.ErrorIs(t, err, ErrAlgoNotSupported)
	_, err = HalvingDoublingPeers(g, 0, 4)
	require.Error(t, err)
}
