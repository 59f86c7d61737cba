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
func twice(p *Plan) *Plan { return then(p, p) }

// then returns a plan whose ranks run p's steps and then next's (two calls
// back to back, of next's size at most p's, on the same staging regions).
func then(p, next *Plan) *Plan {
	q := *p
	q.Ranks = make([]RankPlan, len(p.Ranks))
	for r, rp := range p.Ranks {
		st := append(append(Stream{}, rp.Channels[0].Streams[0]...), next.Ranks[r].Channels[0].Streams[0]...)
		q.Ranks[r] = RankPlan{Rank: r, Channels: []ChannelPlan{{Channel: 0, Streams: []Stream{st}}}}
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
// reduced slice into the second half of the region. Reducing into the
// gap that r's own slice leaves in its staged chunk holds as long as the
// slices stay where they are (the same call twice), but a next call of
// another size moves them: its copy-in overwrites what a slower peer
// still copies out.
func TestSharedRoundsAreNeeded(t *testing.T) {
	for round := 0; round < 2; round++ {
		p := sharedPlan(t, 3, 10, 0)
		dropRound(p, round)
		err := CheckPlan(twice(p))
		require.Error(t, err, "without round %d", round+1)
		require.Contains(t, err.Error(), "race", "without round %d", round+1)
	}
	inGap := func(p *Plan) *Plan {
		half := p.StageElems / 2
		for r := range p.Ranks {
			st := p.Ranks[r].Channels[0].Streams[0]
			for i := range st {
				if st[i].Src.Buf == Stage && st[i].Src.Off >= half {
					st[i].Src.Off -= half // copy out of the staged half
				}
				if st[i].Prim == ReadReduceCopy {
					st[i].Dst.Off -= half // reduce into the own slice's gap
				}
			}
		}
		return p
	}
	p10, p9 := inGap(sharedPlan(t, 3, 10, 0)), inGap(sharedPlan(t, 3, 9, 0))
	require.Equal(t, p10.StageElems, p9.StageElems)
	require.NoError(t, CheckPlan(p10), "one call alone is race-free")
	require.NoError(t, CheckPlan(twice(p10)), "the same call twice is race-free")
	err := CheckPlan(then(p10, p9))
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "race"), "%v", err)
	// The plan as built: calls of any sizes in a row are race-free.
	for _, counts := range [][2]int64{{10, 9}, {10, 2}, {10, 1}, {13, 7}} {
		a, b := sharedPlan(t, 3, counts[0], 0), sharedPlan(t, 3, counts[1], 0)
		require.NoError(t, CheckPlan(then(a, b)), "calls of %d then %d elements", counts[0], counts[1])
	}
}

// A rank stages only its peers' slices of its chunk and reduces its own
// from its input: per call it copies count − (its slices) elements in.
// (That no peer reads the gap left in the region, TestSharedPlan's exact
// sums show: the oracle's regions start zeroed.)
func TestSharedOwnSliceNotStaged(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		for _, count := range []int64{1, 7, 101} {
			for _, chunk := range []int64{0, 40} {
				p := sharedPlan(t, n, count, chunk)
				per := p.StageElems / 2
				for r := range p.Ranks {
					var staged, own int64
					for _, s := range p.Ranks[r].Channels[0].Streams[0] {
						switch {
						case s.Prim == Copy && s.Src.Buf == Input:
							require.Equal(t, Stage, s.Dst.Buf)
							staged += s.Count
						case s.Prim == ReadReduceCopy:
							require.Equal(t, Input, s.Src.Buf, "rank %d reduces its own slice from its input", r)
							require.Equal(t, Stage, s.PeerSrc.Buf)
							own += s.Count
						}
					}
					var want int64 // r's slices of every chunk
					for off := int64(0); off < count; off += per {
						_, cnt := directSlice(min(per, count-off), n, r)
						want += cnt
					}
					require.Equal(t, want, own, "n%d count %d chunk %d rank %d", n, count, chunk, r)
					require.Equal(t, count-want, staged, "n%d count %d chunk %d rank %d", n, count, chunk, r)
				}
			}
		}
	}
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
	// The peers' operand: only a ReadReduceCopy names one, in the
	// staging regions, within them.
	for _, bad := range []func(s *Step) bool{
		func(s *Step) bool { // on a Copy
			if s.Prim != Copy {
				return false
			}
			s.PeerSrc = Ref{Stage, 0}
			return true
		},
		func(s *Step) bool { // in the peers' inputs
			if s.Prim != ReadReduceCopy {
				return false
			}
			s.PeerSrc = Ref{Input, 0}
			return true
		},
		func(s *Step) bool { // past the region's end
			if s.Prim != ReadReduceCopy {
				return false
			}
			s.PeerSrc.Off = 1 << 20
			return true
		},
	} {
		p := sharedPlan(t, 3, 10, 0)
		st := p.Ranks[1].Channels[0].Streams[0]
		changed := false
		for i := range st {
			if !changed && bad(&st[i]) {
				changed = true
			}
		}
		require.True(t, changed)
		require.ErrorContains(t, CheckPlan(p), "peers'")
	}
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
