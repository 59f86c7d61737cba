package algorithms

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func oneShotPlan(t *testing.T, n int, count int64, dt DType) *Plan {
	t.Helper()
	g := mustGraph(t, UniformLayout(1, n, 2, BalancedTree))
	p, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Algo: OneShot, Proto: Simple, Count: count, DType: dt, Op: Sum})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckPlan(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// Every rank sends its whole input once to every other rank, then folds
// the n inputs with its own at its rank's position: two steps, one stream.
func TestOneShotPlanShape(t *testing.T) {
	for _, n := range []int{2, 3, 5, 8} {
		p := oneShotPlan(t, n, 7, Float32)
		for r := 0; r < n; r++ {
			rp := p.Ranks[r]
			if len(rp.Channels) != 1 || len(rp.Channels[0].Streams) != 1 || len(rp.Channels[0].Streams[0]) != 2 {
				t.Fatalf("n=%d rank %d: %+v, want one stream of two steps on channel 0", n, r, rp.Channels)
			}
			send, fold := rp.Channels[0].Streams[0][0], rp.Channels[0].Streams[0][1]
			if send.Prim != Send || len(send.SendTo) != n-1 || send.SendTo[0] != (r+1)%n || send.Count != 7 {
				t.Errorf("n=%d rank %d: first step %+v", n, r, send)
			}
			if fold.Prim != RecvReduceCopySend || len(fold.RecvFrom) != n-1 || fold.SrcAt != r || len(fold.SendTo) != 0 {
				t.Errorf("n=%d rank %d: second step %+v", n, r, fold)
			}
			for i, q := range fold.RecvFrom {
				if want := i + btoi(i >= r); q != want {
					t.Errorf("n=%d rank %d receives from %v, want every other rank in order", n, r, fold.RecvFrom)
					break
				}
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Floats with fractions (so the order of the additions shows in the last
// bits): every rank's result is the left fold in rank order, computed
// here in float32 independently of the plan, bit for bit — in place too.
func TestOneShotSameBitsEverywhere(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	for _, n := range []int{2, 3, 4, 7, 8} {
		for _, count := range []int64{1, 2, 13, 1021} {
			for _, inPlace := range []bool{false, true} {
				t.Run(fmt.Sprintf("n%d_c%d_inplace%v", n, count, inPlace), func(t *testing.T) {
					p := oneShotPlan(t, n, count, Float32)
					vals := make([][]float32, n)
					inputs := make([][]byte, n)
					for r := range inputs {
						vals[r] = make([]float32, count)
						inputs[r] = make([]byte, 4*count)
						for i := range vals[r] {
							vals[r][i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(7)-3)))
							binary.LittleEndian.PutUint32(inputs[r][4*i:], math.Float32bits(vals[r][i]))
						}
					}
					outs, err := RunOracle(p, inputs, inPlace)
					if err != nil {
						t.Fatal(err)
					}
					for i := int64(0); i < count; i++ {
						want := vals[0][i]
						for r := 1; r < n; r++ {
							want += vals[r][i]
						}
						for r := 0; r < n; r++ {
							if got := binary.LittleEndian.Uint32(outs[r][4*i:]); got != math.Float32bits(want) {
								t.Fatalf("rank %d element %d: %v (%#x), want the rank-order sum %v (%#x)", r, i, math.Float32frombits(got), got, want, math.Float32bits(want))
							}
						}
					}
				})
			}
		}
	}
}

// One-shot plans exist only where every rank can hold every message: one
// host, up to 8 ranks, up to OneShotMaxBytes; the refusal names the limit.
func TestOneShotRefusals(t *testing.T) {
	cases := []struct {
		nodes, perNode int
		count          int64
	}{
		{1, 9, 1},                       // too many ranks
		{2, 2, 1},                       // two hosts
		{1, 4, OneShotMaxBytes/4 + 1},   // one float32 too many
		{1, 2, OneShotMaxBytes / 4 * 8}, // far too big
	}
	for _, c := range cases {
		g := mustGraph(t, UniformLayout(c.nodes, c.perNode, 2, BalancedTree))
		_, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Algo: OneShot, Proto: Simple, Count: c.count, DType: Float32, Op: Sum})
		if !errors.Is(err, ErrAlgoNotSupported) {
			t.Errorf("%d nodes of %d, %d floats: err %v, want ErrAlgoNotSupported", c.nodes, c.perNode, c.count, err)
		}
	}
	g := mustGraph(t, UniformLayout(1, 4, 2, BalancedTree))
	if _, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Algo: OneShot, Proto: Simple, Count: OneShotMaxBytes / 4, DType: Float32, Op: Sum}); err != nil {
		t.Errorf("at the limit: %v", err)
	}
	if _, err := BuildPlan(g, PlanRequest{Coll: AllGather, Algo: OneShot, Proto: Simple, Count: 4, DType: Float32}); !errors.Is(err, ErrAlgoNotSupported) {
		t.Errorf("allgather: err %v, want ErrAlgoNotSupported", err)
	}
	topo := CostTopo{NRanks: 4, NNodes: 1, RanksPerNode: 4, Intra: Shm, Inter: TCP, Channels: 1}
	if _, err := DefaultTuning().Predict(AllReduce, OneShot, Simple, topo, OneShotMaxBytes+1, 0); !errors.Is(err, ErrAlgoNotSupported) {
		t.Errorf("prediction above the limit: err %v, want ErrAlgoNotSupported", err)
	}
}

// A fold position outside 0..len(RecvFrom), or on a step that does not
// reduce, is a plan error.
func TestSrcAtChecked(t *testing.T) {
	p := oneShotPlan(t, 3, 5, Int32)
	p.Ranks[1].Channels[0].Streams[0][1].SrcAt = 3
	if err := CheckPlan(p); err == nil {
		t.Error("SrcAt 3 of 2 messages passed the check")
	}
	p = oneShotPlan(t, 3, 5, Int32)
	p.Ranks[1].Channels[0].Streams[0][0].SrcAt = 1
	if err := CheckPlan(p); err == nil {
		t.Error("SrcAt on a Send passed the check")
	}
}
