package algorithms

import (
	"math"
	"testing"
)

// TestSimulatePlanHand checks a 2-rank ring allreduce of 8000 bytes
// against a timeline worked out by hand: regions of 1024 and 976 floats
// (4096 and 3904 bytes), 1 µs latency, 1 GB/s (1000 bytes per µs).
//
//	r0 Send 3904 B       0 -> leaves 3.904, arrives 4.904
//	r1 Send 4096 B       0 -> leaves 4.096, arrives 5.096
//	r1 RecvReduceCopySend at 4.904, sends 3904 B -> leaves 8.808, arrives 9.808
//	r0 RecvReduceCopySend at 5.096, sends 4096 B -> leaves 9.192, arrives 10.192
//	r0 Recv done 9.808, r1 Recv done 10.192; plus 5 µs base.
func TestSimulatePlanHand(t *testing.T) {
	g, err := BuildGraph(UniformLayout(1, 2, 1, BalancedTree))
	if err != nil {
		t.Fatal(err)
	}
	p, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Algo: Ring, Proto: Simple, Count: 2000, DType: Float32, Op: Sum, Channels: 1})
	if err != nil {
		t.Fatal(err)
	}
	r, err := SimulatePlan(p, g.NodeOf, SimLinks{BaseUs: 5, IntraLatUs: 1, IntraGBps: 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := 5 + 10.192; math.Abs(r.TimeUs-want) > 1e-9 {
		t.Errorf("time %.6f us, want %.6f", r.TimeUs, want)
	}
	if r.Steps != 6 || r.Messages != 4 {
		t.Errorf("%d steps, %d messages; want 6 and 4", r.Steps, r.Messages)
	}
}

// TestSimulateTreeChainHand: a chain 0 <- 1 <- 2 (one node of 3), one
// chunk of 1000 bytes, latency 1 µs, links and engines 1 GB/s (1 µs per
// chunk). Receiving takes the engine too:
//
//	2 sends [0,1], arrives at 1 at 2; 1 takes it in [2,3], sends [3,4],
//	arrives at 0 at 5; 0 takes it in [5,6], sends [6,7], arrives at 1 at 8;
//	1 takes it in [8,9], sends [9,10], arrives at 2 at 11; 2 takes it in
//	[11,12]: 12 µs.
func TestSimulateTreeChainHand(t *testing.T) {
	g, err := BuildGraph(UniformLayout(1, 3, 1, BalancedTree))
	if err != nil {
		t.Fatal(err)
	}
	p, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Algo: Tree, Proto: Simple, Count: 250, DType: Float32, Op: Sum, Channels: 1})
	if err != nil {
		t.Fatal(err)
	}
	r, err := SimulatePlan(p, g.NodeOf, SimLinks{IntraLatUs: 1, IntraGBps: 1, EngineGBps: 1})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(r.TimeUs-12) > 1e-9 {
		t.Errorf("time %.6f us, want 12", r.TimeUs)
	}
}

func TestSimulateDeterministic(t *testing.T) {
	cfg := SimConfig{Nodes: 4, RanksPerNode: 4, Channels: 2, Proto: Simple,
		Links: SimLinksFromTuning(DefaultTuning(), NVLink, Net, 4, Ring, Simple, 4, 50)}
	a, err := Simulate(cfg, AllReduce, Tree, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		b, err := Simulate(cfg, AllReduce, Tree, 8<<20)
		if err != nil || b != a {
			t.Fatalf("run %d: %+v %v, first %+v", i, b, err, a)
		}
	}
}

// TestSimulateScaledAgreesWithExact compares the reduced models with the
// exact simulation of the real plan where both are feasible.
func TestSimulateScaledAgreesWithExact(t *testing.T) {
	for _, tc := range []struct {
		nodes, per int
		algo       Algorithm
		bytes      int64
		tol        float64
	}{
		{8, 4, Ring, 1 << 20, 0.05},
		{8, 4, Ring, 4 << 10, 0.05},
		{16, 2, Ring, 16 << 20, 0.05},
		{16, 4, Tree, 4 << 20, 0.10},
		{15, 2, Tree, 1 << 20, 0.10},
		{8, 8, Tree, 64 << 10, 0.10},
	} {
		l := SimLinksFromTuning(DefaultTuning(), NVLink, Net, tc.per, tc.algo, Simple, 4, 50)
		cfg := SimConfig{Nodes: tc.nodes, RanksPerNode: tc.per, Channels: 2, Proto: Simple, Links: l, MaxExactSteps: 1 << 40}
		exact, err := Simulate(cfg, AllReduce, tc.algo, tc.bytes)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxExactSteps = 1
		scaled, err := Simulate(cfg, AllReduce, tc.algo, tc.bytes)
		if err != nil {
			t.Fatal(err)
		}
		if d := math.Abs(scaled.TimeUs/exact.TimeUs - 1); d > tc.tol {
			t.Errorf("%d×%d %v %d B: scaled %.1f us (%s), exact %.1f us (%s): %.1f%% apart",
				tc.nodes, tc.per, tc.algo, tc.bytes, scaled.TimeUs, scaled.Method, exact.TimeUs, exact.Method, 100*d)
		} else {
			t.Logf("%d×%d %v %d B: scaled %.1f us, exact %.1f us", tc.nodes, tc.per, tc.algo, tc.bytes, scaled.TimeUs, exact.TimeUs)
		}
	}
}
