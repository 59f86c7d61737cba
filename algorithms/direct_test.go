package algorithms

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func directPlan(t *testing.T, n int, count int64) *Plan {
	t.Helper()
	g := mustGraph(t, UniformLayout(1, n, 2, BalancedTree))
	p, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Algo: Direct, Proto: Simple, Count: count, DType: Float32, Op: Sum})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Each rank reduces its slice once, reading every other rank, and writes
// it to every other rank; the slices tile the message; two rounds.
func TestDirectPlanShape(t *testing.T) {
	for _, n := range []int{2, 3, 4, 5, 7} {
		for _, count := range []int64{1, 2, 5, 13, 1031} {
			t.Run(fmt.Sprintf("n%d_c%d", n, count), func(t *testing.T) {
				p := directPlan(t, n, count)
				if err := CheckPlan(p); err != nil {
					t.Fatal(err)
				}
				covered := make([]int, count)
				for r := 0; r < n; r++ {
					if len(p.Ranks[r].Channels) != 1 || len(p.Ranks[r].Channels[0].Streams) != 1 {
						t.Fatalf("rank %d: %d channels, want one stream on channel 0", r, len(p.Ranks[r].Channels))
					}
					rounds := 0
					for _, st := range p.Ranks[r].Channels[0].Streams[0] {
						switch st.Prim {
						case Notify:
							rounds++
						case ReadReduceCopy:
							want := make([]int, 0, n-1)
							for k := 1; k < n; k++ {
								want = append(want, (r+k)%n)
							}
							if !slices.Equal(st.ReadFrom, want) || !slices.Equal(st.WriteTo, want) {
								t.Errorf("rank %d reads %v and writes %v, want %v", r, st.ReadFrom, st.WriteTo, want)
							}
							for i := st.Dst.Off; i < st.Dst.Off+st.Count; i++ {
								covered[i]++
							}
						}
					}
					if rounds != directRounds {
						t.Errorf("rank %d: %d rounds", r, rounds)
					}
					_, own := directSlice(count, n, r)
					if s := p.Stats(r); s.ReadPeer != int64(n-1)*own || s.WritePeer != int64(n-1)*own {
						t.Errorf("rank %d reads %d and writes %d peer elements, want %d each", r, s.ReadPeer, s.WritePeer, int64(n-1)*own)
					}
				}
				for i, c := range covered {
					if c != 1 {
						t.Fatalf("element %d reduced by %d ranks", i, c)
					}
				}
			})
		}
	}
}

// dropRound removes the round-th Notify/Wait round from every rank's one
// stream of p.
func dropRound(p *Plan, round int) {
	for r := range p.Ranks {
		var out Stream
		k := -1
		for _, s := range p.Ranks[r].Channels[0].Streams[0] {
			if s.Prim == Notify {
				k++
			}
			if (s.Prim == Notify || s.Prim == Wait) && k == round {
				continue
			}
			out = append(out, s)
		}
		p.Ranks[r].Channels[0].Streams[0] = out
	}
}

// Without either round a rank reads or writes memory that its owner's
// caller may be writing: the race check says so.
func TestDirectRoundsAreNeeded(t *testing.T) {
	g := mustGraph(t, UniformLayout(1, 3, 2, BalancedTree))
	for _, coll := range []Collective{AllReduce, AllGather, ReduceScatter} {
		for round := 0; round < directRounds; round++ {
			p, err := BuildPlan(g, PlanRequest{Coll: coll, Algo: Direct, Proto: Simple, Count: 10, DType: Float32, Op: Sum})
			if err != nil {
				t.Fatal(err)
			}
			dropRound(p, round)
			err = CheckPlan(p)
			if err == nil || !strings.Contains(err.Error(), "race") {
				t.Errorf("%v without round %d: CheckPlan = %v, want a race", coll, round+1, err)
			}
		}
	}
}

func TestDirectRefusals(t *testing.T) {
	g := mustGraph(t, UniformLayout(2, 2, 1, BalancedTree))
	if _, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Algo: Direct, Proto: Simple, Count: 8, DType: Int32}); !errors.Is(err, ErrAlgoNotSupported) {
		t.Errorf("direct across 2 nodes: %v", err)
	}
	g1 := mustGraph(t, UniformLayout(1, 3, 1, BalancedTree))
	if _, err := BuildPlan(g1, PlanRequest{Coll: Broadcast, Algo: Direct, Proto: Simple, Count: 8, DType: Int32}); !errors.Is(err, ErrAlgoNotSupported) {
		t.Errorf("direct broadcast: %v", err)
	}
	if _, err := BuildPlan(g, PlanRequest{Coll: AllGather, Algo: Direct, Proto: Simple, Count: 8, DType: Int32}); !errors.Is(err, ErrAlgoNotSupported) {
		t.Errorf("direct allgather across 2 nodes: %v", err)
	}
	tu := DefaultTuning()
	if _, err := tu.Predict(AllReduce, Direct, Simple, CostTopo{NRanks: 4, NNodes: 2, RanksPerNode: 2, Intra: Shm, Inter: TCP, Channels: 1}, 1<<20, 1); !errors.Is(err, ErrAlgoNotSupported) {
		t.Errorf("direct predicted across nodes: %v", err)
	}
	if sh := ShapeOf(AllReduce, Direct, CostTopo{NRanks: 4, NNodes: 1, RanksPerNode: 4, Channels: 1}); sh.IntraHops != directRounds || sh.Ratio != 4.0/6 {
		t.Errorf("shape %+v", sh)
	}
	p := directPlan(t, 3, 9)
	bad := func(what string, mutate func(st Stream)) {
		t.Helper()
		q := *p
		q.Ranks = slices.Clone(p.Ranks)
		q.Ranks[1].Channels = []ChannelPlan{{Channel: 0, Streams: []Stream{slices.Clone(p.Ranks[1].Channels[0].Streams[0])}}}
		mutate(q.Ranks[1].Channels[0].Streams[0])
		if err := CheckPlan(&q); !errors.Is(err, ErrBadPlan) {
			t.Errorf("%s: CheckPlan = %v", what, err)
		}
	}
	bad("a read on a notify", func(st Stream) { st[0].ReadFrom = []int{0} })
	bad("a write on a wait", func(st Stream) { st[1].WriteTo = []int{0} })
	bad("write to itself", func(st Stream) {
		for i := range st {
			if st[i].Prim == ReadReduceCopy {
				st[i].WriteTo = []int{2, 1}
			}
		}
	})
	bad("read from itself", func(st Stream) {
		for i := range st {
			if st[i].Prim == ReadReduceCopy {
				st[i].ReadFrom = []int{1, 2}
			}
		}
	})
	bad("notify of two", func(st Stream) { st[0].Count = 2 })
}

// Direct allgather: each rank writes its block into its own output and
// every peer's, reading none; reduce-scatter: each rank reads its block of
// every peer's input, writing none. Both race-free in and out of place
// (CheckPlan), every block covered once; the oracle tests check values.
func TestDirectAllGatherReduceScatterShape(t *testing.T) {
	for _, n := range []int{2, 3, 4, 7} {
		g := mustGraph(t, UniformLayout(1, n, 2, BalancedTree))
		for _, coll := range []Collective{AllGather, ReduceScatter} {
			for _, count := range []int64{1, 13, 1031} {
				p, err := BuildPlan(g, PlanRequest{Coll: coll, Algo: Direct, Proto: Simple, Count: count, DType: Float32, Op: Sum})
				if err != nil {
					t.Fatal(err)
				}
				if err := CheckPlan(p); err != nil {
					t.Fatalf("%v n=%d count=%d: %v", coll, n, count, err)
				}
				for r := 0; r < n; r++ {
					s := p.Stats(r)
					read, wrote := int64(0), int64(n-1)*count
					if coll == ReduceScatter {
						read, wrote = wrote, 0
					}
					if s.ReadPeer != read || s.WritePeer != wrote {
						t.Errorf("%v n=%d count=%d rank %d: reads %d and writes %d peer elements, want %d and %d", coll, n, count, r, s.ReadPeer, s.WritePeer, read, wrote)
					}
				}
			}
		}
	}
	if sh := ShapeOf(AllGather, Direct, CostTopo{NRanks: 4, NNodes: 1, RanksPerNode: 4, Channels: 1}); sh.IntraHops != directRounds || sh.Ratio != 4.0/3 {
		t.Errorf("allgather shape %+v", sh)
	}
}
