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

// Halving-doubling has allreduce for any n, allgather and reduce-scatter
// for a power of two ranks (each rank sending (n−1)/n of the message, as
// ShapeOf says, to the partners a communicator links), and nothing else;
// the cost model keeps it within one node.
func TestHalvingDoublingCollectives(t *testing.T) {
	for n := 1; n <= 17; n++ {
		l := UniformLayout(1, n, 2, TreePattern)
		l = randomLayoutIntra(rand.New(rand.NewPCG(uint64(n), 5)), l)
		g := mustGraph(t, l)
		for _, coll := range []Collective{AllGather, ReduceScatter, Broadcast, Reduce} {
			const count = 3 << 10
			p, err := BuildPlan(g, PlanRequest{Coll: coll, Algo: HalvingDoubling, Proto: Simple, Count: count, DType: Int8, Op: Sum, ChunkBytes: 1 << 10})
			name := fmt.Sprintf("%v n=%d", coll, n)
			if coll == Broadcast || coll == Reduce {
				require.ErrorIs(t, err, ErrAlgoNotSupported, name)
				continue
			}
			require.NoError(t, err, name)
			require.NoError(t, CheckPlan(p), name)
			if n == 1 {
				continue // one Copy
			}
			sh := ShapeOf(coll, HalvingDoubling, CostTopo{NRanks: n, NNodes: 1, RanksPerNode: n, Channels: 1})
			hops := 0
			for 1<<hops < n {
				hops++
			}
			require.Equal(t, float64(hops), sh.IntraHops, name)
			for _, rp := range p.Ranks {
				var sent int64
				for _, cp := range rp.Channels {
					want, err := GatherScatterPeers(g, cp.Channel, rp.Rank)
					require.NoError(t, err)
					for _, st := range cp.Streams[0] {
						for _, q := range append(slices.Clone(st.SendTo), st.RecvFrom...) {
							require.Contains(t, want, q, "%s rank %d channel %d", name, rp.Rank, cp.Channel)
						}
						sent += st.Count * int64(len(st.SendTo))
					}
				}
				require.InDelta(t, float64(n*count)/sh.Ratio, float64(sent), 0.5, "%s rank %d", name, rp.Rank)
			}
		}
	}
	topo := CostTopo{NRanks: 4, NNodes: 2, RanksPerNode: 2, Intra: Shm, Inter: TCP, Channels: 1}
	for _, coll := range []Collective{AllReduce, AllGather, ReduceScatter} {
		_, err := DefaultTuning().Predict(coll, HalvingDoubling, Simple, topo, 1<<20, 0)
		require.ErrorIs(t, err, ErrAlgoNotSupported, "%v across nodes", coll)
	}
	_, err := HalvingDoublingPeers(mustGraph(t, UniformLayout(1, 4, 1, TreePattern)), 0, 4)
	require.Error(t, err)
}

// The reduce-scatter's order at 4 ranks: the block two away goes to the
// partner two away first, then the neighbour's block, reduced with what
// the partner two away sent, to the neighbour; the block across, then the
// own block from both. The allgather runs it backwards.
func TestHalvingDoublingScatterOrder(t *testing.T) {
	show := func(coll Collective) []string { return hdRank0Steps(t, 4, coll, 4) }
	require.Equal(t, []string{
		"Send[][2]{in 12}{- 0}", "RecvReduceSend[2][1]{in 4}{- 0}", "Send[][2]{in 8}{- 0}", "RecvReduceCopySend[2 1][]{in 0}{out 0}",
	}, show(ReduceScatter))
	require.Equal(t, []string{
		"Send[][2 1]{in 0}{- 0}", "Copy[][]{in 0}{out 0}", "Recv[2][]{- 0}{out 8}", "RecvCopySend[1][2]{- 0}{out 4}", "Recv[2][]{- 0}{out 12}",
	}, show(AllGather))
}

// hdRank0Steps is rank 0's steps in a one-channel halving-doubling plan
// of coll over n ranks of one node (count int8 per block), checked.
func hdRank0Steps(t *testing.T, n int, coll Collective, count int64) []string {
	t.Helper()
	g := mustGraph(t, UniformLayout(1, n, 1, TreePattern))
	p, err := BuildPlan(g, PlanRequest{Coll: coll, Algo: HalvingDoubling, Proto: Simple, Count: count, DType: Int8, Op: Sum})
	require.NoError(t, err)
	require.NoError(t, CheckPlan(p))
	var out []string
	for _, st := range p.Ranks[0].Channels[0].Streams[0] {
		out = append(out, fmt.Sprintf("%v%v%v%v%v", st.Prim, st.RecvFrom, st.SendTo, st.Src, st.Dst))
	}
	return out
}
