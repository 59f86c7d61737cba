package algorithms

import (
	"errors"
	"fmt"
)

// This file builds a communicator's connection Graph the way NCCL's
// ncclTopoPreset/ncclTopoPostset (src/graph/connect.cc) do: inside every
// node the ranks of a channel form a chain (trees) and a path (rings) in the
// channel's intra-node order; across nodes the node heads are joined by the
// double binary tree (Dtree over nodes) and the node paths are joined into
// one ring in node order. The channels found by the search are then
// duplicated: channel c carries tree0 and channel c+Channels tree1 (the
// second copy of each ring is the same ring).

// Pattern is the tree pattern of a channel search, with NCCL's values.
// It decides which ranks of a node's chain are the node's tree heads.
type Pattern int

const (
	// BalancedTree: the parent link leaves from intra[0], the child0 link
	// arrives at intra[1], the child1 link at intra[0].
	BalancedTree Pattern = 1
	// SplitTree: parent from intra[0], child0 and child1 at intra[1].
	SplitTree Pattern = 2
	// TreePattern: every inter-node link at intra[0].
	TreePattern Pattern = 3
	// RingPattern: a ring search; its tree heads are placed as for
	// BalancedTree, as NCCL's index arithmetic does.
	RingPattern Pattern = 4
)

func (p Pattern) String() string {
	switch p {
	case BalancedTree:
		return "balanced_tree"
	case SplitTree:
		return "split_tree"
	case TreePattern:
		return "tree"
	case RingPattern:
		return "ring"
	}
	return fmt.Sprintf("pattern(%d)", int(p))
}

// ParsePattern maps "balanced_tree", "split_tree", "tree", "ring" (or the
// NCCL numbers "1".."4") to a Pattern.
func ParsePattern(s string) (Pattern, error) {
	for p := BalancedTree; p <= RingPattern; p++ {
		if s == p.String() || s == fmt.Sprint(int(p)) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("gotree/algorithms: unknown tree pattern %q (want balanced_tree, split_tree, tree or ring)", s)
}

// MaxSearchChannels is the most channels a Layout may carry; the Graph has
// twice as many.
const MaxSearchChannels = 32

// ErrBadLayout is wrapped by every error of BuildGraph.
var ErrBadLayout = errors.New("gotree/algorithms: bad layout")

// Layout is the input of BuildGraph: where every rank lives and the
// intra-node orders found by the channel search.
type Layout struct {
	// NodeOf maps each rank to a node label (any int, e.g. a host index).
	// Nodes are renumbered 0, 1, ... by first appearance in rank order,
	// as NCCL numbers them.
	NodeOf []int
	// Channels is the number of channels found by the search, before
	// duplication (1..MaxSearchChannels).
	Channels int
	// Pattern places the node's tree heads (BalancedTree, SplitTree,
	// TreePattern, RingPattern).
	Pattern Pattern
	// Intra optionally gives, per channel and (renumbered) node, that
	// node's ranks in chain/ring order: Intra[c][node] must be a
	// permutation of the node's ranks. nil means ascending rank order on
	// every channel.
	Intra [][][]int
}

// UniformLayout is a layout of nodes × perNode ranks, rank r on node
// r/perNode, ascending order inside nodes.
func UniformLayout(nodes, perNode, channels int, p Pattern) Layout {
	nodeOf := make([]int, 0, nodes*perNode)
	for n := 0; n < nodes; n++ {
		for i := 0; i < perNode; i++ {
			nodeOf = append(nodeOf, n)
		}
	}
	return Layout{NodeOf: nodeOf, Channels: channels, Pattern: p}
}

// NCCLTreeDepth is the tree depth NCCL assumes in its tuning and chunk
// sizing (an approximation): nRanks/nNodes - 1 + floor(log2(nNodes)).
func NCCLTreeDepth(nRanks, nNodes int) int {
	if nNodes < 1 {
		return 0
	}
	l := 0
	for v := nNodes; v > 1; v >>= 1 {
		l++
	}
	return nRanks/nNodes - 1 + l
}

func layoutErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadLayout, fmt.Sprintf(format, args...))
}

// BuildGraph builds the communicator graph for l: 2*l.Channels channels,
// each with every rank's ring neighbours, tree links and the ring order
// from rank 0. Tree depths are exact distances from the channel's tree
// root (see TreeLinks.Depth; NCCLTreeDepth gives NCCL's approximation).
//
// Per channel c < l.Channels and node n with intra order I (I[0] first):
//   - ring: I is a path, recv = I[0], send = I[last]; node n's send is
//     followed by node n+1's recv (the last node wraps to node 0);
//   - tree: I is a chain (up = I[i-1], down[0] = I[i+1]); the node's heads
//     are parent = I[0], child0 = I[Pattern==TreePattern ? 0 : 1], child1
//     = I[Pattern==SplitTree ? 1 : 0] (index 1 falls back to 0 when the
//     node has one rank); the parent head's up is the child0 or child1
//     head of the parent node (by parentChildType), and each child node's
//     parent head goes into the first free down[] slot of this node's
//     child0 (tree child 0) or child1 (tree child 1) head.
//
// Channel c uses Dtree's tree0, channel c+l.Channels tree1; rings are the
// same on both.
func BuildGraph(l Layout) (*Graph, error) {
	n := len(l.NodeOf)
	if n == 0 {
		return nil, layoutErr("no ranks")
	}
	if l.Channels < 1 || l.Channels > MaxSearchChannels {
		return nil, layoutErr("channels %d not in 1..%d", l.Channels, MaxSearchChannels)
	}
	if l.Pattern < BalancedTree || l.Pattern > RingPattern {
		return nil, layoutErr("unknown tree pattern %d", int(l.Pattern))
	}
	// Renumber nodes by first appearance.
	nodeIdx := make(map[int]int)
	nodeOf := make([]int, n)
	var nodeRanks [][]int
	for r, label := range l.NodeOf {
		idx, ok := nodeIdx[label]
		if !ok {
			idx = len(nodeRanks)
			nodeIdx[label] = idx
			nodeRanks = append(nodeRanks, nil)
		}
		nodeOf[r] = idx
		nodeRanks[idx] = append(nodeRanks[idx], r)
	}
	nNodes := len(nodeRanks)
	C := l.Channels
	if l.Intra != nil {
		if len(l.Intra) != C {
			return nil, layoutErr("intra has %d channels, want %d", len(l.Intra), C)
		}
		for c := 0; c < C; c++ {
			if len(l.Intra[c]) != nNodes {
				return nil, layoutErr("channel %d: intra has %d nodes, want %d", c, len(l.Intra[c]), nNodes)
			}
			for nd := 0; nd < nNodes; nd++ {
				if err := checkIntra(c, nd, l.Intra[c][nd], nodeRanks[nd], nodeOf); err != nil {
					return nil, err
				}
			}
		}
	}
	intra := func(c, nd int) []int {
		if l.Intra == nil {
			return nodeRanks[nd]
		}
		return l.Intra[c][nd]
	}

	g := &Graph{
		NRanks:    n,
		NNodes:    nNodes,
		Channels:  2 * C,
		RingOrder: make([][]int, 2*C),
		Rings:     make([][]RingLinks, 2*C),
		Trees:     make([][]TreeLinks, 2*C),
		NodeOf:    nodeOf,
		Pattern:   l.Pattern,
	}
	dt := make([][2]TreeNode, nNodes)
	for nd := range dt {
		dt[nd][0], dt[nd][1] = Dtree(nNodes, nd)
	}
	head := func(I []int, i int) int {
		if i >= len(I) {
			i = len(I) - 1
		}
		return I[i]
	}
	child0Idx, child1Idx := 1, 0
	if l.Pattern == TreePattern {
		child0Idx = 0
	}
	if l.Pattern == SplitTree {
		child1Idx = 1
	}
	for c := 0; c < C; c++ {
		rings := make([]RingLinks, n)
		recv := make([]int, nNodes)
		send := make([]int, nNodes)
		ttp := make([]int, nNodes)
		ttc0 := make([]int, nNodes)
		ttc1 := make([]int, nNodes)
		chain := make([]TreeLinks, n)
		for nd := 0; nd < nNodes; nd++ {
			I := intra(c, nd)
			recv[nd], send[nd] = I[0], I[len(I)-1]
			ttp[nd], ttc0[nd], ttc1[nd] = I[0], head(I, child0Idx), head(I, child1Idx)
			for i, r := range I {
				rl := RingLinks{Prev: -1, Next: -1}
				tl := TreeLinks{Up: -1, Down: [3]int{-1, -1, -1}}
				if i > 0 {
					rl.Prev = I[i-1]
					tl.Up = I[i-1]
				}
				if i < len(I)-1 {
					rl.Next = I[i+1]
					tl.Down[0] = I[i+1]
				}
				rings[r] = rl
				chain[r] = tl
			}
		}
		// connectRings: node nd+1 follows node nd.
		for nd := 0; nd < nNodes; nd++ {
			rings[recv[nd]].Prev = send[(nd-1+nNodes)%nNodes]
			rings[send[nd]].Next = recv[(nd+1)%nNodes]
		}
		for k := 0; k < 2; k++ {
			ch := c + k*C
			trees := append([]TreeLinks(nil), chain...)
			for nd := 0; nd < nNodes; nd++ {
				t := dt[nd][k]
				if t.Up != -1 {
					if t.ParentChildType == 0 {
						trees[ttp[nd]].Up = ttc0[t.Up]
					} else {
						trees[ttp[nd]].Up = ttc1[t.Up]
					}
				}
				if t.Down0 != -1 {
					if err := addDown(&trees[ttc0[nd]], ttp[t.Down0]); err != nil {
						return nil, layoutErr("channel %d rank %d: %v", ch, ttc0[nd], err)
					}
				}
				if t.Down1 != -1 {
					if err := addDown(&trees[ttc1[nd]], ttp[t.Down1]); err != nil {
						return nil, layoutErr("channel %d rank %d: %v", ch, ttc1[nd], err)
					}
				}
			}
			if err := setDepths(trees); err != nil {
				return nil, layoutErr("channel %d: %v", ch, err)
			}
			g.Trees[ch] = trees
			g.Rings[ch] = append([]RingLinks(nil), rings...)
			g.RingOrder[ch] = ringFrom(rings, 0)
		}
	}
	return g, nil
}

func checkIntra(c, nd int, got, want []int, nodeOf []int) error {
	if len(got) != len(want) {
		return layoutErr("channel %d node %d: intra order %v has %d ranks, the node has %d (%v)", c, nd, got, len(got), len(want), want)
	}
	seen := make(map[int]bool, len(got))
	for _, r := range got {
		if r < 0 || r >= len(nodeOf) {
			return layoutErr("channel %d node %d: intra order names rank %d, not in 0..%d", c, nd, r, len(nodeOf)-1)
		}
		if nodeOf[r] != nd {
			return layoutErr("channel %d node %d: intra order names rank %d, which is on node %d", c, nd, r, nodeOf[r])
		}
		if seen[r] {
			return layoutErr("channel %d node %d: intra order names rank %d twice", c, nd, r)
		}
		seen[r] = true
	}
	return nil
}

// addDown puts child into the first free down slot, as NCCL's setTreeDown.
func addDown(t *TreeLinks, child int) error {
	for i := range t.Down {
		if t.Down[i] == -1 {
			t.Down[i] = child
			return nil
		}
	}
	return fmt.Errorf("no free down slot for child %d (down %v)", child, t.Down)
}

// setDepths sets every rank's distance from the root and checks that the
// links form one tree.
func setDepths(trees []TreeLinks) error {
	n := len(trees)
	for r := range trees {
		d := 0
		for x := r; trees[x].Up != -1; x = trees[x].Up {
			d++
			if d > n {
				return fmt.Errorf("rank %d: cycle in up links", r)
			}
		}
		trees[r].Depth = d
	}
	return nil
}

// ringFrom walks the ring along Next from start.
func ringFrom(rings []RingLinks, start int) []int {
	order := make([]int, 0, len(rings))
	r := start
	for range rings {
		order = append(order, r)
		r = rings[r].Next
	}
	return order
}

// TreeRoot returns the root of channel c's tree (the rank without a
// parent), or -1 if there is none.
func (g *Graph) TreeRoot(c int) int {
	for r, t := range g.Trees[c] {
		if t.Up == -1 {
			return r
		}
	}
	return -1
}

// TreeHeight returns the greatest Depth over channel c's tree.
func (g *Graph) TreeHeight(c int) int {
	h := 0
	for _, t := range g.Trees[c] {
		h = max(h, t.Depth)
	}
	return h
}

// Children returns the ranks in t.Down, skipping -1, in slot order.
func (t TreeLinks) Children() []int {
	var ch []int
	for _, d := range t.Down {
		if d != -1 {
			ch = append(ch, d)
		}
	}
	return ch
}

// Check verifies g's structure and says which channel and rank break a
// rule: every channel's tree has one root, n-1 edges, no cycle, parent and
// child agree, depths are distances from the root; every ring is one cycle
// over all ranks with prev/next agreeing, and RingOrder starts at rank 0
// and follows Next.
func (g *Graph) Check() error {
	n := g.NRanks
	if n < 1 || len(g.Trees) != g.Channels || len(g.Rings) != g.Channels || len(g.RingOrder) != g.Channels {
		return fmt.Errorf("gotree/algorithms: graph: %d ranks, %d channels but %d trees, %d rings, %d ring orders",
			n, g.Channels, len(g.Trees), len(g.Rings), len(g.RingOrder))
	}
	for c := 0; c < g.Channels; c++ {
		if err := checkTree(g.Trees[c], n, true); err != nil {
			return fmt.Errorf("gotree/algorithms: graph channel %d tree: %v", c, err)
		}
		if err := checkRing(g.Rings[c], g.RingOrder[c], n); err != nil {
			return fmt.Errorf("gotree/algorithms: graph channel %d ring: %v", c, err)
		}
	}
	return nil
}

func checkTree(ts []TreeLinks, n int, exactDepth bool) error {
	if len(ts) != n {
		return fmt.Errorf("%d entries for %d ranks", len(ts), n)
	}
	for r, t := range ts {
		if t.Up < -1 || t.Up >= n || t.Up == r {
			return fmt.Errorf("rank %d: bad parent %d", r, t.Up)
		}
	}
	roots, edges := 0, 0
	for r, t := range ts {
		if t.Up == -1 {
			roots++
		} else {
			if t.Up < 0 || t.Up >= n || t.Up == r {
				return fmt.Errorf("rank %d: bad parent %d", r, t.Up)
			}
			found := 0
			for _, d := range ts[t.Up].Down {
				if d == r {
					found++
				}
			}
			if found != 1 {
				return fmt.Errorf("rank %d: parent %d lists it %d times as a child", r, t.Up, found)
			}
		}
		for _, d := range t.Down {
			if d == -1 {
				continue
			}
			if d < 0 || d >= n || ts[d].Up != r {
				return fmt.Errorf("rank %d: child %d does not name it as parent", r, d)
			}
			edges++
		}
		depth := 0
		for x := r; ts[x].Up != -1; x = ts[x].Up {
			depth++
			if depth > n {
				return fmt.Errorf("rank %d: cycle", r)
			}
		}
		if exactDepth && depth != t.Depth {
			return fmt.Errorf("rank %d: depth %d, distance to root %d", r, t.Depth, depth)
		}
	}
	if roots != 1 {
		return fmt.Errorf("%d roots", roots)
	}
	if edges != n-1 {
		return fmt.Errorf("%d edges for %d ranks", edges, n)
	}
	return nil
}

func checkRing(rs []RingLinks, order []int, n int) error {
	if len(rs) != n || len(order) != n {
		return fmt.Errorf("%d links and %d ordered ranks for %d ranks", len(rs), len(order), n)
	}
	for r, l := range rs {
		if l.Next < 0 || l.Next >= n || l.Prev < 0 || l.Prev >= n {
			return fmt.Errorf("rank %d: prev %d next %d out of range", r, l.Prev, l.Next)
		}
		if rs[l.Next].Prev != r {
			return fmt.Errorf("rank %d: next %d has prev %d", r, l.Next, rs[l.Next].Prev)
		}
	}
	seen := make([]bool, n)
	if order[0] != 0 {
		return fmt.Errorf("ring order starts at %d, not 0", order[0])
	}
	for i, r := range order {
		if r < 0 || r >= n || seen[r] {
			return fmt.Errorf("ring order %v repeats or leaves the range at %d", order, r)
		}
		seen[r] = true
		if rs[r].Next != order[(i+1)%n] {
			return fmt.Errorf("rank %d: next %d but ring order has %d", r, rs[r].Next, order[(i+1)%n])
		}
	}
	return nil
}
