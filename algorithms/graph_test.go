package algorithms

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func tl(up int, downs ...int) TreeLinks {
	t := TreeLinks{Up: up, Down: [3]int{-1, -1, -1}}
	copy(t.Down[:], downs)
	return t
}

// checkLinks compares the Up and Down of some ranks of channel c.
func checkLinks(t *testing.T, g *Graph, c int, want map[int]TreeLinks) {
	t.Helper()
	for r, w := range want {
		got := g.Trees[c][r]
		if got.Up != w.Up || got.Down != w.Down {
			t.Errorf("channel %d rank %d: up %d down %v, want up %d down %v", c, r, got.Up, got.Down, w.Up, w.Down)
		}
	}
}

func mustGraph(t *testing.T, l Layout) *Graph {
	t.Helper()
	g, err := BuildGraph(l)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Check(); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestGraphSingleNodeChains(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		for p := BalancedTree; p <= RingPattern; p++ {
			g := mustGraph(t, UniformLayout(1, n, 2, p))
			if g.Channels != 4 || g.NNodes != 1 {
				t.Fatalf("n=%d: %d channels %d nodes", n, g.Channels, g.NNodes)
			}
			for c := 0; c < g.Channels; c++ {
				if g.TreeHeight(c) != n-1 || g.TreeRoot(c) != 0 {
					t.Errorf("n=%d %v channel %d: height %d root %d, want chain of depth %d from 0", n, p, c, g.TreeHeight(c), g.TreeRoot(c), n-1)
				}
				for r := 0; r < n; r++ {
					want := tl(r-1, r+1)
					if r == n-1 {
						want = tl(r - 1)
					}
					if r == 0 {
						want.Up = -1
					}
					checkLinks(t, g, c, map[int]TreeLinks{r: want})
					if g.Trees[c][r].Depth != r {
						t.Errorf("n=%d rank %d depth %d", n, r, g.Trees[c][r].Depth)
					}
					if g.Rings[c][r] != (RingLinks{(r - 1 + n) % n, (r + 1) % n}) {
						t.Errorf("n=%d rank %d ring %+v", n, r, g.Rings[c][r])
					}
				}
			}
		}
	}
	// A permuted chain follows the intra order.
	g := mustGraph(t, Layout{NodeOf: []int{5, 5, 5}, Channels: 1, Pattern: TreePattern, Intra: [][][]int{{{2, 0, 1}}}})
	checkLinks(t, g, 0, map[int]TreeLinks{2: tl(-1, 0), 0: tl(2, 1), 1: tl(0)})
	checkLinks(t, g, 1, map[int]TreeLinks{2: tl(-1, 0), 0: tl(2, 1), 1: tl(0)})
	if got := g.RingOrder[0]; !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("ring order %v", got)
	}
	if g.Rings[0][2].Next != 0 || g.Rings[0][1].Next != 2 {
		t.Errorf("rings %+v", g.Rings[0])
	}
}

func TestGraphFourNodesOneRank(t *testing.T) {
	g := mustGraph(t, UniformLayout(4, 1, 1, BalancedTree))
	// tree0: 0 -> 2 -> {1,3}; tree1: 3 -> 1 -> {2,0}. Inside ncclTree the
	// root's child takes the first free slot.
	checkLinks(t, g, 0, map[int]TreeLinks{0: tl(-1, 2), 2: tl(0, 1, 3), 1: tl(2), 3: tl(2)})
	checkLinks(t, g, 1, map[int]TreeLinks{3: tl(-1, 1), 1: tl(3, 2, 0), 2: tl(1), 0: tl(1)})
	if !slices.Equal(g.RingOrder[0], []int{0, 1, 2, 3}) || !slices.Equal(g.RingOrder[1], []int{0, 1, 2, 3}) {
		t.Errorf("ring orders %v", g.RingOrder)
	}
}

// Hand-computed from connect.cc's rules: 4 nodes of 2 ranks (node k holds
// 2k, 2k+1); tree0 over nodes is 0 -> 2 -> {1 (slot 0), 3 (slot 1)}.
func TestGraphPatterns(t *testing.T) {
	cases := []struct {
		p    Pattern
		want map[int]TreeLinks
	}{
		{BalancedTree, map[int]TreeLinks{0: tl(-1, 1, 4), 4: tl(0, 5, 6), 5: tl(4, 2), 2: tl(5, 3), 6: tl(4, 7), 1: tl(0)}},
		{TreePattern, map[int]TreeLinks{0: tl(-1, 1, 4), 4: tl(0, 5, 2, 6), 5: tl(4), 2: tl(4, 3), 6: tl(4, 7)}},
		{SplitTree, map[int]TreeLinks{0: tl(-1, 1), 1: tl(0, 4), 4: tl(1, 5), 5: tl(4, 2, 6), 2: tl(5, 3), 6: tl(5, 7)}},
		{RingPattern, map[int]TreeLinks{0: tl(-1, 1, 4), 4: tl(0, 5, 6), 5: tl(4, 2), 2: tl(5, 3), 6: tl(4, 7)}},
	}
	for _, c := range cases {
		g := mustGraph(t, UniformLayout(4, 2, 1, c.p))
		checkLinks(t, g, 0, c.want)
	}
	// 2 nodes of 2, tree1 (mirror): node 1 is the root, node 0 its child in
	// slot 1.
	g := mustGraph(t, UniformLayout(2, 2, 1, BalancedTree))
	checkLinks(t, g, 1, map[int]TreeLinks{2: tl(-1, 3, 0), 0: tl(2, 1), 1: tl(0), 3: tl(2)})
	g = mustGraph(t, UniformLayout(2, 2, 1, SplitTree))
	checkLinks(t, g, 1, map[int]TreeLinks{2: tl(-1, 3), 3: tl(2, 0), 0: tl(3, 1)})
}

func TestGraphUnevenNodes(t *testing.T) {
	// Labels 7, 3, 9 become nodes 0 {0,1,3}, 1 {2,4}, 2 {5}.
	g := mustGraph(t, Layout{NodeOf: []int{7, 7, 3, 7, 3, 9}, Channels: 1, Pattern: BalancedTree})
	if g.NNodes != 3 || !slices.Equal(g.NodeOf, []int{0, 0, 1, 0, 1, 2}) {
		t.Fatalf("nodes %d %v", g.NNodes, g.NodeOf)
	}
	if !slices.Equal(g.RingOrder[0], []int{0, 1, 3, 2, 4, 5}) {
		t.Errorf("ring order %v", g.RingOrder[0])
	}
	// tree0 over 3 nodes: 0 -> 2 -> 1 (slot 0).
	checkLinks(t, g, 0, map[int]TreeLinks{0: tl(-1, 1, 5), 1: tl(0, 3), 3: tl(1), 5: tl(0, 2), 2: tl(5, 4), 4: tl(2)})
	// tree1 (shift): 1 -> 0 (slot 1) -> 2 (slot 0).
	checkLinks(t, g, 1, map[int]TreeLinks{2: tl(-1, 4, 0), 0: tl(2, 1), 1: tl(0, 3, 5), 5: tl(1), 3: tl(1), 4: tl(2)})
	if g.Trees[1][5].Depth != 3 || g.TreeHeight(1) != 3 {
		t.Errorf("depths %+v", g.Trees[1])
	}
}

// randomLayout draws a layout with uneven nodes, interleaved ranks and
// random intra orders.
func randomLayout(rng *rand.Rand, n int) Layout {
	nodes := 1 + rng.IntN(n)
	l := Layout{NodeOf: make([]int, n), Channels: 1 + rng.IntN(4), Pattern: Pattern(1 + rng.IntN(4))}
	labels := rng.Perm(nodes)
	for r := range l.NodeOf {
		if r < nodes {
			l.NodeOf[r] = labels[r] * 10 // every node has a rank
		} else {
			l.NodeOf[r] = labels[rng.IntN(nodes)] * 10
		}
	}
	if rng.IntN(2) == 0 {
		// Shuffle which ranks sit where.
		rng.Shuffle(n, func(i, j int) { l.NodeOf[i], l.NodeOf[j] = l.NodeOf[j], l.NodeOf[i] })
	}
	if rng.IntN(2) == 0 {
		l = randomLayoutIntra(rng, l)
	}
	return l
}

func TestGraphRandomLayouts(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	iters := 400
	if testing.Short() {
		iters = 80
	}
	for it := 0; it < iters; it++ {
		n := 1 + rng.IntN(64)
		l := randomLayout(rng, n)
		g := mustGraph(t, l)
		C := l.Channels
		perNode := make([]int, g.NNodes)
		for _, nd := range g.NodeOf {
			perNode[nd]++
		}
		maxPer := 0
		for _, k := range perNode {
			maxPer = max(maxPer, k)
		}
		for c := 0; c < g.Channels; c++ {
			k := c / C // 0: tree0, 1: tree1
			crossing := 0
			for r, tr := range g.Trees[c] {
				if len(tr.Children()) > 3 || (tr.Up == -1 && len(tr.Children()) > 2) {
					t.Fatalf("layout %+v channel %d rank %d: fan-out %v", l, c, r, tr.Down)
				}
				if tr.Up != -1 && g.NodeOf[tr.Up] != g.NodeOf[r] {
					crossing++
					// The inter-node edge follows the node-level Dtree.
					t0, t1 := Dtree(g.NNodes, g.NodeOf[r])
					want := []TreeNode{t0, t1}[k].Up
					if g.NodeOf[tr.Up] != want {
						t.Fatalf("channel %d rank %d (node %d): parent on node %d, Dtree says %d", c, r, g.NodeOf[r], g.NodeOf[tr.Up], want)
					}
				}
			}
			if crossing != g.NNodes-1 {
				t.Fatalf("channel %d: %d inter-node edges for %d nodes", c, crossing, g.NNodes)
			}
			// Node-level height bounds the rank-level height.
			if h, hn := g.TreeHeight(c), max(0, bitsLen(g.NNodes-1)); h > (hn+1)*maxPer-1 {
				t.Fatalf("channel %d: height %d > (%d+1)*%d-1", c, h, hn, maxPer)
			}
			// Rings: nodes appear contiguously in node order.
			order := g.RingOrder[c]
			var seq []int
			for _, r := range order {
				if len(seq) == 0 || seq[len(seq)-1] != g.NodeOf[r] {
					seq = append(seq, g.NodeOf[r])
				}
			}
			if len(seq) > 1 && seq[len(seq)-1] == seq[0] {
				seq = seq[:len(seq)-1] // rank 0 may sit inside node 0's path
			}
			for i := range seq {
				if seq[i] != (seq[0]+i)%g.NNodes {
					t.Fatalf("channel %d: ring order %v visits nodes %v", c, order, seq)
				}
			}
			// Both copies share the ring.
			if !slices.Equal(order, g.RingOrder[c%C]) {
				t.Fatalf("channel %d ring differs from channel %d", c, c%C)
			}
		}
	}
}

func bitsLen(x int) int {
	n := 0
	for ; x > 0; x >>= 1 {
		n++
	}
	return n
}

func TestBuildGraphErrors(t *testing.T) {
	cases := []struct {
		l    Layout
		want string
	}{
		{Layout{Channels: 1, Pattern: TreePattern}, "no ranks"},
		{Layout{NodeOf: []int{0}, Channels: 0, Pattern: TreePattern}, "channels 0"},
		{Layout{NodeOf: []int{0}, Channels: 33, Pattern: TreePattern}, "channels 33"},
		{Layout{NodeOf: []int{0}, Channels: 1, Pattern: 7}, "pattern 7"},
		{Layout{NodeOf: []int{0, 1}, Channels: 2, Pattern: 1, Intra: [][][]int{{{0}, {1}}}}, "intra has 1 channels"},
		{Layout{NodeOf: []int{0, 1}, Channels: 1, Pattern: 1, Intra: [][][]int{{{0}}}}, "channel 0: intra has 1 nodes"},
		{Layout{NodeOf: []int{0, 0, 1}, Channels: 1, Pattern: 1, Intra: [][][]int{{{0, 2}, {1}}}}, "rank 2, which is on node 1"},
		{Layout{NodeOf: []int{0, 0, 1}, Channels: 1, Pattern: 1, Intra: [][][]int{{{0, 0}, {2}}}}, "rank 0 twice"},
		{Layout{NodeOf: []int{0, 0, 1}, Channels: 1, Pattern: 1, Intra: [][][]int{{{0, 1}, {2, 5}}}}, "node 1: intra order [2 5] has 2 ranks"},
		{Layout{NodeOf: []int{0, 0, 1}, Channels: 1, Pattern: 1, Intra: [][][]int{{{0, 9}, {2}}}}, "rank 9, not in 0..2"},
	}
	for _, c := range cases {
		_, err := BuildGraph(c.l)
		if err == nil || !errors.Is(err, ErrBadLayout) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("BuildGraph(%+v) = %v, want error containing %q", c.l, err, c.want)
		}
	}
}

func TestGraphCheckCatchesDamage(t *testing.T) {
	g := mustGraph(t, UniformLayout(3, 2, 1, BalancedTree))
	g.Trees[0][3].Up = 4
	if err := g.Check(); err == nil || !strings.Contains(err.Error(), "channel 0") {
		t.Errorf("damaged tree: %v", err)
	}
	g = mustGraph(t, UniformLayout(3, 2, 1, BalancedTree))
	g.Rings[1][2].Next = 4
	if err := g.Check(); err == nil || !strings.Contains(err.Error(), "channel 1") {
		t.Errorf("damaged ring: %v", err)
	}
}

func TestNCCLTreeDepth(t *testing.T) {
	for _, c := range [][3]int{{8, 1, 7}, {16, 2, 8}, {32, 4, 9}, {5, 5, 2}} {
		if got := NCCLTreeDepth(c[0], c[1]); got != c[2] {
			t.Errorf("NCCLTreeDepth(%d,%d) = %d, want %d", c[0], c[1], got, c[2])
		}
	}
}
