package algorithms

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func sharedPlan(t *testing.T, n int, count, chunkBytes int64) *Plan {
	t.Helper()
	g := mustGraph(t, UniformLayout(1, n, 2, BalancedTree))
	p, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Algo: Shared, Proto: Simple, Count: count, DType: Int32, Op: Sum, ChunkBytes: chunkBytes})
	require.NoError(t, err)
	return p
}

// twice returns a plan whose ranks run p's steps two times in a row:
// two calls back to back, so that the race check sees whether a rank
// that starts the next call early can touch a staging region a slower
// peer still reads.
func twice(p *Plan) *Plan {
	q := *p
	q.Ranks = make([]RankPlan, len(p.Ranks))
	for r, rp := range p.Ranks {
		st := rp.Channels[0].Streams[0]
		q.Ranks[r] = RankPlan{Rank: r, Channels: []ChannelPlan{{Channel: 0, Streams: []Stream{append(append(Stream{}, st...), st...)}}}}
	}
	return &q
}

// Every rank's result is the exact sum, for one chunk or many (counts
// not divisible by the ranks or the chunk), in place or not, also when
// the same plan runs twice back to back without a race.
func TestSharedPlan(t *testing.T) {
	for _, n := range []int{2, 3, 4, 5, 7} {
		for _, count := range []int64{1, 2, 13, 101} {
			for _, chunk := range []int64{0, 12, 40} { // 0: the default (one chunk here)
				p := sharedPlan(t, n, count, chunk)
				name := fmt.Sprintf("n%d_c%d_chunk%d", n, count, chunk)
				require.NoError(t, CheckPlan(p), name)
				require.NoError(t, CheckPlan(twice(p)), name+" twice")
				wantChunks := int64(1)
				if chunk > 0 {
					per := max(chunk/4, int64(n))
					wantChunks = (count + per - 1) / per
				}
				for r := range p.Ranks {
					// Per chunk of m: the own slice reduced from n-1 peers'
					// regions, the other slices copied out of theirs.
					var wantPeer int64
					per := p.StageElems / 2
					for off := int64(0); off < count; off += per {
						m := min(per, count-off)
						_, own := directSlice(m, n, r)
						wantPeer += int64(n-1)*own + m - own
					}
					require.Equal(t, wantPeer, p.Stats(r).ReadPeer, "%s rank %d", name, r)
					rounds := 0
					for _, s := range p.Ranks[r].Channels[0].Streams[0] {
						if s.Prim == Notify {
							rounds++
						}
					}
					require.Equal(t, int(2*wantChunks), rounds, "%s rank %d: two rounds per chunk", name, r)
				}
				ins := make([][]byte, n)
				want := make([]int64, count)
				for r := range ins {
					v := make([]int32, count)
					for i := range v {
						v[i] = int32((r+1)*1000 + i*7 - 3*r*r)
						want[i] += int64(v[i])
					}
					ins[r] = i32bytes(v)
				}
				for _, inPlace := range []bool{false, true} {
					outs, err := RunOracle(p, ins, inPlace)
					require.NoError(t, err, name)
					for r, o := range outs {
						got := bytesI32(o)
						for i := range got {
							require.Equal(t, want[i], int64(got[i]), "%s in place %v: rank %d element %d", name, inPlace, r, i)
						}
					}
				}
			}
		}
	}
}

// Each of the two rounds of a chunk is needed, and so is writing the
// reduced slice into the second half of the region: reducing in place
// into the staged chunk lets the next call overwrite what a slower peer
// still copies out.
func TestSharedRoundsAreNeeded(t *testing.T) {
	for round := 0; round < 2; round++ {
		p := sharedPlan(t, 3, 10, 0)
		dropRound(p, round)
		err := CheckPlan(twice(p))
		require.Error(t, err, "without round %d", round+1)
		require.Contains(t, err.Error(), "race", "without round %d", round+1)
	}
	p := sharedPlan(t, 3, 10, 0)
	half := p.StageElems / 2
	for r := range p.Ranks {
		st := p.Ranks[r].Channels[0].Streams[0]
		for i := range st {
			if st[i].Src.Buf == Stage && st[i].Src.Off >= half {
				st[i].Src.Off -= half // copy out of the staged half
			}
			if st[i].Prim == ReadReduceCopy {
				st[i].Dst.Off -= half // reduce in place
			}
		}
	}
	require.NoError(t, CheckPlan(p), "one call alone is race-free")
	err := CheckPlan(twice(p))
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "race"), "%v", err)
}

func TestSharedRefusals(t *testing.T) {
	g := mustGraph(t, UniformLayout(2, 2, 1, BalancedTree))
	_, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Algo: Shared, Proto: Simple, Count: 8, DType: Int32})
	require.True(t, errors.Is(err, ErrAlgoNotSupported), "%v", err)
	g1 := mustGraph(t, UniformLayout(1, 3, 1, BalancedTree))
	_, err = BuildPlan(g1, PlanRequest{Coll: AllGather, Algo: Shared, Proto: Simple, Count: 8, DType: Int32})
	require.True(t, errors.Is(err, ErrAlgoNotSupported), "%v", err)
	_, err = DefaultTuning().Predict(AllReduce, Shared, Simple, CostTopo{NRanks: 4, NNodes: 2, RanksPerNode: 2, Intra: Shm, Inter: TCP, Channels: 1}, 1<<20, 1)
	require.True(t, errors.Is(err, ErrAlgoNotSupported), "%v", err)
	// A step that reads a staging region the plan does not have.
	p := sharedPlan(t, 2, 4, 0)
	p.StageElems = 0
	require.ErrorContains(t, CheckPlan(p), "staging region")
}

func i32bytes(v []int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		u := uint32(x)
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return b
}

func bytesI32(b []byte) []int32 {
	v := make([]int32, len(b)/4)
	for i := range v {
		v[i] = int32(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
	}
	return v
}
