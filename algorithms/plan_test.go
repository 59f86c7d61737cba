package algorithms

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updatePlans = flag.Bool("update", false, "rewrite the golden plans under testdata/plans/")

type goldenPlan struct {
	name    string
	layout  Layout
	req     PlanRequest
	comment string
}

func goldenPlans() []goldenPlan {
	i32 := func(c Collective, a Algorithm, count int64) PlanRequest {
		return PlanRequest{Coll: c, Algo: a, Proto: Simple, Count: count, DType: Int32, Op: Sum, ChunkBytes: 16}
	}
	bcast := i32(Broadcast, Ring, 9)
	bcast.Root = 2
	red := i32(Reduce, Ring, 9)
	red.Root = 1
	twoCh := i32(AllReduce, Ring, 1100)
	twoCh.Channels, twoCh.KeepChannels, twoCh.DType, twoCh.ChunkBytes = 2, true, Int8, 128
	treeMany := i32(AllReduce, Tree, 1100)
	treeMany.Channels, treeMany.KeepChannels, treeMany.DType, treeMany.ChunkBytes = 2, true, Int8, 256
	return []goldenPlan{
		{"allreduce_ring_1x4", UniformLayout(1, 4, 1, TreePattern), i32(AllReduce, Ring, 10), "one node of 4 ranks; the last loop's chunks shrink, chunk 3 is empty"},
		{"allreduce_ring_3x1_2ch", UniformLayout(3, 1, 2, TreePattern), twoCh, "two channels of 1100/2 int8 (at least 512 bytes each); chunk 128: two ring loops, the second with chunks of 128, 32 and 0 elements on channel 0"},
		{"allreduce_tree_4x1", UniformLayout(4, 1, 1, TreePattern), i32(AllReduce, Tree, 9), "tree0 0->2->{1,3}"},
		{"allreduce_tree_4x1_2ch", UniformLayout(4, 1, 1, TreePattern), treeMany, "channel 0 runs tree0 0->2->{1,3}, channel 1 tree1 3->1->{2,0}"},
		{"allreduce_tree_2x2_balanced", UniformLayout(2, 2, 1, BalancedTree), i32(AllReduce, Tree, 8), "chains 0->1 and 2->3; node 1 hangs off rank 0"},
		{"allreduce_tree_4x2_treepattern", UniformLayout(4, 2, 1, TreePattern), i32(AllReduce, Tree, 4), "rank 4 has three children: its chain child 5 and the heads 2 and 6 of nodes 1 and 3"},
		{"broadcast_ring_1x4_root2", UniformLayout(1, 4, 1, TreePattern), bcast, ""},
		{"reduce_ring_1x4_root1", UniformLayout(1, 4, 1, TreePattern), red, ""},
		{"allgather_ring_1x3", UniformLayout(1, 3, 1, TreePattern), i32(AllGather, Ring, 5), "rank r's block at r*5 of the output"},
		{"reducescatter_ring_1x3", UniformLayout(1, 3, 1, TreePattern), i32(ReduceScatter, Ring, 5), "rank r's result is the reduction of every input's block r"},
		{"allreduce_ring_1rank", UniformLayout(1, 1, 1, TreePattern), i32(AllReduce, Ring, 7), "one rank: a copy"},
		{"allreduce_tree_zero", UniformLayout(2, 1, 1, TreePattern), i32(AllReduce, Tree, 0), "zero elements: no steps"},
		{"allreduce_oneshot_1x3", UniformLayout(1, 3, 1, TreePattern), i32(AllReduce, OneShot, 5), "every rank sends its input to the others and folds all three in rank order, its own at position r"},
		{"allgather_hd_1x4", UniformLayout(1, 4, 1, TreePattern), i32(AllGather, HalvingDoubling, 5), "the reduce-scatter backwards: the own block to both partners, the neighbour's block forwarded to the partner two away"},
		{"reducescatter_hd_1x4", UniformLayout(1, 4, 1, TreePattern), i32(ReduceScatter, HalvingDoubling, 5), "each block reduced on its way to its owner along a binomial tree, the blocks in hdUnitOrder"},
		{"allgather_hd_1x5", UniformLayout(1, 5, 1, TreePattern), i32(AllGather, HalvingDoubling, 3), "Bruck's order: each rank sends to the ranks 1, 2, 4 positions before it and receives from those after it"},
		{"reducescatter_hd_1x5", UniformLayout(1, 5, 1, TreePattern), i32(ReduceScatter, HalvingDoubling, 3), "Bruck's order backwards: each block reduced on its way to its owner, the blocks in hdUnitOrder(8) without 5, 6, 7"},
	}
}

func TestGoldenPlans(t *testing.T) {
	for _, gp := range goldenPlans() {
		g := mustGraph(t, gp.layout)
		p, err := BuildPlan(g, gp.req)
		if err != nil {
			t.Fatalf("%s: %v", gp.name, err)
		}
		if err := CheckPlan(p); err != nil {
			t.Fatalf("%s: %v", gp.name, err)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "# %s\n", gp.name)
		if gp.comment != "" {
			fmt.Fprintf(&b, "# %s\n", gp.comment)
		}
		fmt.Fprintf(&b, "# graph nranks=%d nodes=%d channels=%d pattern=%v chunkbytes=%d\n", g.NRanks, g.NNodes, g.Channels, gp.layout.Pattern, gp.req.ChunkBytes)
		b.WriteString(p.String())
		got := b.String()
		path := filepath.Join("testdata", "plans", gp.name+".txt")
		if *updatePlans {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (run go test -run TestGoldenPlans -update)", gp.name, err)
		}
		if got != string(want) {
			t.Errorf("%s: plan differs from %s (run with -update and review the diff):\n%s", gp.name, path, got)
		}
	}
}

// Hand-written expectations for the step sequences, independent of the
// golden files.
func TestRingAllReduceStepOrder(t *testing.T) {
	g := mustGraph(t, UniformLayout(1, 5, 1, TreePattern))
	p, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Algo: Ring, Proto: Simple, Count: 20, DType: Int32, ChunkBytes: 16})
	if err != nil {
		t.Fatal(err)
	}
	// One loop of 5 chunks of 4 elements; rank 2 sits at ring index 2.
	want := []string{
		"Send               to 3 src in[4] n=4",
		"RecvReduceSend     from 1 to 3 src in[0] n=4",
		"RecvReduceSend     from 1 to 3 src in[16] n=4",
		"RecvReduceSend     from 1 to 3 src in[12] n=4",
		"RecvReduceCopySend from 1 to 3 src in[8] dst out[8] n=4",
		"RecvCopySend       from 1 to 3 dst out[4] n=4",
		"RecvCopySend       from 1 to 3 dst out[0] n=4",
		"RecvCopySend       from 1 to 3 dst out[16] n=4",
		"Recv               from 1 dst out[12] n=4",
	}
	steps := p.Ranks[2].Channels[0].Streams[0]
	if len(steps) != len(want) {
		t.Fatalf("%d steps, want %d:\n%v", len(steps), len(want), p)
	}
	for i, s := range steps {
		if s.String() != want[i] {
			t.Errorf("step %d: %q, want %q", i, s.String(), want[i])
		}
	}
	// Per-rank traffic of ring allreduce: 2(n-1)/n of the buffer each way.
	st := p.Stats(2)
	if st.Sent != 2*4*4 || st.Received != 2*4*4 || st.Reduced != 4*4 {
		t.Errorf("stats %+v", st)
	}
}

func TestTreeAllReduceStreams(t *testing.T) {
	// 3 nodes of 2, TreePattern: rank 4 (head of node 2) has children 5
	// (chain) and 2 (node 1's head), parent 0.
	g := mustGraph(t, UniformLayout(3, 2, 1, TreePattern))
	const (
		root = "RecvReduceCopySend from 1,4 to 1,4 src in[0] dst out[0] n=4"
		up4  = "RecvReduceSend     from 5,2 to 0 src in[0] n=4"
		dn4  = "RecvCopySend       from 0 to 5,2 dst out[0] n=4"
		up3  = "Send               to 2 src in[0] n=4"
		dn3  = "Recv               from 2 dst out[0] n=4"
	)
	// The way down gets a stream of its own unless the channel's slice
	// (4 int32, 16 bytes) fits in one of the executor's fragments.
	for _, tc := range []struct {
		frag int64
		want map[int][]string
	}{
		{0, map[int][]string{0: {root}, 4: {up4, dn4}, 3: {up3, dn3}}},
		{15, map[int][]string{0: {root}, 4: {up4, dn4}, 3: {up3, dn3}}},
		{16, map[int][]string{0: {root}, 4: {up4 + "; " + dn4}, 3: {up3 + "; " + dn3}}},
		{1 << 17, map[int][]string{0: {root}, 4: {up4 + "; " + dn4}, 3: {up3 + "; " + dn3}}},
	} {
		p, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Algo: Tree, Proto: Simple, Count: 4, DType: Int32, ChunkBytes: 16, FragmentBytes: tc.frag})
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckPlan(p); err != nil {
			t.Errorf("fragment %d: %v", tc.frag, err)
		}
		for r, want := range tc.want {
			var got []string
			for _, s := range p.Ranks[r].Channels[0].Streams {
				var ss []string
				for _, x := range s {
					ss = append(ss, x.String())
				}
				got = append(got, strings.Join(ss, "; "))
			}
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("fragment %d, rank %d: %q, want %q", tc.frag, r, got, want)
			}
		}
	}
}

func TestBuildPlanErrors(t *testing.T) {
	g := mustGraph(t, UniformLayout(2, 2, 1, BalancedTree))
	ok := PlanRequest{Coll: AllReduce, Algo: Ring, Proto: Simple, Count: 4, DType: Int32, Op: Sum}
	cases := []struct {
		mod  func(*PlanRequest)
		want error
		text string
	}{
		{func(r *PlanRequest) { r.Coll, r.Algo = Broadcast, Tree }, ErrAlgoNotSupported, "broadcast"},
		{func(r *PlanRequest) { r.Count = -1 }, ErrBadRequest, "negative count"},
		{func(r *PlanRequest) { r.Coll, r.Root = Reduce, 4 }, ErrBadRequest, "root 4"},
		{func(r *PlanRequest) { r.Channels = 3 }, ErrBadRequest, "3 channels"},
		{func(r *PlanRequest) { r.Op, r.DType = BAnd, Float32 }, ErrBadRequest, "band"},
		{func(r *PlanRequest) { r.DType = 99 }, ErrBadRequest, "dtype"},
		{func(r *PlanRequest) { r.Proto = 7 }, ErrBadRequest, "protocol"},
		{func(r *PlanRequest) { r.ChunkBytes = -5 }, ErrBadRequest, "chunk"},
	}
	for _, c := range cases {
		req := ok
		c.mod(&req)
		_, err := BuildPlan(g, req)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%+v: %v, want %v containing %q", req, err, c.want, c.text)
		}
	}
	if _, err := BuildPlan(nil, ok); !errors.Is(err, ErrBadRequest) {
		t.Errorf("nil graph: %v", err)
	}
	// Broadcast ignores the op (even an invalid pairing).
	b := ok
	b.Coll, b.Op, b.DType = Broadcast, BAnd, Float32
	if _, err := BuildPlan(g, b); err != nil {
		t.Errorf("broadcast with a float dtype: %v", err)
	}
}

func TestBuildPlanHugeCount(t *testing.T) {
	g := mustGraph(t, UniformLayout(2, 1, 2, TreePattern))
	for _, algo := range []Algorithm{Ring, Tree} {
		count := int64(1<<31 + 7)
		p, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Algo: algo, Proto: Simple, Count: count, DType: Int8})
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckPlan(p); err != nil {
			t.Fatal(err)
		}
		// Every element is written exactly once on every rank.
		for r := range p.Ranks {
			if w := p.Stats(r).Written; w != count {
				t.Errorf("%v rank %d writes %d elements, want %d", algo, r, w, count)
			}
		}
	}
}

func TestZeroCountPlansHaveNoSteps(t *testing.T) {
	g := mustGraph(t, UniformLayout(3, 2, 2, SplitTree))
	for coll := AllReduce; coll <= ReduceScatter; coll++ {
		p, err := BuildPlan(g, PlanRequest{Coll: coll, Algo: Ring, Proto: LL, DType: Float32})
		if err != nil {
			t.Fatal(err)
		}
		for r := range p.Ranks {
			if len(p.Ranks[r].Channels) != 0 {
				t.Errorf("%v: rank %d has steps for 0 elements", coll, r)
			}
		}
		if err := CheckPlan(p); err != nil {
			t.Error(err)
		}
	}
}

// A graph read from a log has no RingOrder and NCCL's depth estimates; a
// graph with a broken tree is refused.
func TestBuildPlanOnForeignGraphs(t *testing.T) {
	g := mustGraph(t, UniformLayout(2, 2, 1, BalancedTree))
	g.RingOrder = nil
	for c := range g.Trees {
		for r := range g.Trees[c] {
			g.Trees[c][r].Depth = 7
		}
	}
	for _, algo := range []Algorithm{Ring, Tree} {
		p, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Algo: algo, Proto: Simple, Count: 100, DType: Int32})
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckPlan(p); err != nil {
			t.Fatal(err)
		}
	}
	g.Trees[0][3].Up = 9
	if _, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Algo: Tree, Proto: Simple, Count: 100, DType: Int32}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("broken tree: %v", err)
	}
	g.Rings[0][1].Next = 1
	if _, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Algo: Ring, Proto: Simple, Count: 100, DType: Int32}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("broken ring: %v", err)
	}
}

// The byte table of docs/algorithms.md, checked with Plan.Stats on plans
// whose chunks divide evenly.
func TestStatsMatchDocs(t *testing.T) {
	const n, S = 5, 40 // S elements: buffer (or block), divisible by n
	g := mustGraph(t, UniformLayout(1, n, 1, TreePattern))
	type row struct{ sent, recv, read, written, reduced int64 }
	check := func(name string, p *Plan, r int, w row) {
		t.Helper()
		st := p.Stats(r)
		got := row{st.Sent, st.Received, st.ReadLocal, st.Written, st.Reduced}
		if got != w {
			t.Errorf("%s rank %d: %+v, want %+v", name, r, got, w)
		}
	}
	plan := func(c Collective, a Algorithm, root int) *Plan {
		p, err := BuildPlan(g, PlanRequest{Coll: c, Algo: a, Proto: Simple, Count: S, DType: Int32, Root: root, ChunkBytes: 32})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := plan(AllReduce, Ring, 0)
	for r := 0; r < n; r++ {
		check("ring allreduce", p, r, row{2 * (n - 1) * S / n, 2 * (n - 1) * S / n, S, S, (n - 1) * S / n})
	}
	p = plan(Broadcast, Ring, 1)
	check("broadcast root", p, 1, row{S, 0, 2 * S, S, 0})
	check("broadcast middle", p, 2, row{S, S, 0, S, 0})
	check("broadcast last", p, 0, row{0, S, 0, S, 0})
	p = plan(Reduce, Ring, 1)
	check("reduce first", p, 2, row{S, 0, S, 0, 0})
	check("reduce middle", p, 3, row{S, S, S, 0, S})
	check("reduce root", p, 1, row{0, S, S, S, S})
	p = plan(AllGather, Ring, 0)
	check("allgather", p, 3, row{(n - 1) * S, (n - 1) * S, 2 * S, n * S, 0})
	p = plan(ReduceScatter, Ring, 0)
	check("reducescatter", p, 3, row{(n - 1) * S, (n - 1) * S, n * S, S, (n - 1) * S})
	// Halving-doubling (a power of two ranks) and Bruck's order (5, 6): the
	// ring's counts.
	for _, n := range []int64{4, 5, 6} {
		gh := mustGraph(t, UniformLayout(1, int(n), 1, TreePattern))
		for _, c := range []Collective{AllGather, ReduceScatter} {
			p, err := BuildPlan(gh, PlanRequest{Coll: c, Algo: HalvingDoubling, Proto: Simple, Count: S, DType: Int32, ChunkBytes: 32})
			if err != nil {
				t.Fatal(err)
			}
			want := row{(n - 1) * S, (n - 1) * S, 2 * S, n * S, 0}
			if c == ReduceScatter {
				want = row{(n - 1) * S, (n - 1) * S, n * S, S, (n - 1) * S}
			}
			for r := 0; r < int(n); r++ {
				check(fmt.Sprintf("hd %v n=%d", c, n), p, r, want)
			}
		}
	}
	// Tree: 4 nodes of 2, TreePattern: rank 4 has 3 children, rank 0 (root)
	// 2, rank 1 is a leaf.
	g = mustGraph(t, UniformLayout(4, 2, 1, TreePattern))
	p, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Algo: Tree, Proto: Simple, Count: S, DType: Int32, ChunkBytes: 32})
	if err != nil {
		t.Fatal(err)
	}
	check("tree interior k=3", p, 4, row{4 * S, 4 * S, S, S, 3 * S})
	check("tree root k=2", p, 0, row{2 * S, 2 * S, S, S, 2 * S})
	check("tree leaf", p, 1, row{S, S, S, S, 0})
}
