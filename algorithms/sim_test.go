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

// simPair is a plan in which rank 0 sends msgs messages of bytes each to
// rank 1 on channel 0 (uint8 elements).
func simPair(msgs int, bytes int64) *Plan {
	p := &Plan{Coll: AllReduce, Algo: Ring, Proto: Simple, NRanks: 2, DType: Uint8, Channels: 1, Ranks: make([]RankPlan, 2)}
	var send, recv Stream
	for i := 0; i < msgs; i++ {
		send = append(send, Step{Prim: Send, SendTo: []int{1}, Count: bytes})
		recv = append(recv, Step{Prim: Recv, RecvFrom: []int{0}, Count: bytes})
	}
	p.Ranks[0] = RankPlan{Rank: 0, Channels: []ChannelPlan{{Channel: 0, Streams: []Stream{send}}}}
	p.Ranks[1] = RankPlan{Rank: 1, Channels: []ChannelPlan{{Channel: 0, Streams: []Stream{recv}}}}
	return p
}

// TestSimTokenBucket: a NIC of 1000 B/µs with a 1000-byte bucket (tc tbf).
// Call 1 (full bucket): 1000 of the 3000 bytes pass at once, 2000 take
// 2 µs, plus 1 µs latency: 3 µs. Call 2 starts on an empty bucket: 3 µs of
// sending, 3 µs. With 1.5 wire bytes per byte, call 1 sends 4500 wire
// bytes: 3.5 + 1 µs.
func TestSimTokenBucket(t *testing.T) {
	l := SimLinks{InterLatUs: 1, NICGBps: 1, NICBurstBytes: 1000}
	p := simPair(1, 3000)
	times, err := SimulatePlans([]*Plan{p, p}, []int{0, 1}, l)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(times[0]-3) > 1e-9 || math.Abs(times[1]-3) > 1e-9 {
		t.Errorf("times %v, want [3 3]", times)
	}
	l.WireFactor = 1.5
	times, err = SimulatePlans([]*Plan{p}, []int{0, 1}, l)
	if err != nil || math.Abs(times[0]-4.5) > 1e-9 {
		t.Errorf("with wire factor 1.5: %v %v, want 4.5", times, err)
	}
	// Without a bucket the NIC is a plain rate: 3 + 1 µs.
	r, err := SimulatePlan(p, []int{0, 1}, SimLinks{InterLatUs: 1, NICGBps: 1})
	if err != nil || math.Abs(r.TimeUs-4) > 1e-9 {
		t.Errorf("plain rate: %v %v, want 4", r.TimeUs, err)
	}
}

// TestSimWindow: four 1000-byte messages over a 1 GB/s connection with
// 5 µs latency. Holding the sender until its data has left, or a window
// that never closes: they leave at 1, 2, 3, 4 and the last arrives at 9.
// A 2000-byte window: messages 3 and 4 enter only when the receiver has
// taken 1 (at 6) and 2 (at 7): the last arrives at 7 + 1 + 5 = 13.
func TestSimWindow(t *testing.T) {
	p := simPair(4, 1000)
	for _, tc := range []struct {
		window int64
		want   float64
	}{{0, 9}, {1 << 40, 9}, {2000, 13}} {
		r, err := SimulatePlan(p, []int{0, 1}, SimLinks{InterLatUs: 5, InterGBps: 1, WindowBytes: tc.window})
		if err != nil || math.Abs(r.TimeUs-tc.want) > 1e-9 {
			t.Errorf("window %d: %v %v, want %v", tc.window, r.TimeUs, err, tc.want)
		}
	}
}

// TestSimHostCores: ranks 0 and 2 each send one message to 1 and 3 (four
// nodes on one host), 10 µs of processor time per message at each end,
// nothing else. Two cores: both sends [0,10], both receives [10,20]. One
// core: the four pieces of work one after another, 40 µs. Two cores and
// a network that carries one message at a time (SerialNet): also 40 µs,
// though the cores would overlap; a single message (only the pair 0, 1)
// takes 20 µs with or without it.
func TestSimHostCores(t *testing.T) {
	p := &Plan{Coll: AllReduce, Algo: Ring, Proto: Simple, NRanks: 4, DType: Uint8, Channels: 1, Ranks: make([]RankPlan, 4)}
	for _, pair := range [][2]int{{0, 1}, {2, 3}} {
		p.Ranks[pair[0]] = RankPlan{Rank: pair[0], Channels: []ChannelPlan{{Channel: 0, Streams: []Stream{{{Prim: Send, SendTo: []int{pair[1]}, Count: 8}}}}}}
		p.Ranks[pair[1]] = RankPlan{Rank: pair[1], Channels: []ChannelPlan{{Channel: 0, Streams: []Stream{{{Prim: Recv, RecvFrom: []int{pair[0]}, Count: 8}}}}}}
	}
	for cores, want := range map[int]float64{1: 40, 2: 20} {
		r, err := SimulatePlan(p, []int{0, 1, 2, 3}, SimLinks{WindowBytes: 1 << 20, MsgCPUUs: 10, HostCores: cores})
		if err != nil || math.Abs(r.TimeUs-want) > 1e-9 {
			t.Errorf("%d cores: %v %v, want %v", cores, r.TimeUs, err, want)
		}
	}
	r, err := SimulatePlan(p, []int{0, 1, 2, 3}, SimLinks{WindowBytes: 1 << 20, MsgCPUUs: 10, HostCores: 2, SerialNet: true})
	if err != nil || math.Abs(r.TimeUs-40) > 1e-9 {
		t.Errorf("2 cores, serial network: %v %v, want 40", r.TimeUs, err)
	}
	one := &Plan{Coll: AllReduce, Algo: Ring, Proto: Simple, NRanks: 2, DType: Uint8, Channels: 1, Ranks: p.Ranks[:2]}
	for _, serial := range []bool{false, true} {
		r, err := SimulatePlan(one, []int{0, 1}, SimLinks{WindowBytes: 1 << 20, MsgCPUUs: 10, HostCores: 2, SerialNet: serial})
		if err != nil || math.Abs(r.TimeUs-20) > 1e-9 {
			t.Errorf("one message, serial network %v: %v %v, want 20", serial, r.TimeUs, err)
		}
	}
}

// TestSimOversub: the same two messages (0 -> 1, 2 -> 3) on four nodes,
// 10 µs per message at each end, two cores: 20 µs; with OversubUs 3 every
// message arrives 3 µs later for each of the two nodes beyond the cores:
// 26. Three cores: one node beyond, 23; four cores, or no HostCores: none.
func TestSimOversub(t *testing.T) {
	p := &Plan{Coll: AllReduce, Algo: Ring, Proto: Simple, NRanks: 4, DType: Uint8, Channels: 1, Ranks: make([]RankPlan, 4)}
	for _, pair := range [][2]int{{0, 1}, {2, 3}} {
		p.Ranks[pair[0]] = RankPlan{Rank: pair[0], Channels: []ChannelPlan{{Channel: 0, Streams: []Stream{{{Prim: Send, SendTo: []int{pair[1]}, Count: 8}}}}}}
		p.Ranks[pair[1]] = RankPlan{Rank: pair[1], Channels: []ChannelPlan{{Channel: 0, Streams: []Stream{{{Prim: Recv, RecvFrom: []int{pair[0]}, Count: 8}}}}}}
	}
	for _, c := range []struct {
		cores int
		want  float64
	}{{2, 26}, {3, 23}, {4, 20}} {
		r, err := SimulatePlan(p, []int{0, 1, 2, 3}, SimLinks{WindowBytes: 1 << 20, MsgCPUUs: 10, HostCores: c.cores, OversubUs: 3})
		if err != nil || math.Abs(r.TimeUs-c.want) > 1e-9 {
			t.Errorf("%d cores: %v %v, want %v", c.cores, r.TimeUs, err, c.want)
		}
	}
	r, err := SimulatePlan(p, []int{0, 1, 2, 3}, SimLinks{WindowBytes: 1 << 20, MsgCPUUs: 10, InterLatUs: 1, OversubUs: 3})
	if err != nil || math.Abs(r.TimeUs-21) > 1e-9 {
		t.Errorf("a CPU per node: %v %v, want 21 (OversubUs needs HostCores)", r.TimeUs, err)
	}
}

// TestSimFragments: the chain 0 <- 1 <- 2 (one node of 3) with one chunk
// of 4000 bytes, 1 GB/s connections, no latency. Whole steps: up 2->1
// [0,4], 1->0 [4,8], down 0->1 [8,12], 1->2 [12,16]. Fragments of 1000
// bytes flow through as they arrive: the last fragment leaves 2 at 4 and
// crosses three more connections one fragment-time apart: 7 µs.
func TestSimFragments(t *testing.T) {
	g, err := BuildGraph(UniformLayout(1, 3, 1, BalancedTree))
	if err != nil {
		t.Fatal(err)
	}
	p, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Algo: Tree, Proto: Simple, Count: 1000, DType: Float32, Op: Sum, Channels: 1, ChunkBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	for frag, want := range map[int64]float64{0: 16, 1000: 7} {
		r, err := SimulatePlan(p, g.NodeOf, SimLinks{IntraGBps: 1, FragBytes: frag})
		if err != nil || math.Abs(r.TimeUs-want) > 1e-9 {
			t.Errorf("fragment %d: %v %v, want %v", frag, r.TimeUs, err, want)
		}
	}
}

// TestSimulatePlansBase: every rank starts its next call BaseUs after its
// own previous one ends. Call 1: rank 0 sends [2,3], rank 1 receives at 4
// (1 µs latency): 4 µs. Call 2: rank 0 starts at 5, sends [5,6]; rank 1
// starts at 6 and receives at 7: both took 3 µs since their last call.
func TestSimulatePlansBase(t *testing.T) {
	p := simPair(1, 1000)
	times, err := SimulatePlans([]*Plan{p, p, p}, []int{0, 1}, SimLinks{BaseUs: 2, InterLatUs: 1, InterGBps: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{4, 3, 3}
	for i := range want {
		if math.Abs(times[i]-want[i]) > 1e-9 {
			t.Errorf("times %v, want %v", times, want)
			break
		}
	}
}
