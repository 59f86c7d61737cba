package algorithms

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Problem is one broken rule in a Graph. Rank is the rank whose links break
// it, -1 when the rule concerns the channel as a whole (then Msg names the
// ranks involved).
type Problem struct {
	Channel int
	Rank    int
	Msg     string
}

func (p Problem) String() string {
	if p.Rank < 0 {
		return fmt.Sprintf("channel %d: %s", p.Channel, p.Msg)
	}
	return fmt.Sprintf("channel %d rank %d: %s", p.Channel, p.Rank, p.Msg)
}

// ValidateGraph checks every channel of g and returns what is wrong, in
// channel then rank order (channel-wide problems, Rank -1, first), nil for
// a sound graph. For each channel's tree: links name ranks in range and
// not the rank itself, no child twice; exactly one root (when there are
// several, the one most ranks reach counts as the root and the others are
// blamed); a child lists its parent as up if and only if the parent lists
// the child in down; no cycle of up links; every rank reaches the root;
// N-1 edges. For each channel's ring: prev and next agree (next of a is b
// iff prev of b is a, blamed on both ends), following next from rank 0
// visits every rank once and returns to 0, and RingOrder, where set, is
// that walk. At most 32 problems are listed per channel's tree and per
// channel's ring, then one that counts the rest.
//
// Depth is not checked: a Graph parsed from a log gets distances computed
// from its links, and NCCL itself keeps an estimate there; Graph.Check
// checks BuildGraph's depths.
func ValidateGraph(g *Graph) []Problem {
	if g == nil {
		return []Problem{{Channel: -1, Rank: -1, Msg: "no graph"}}
	}
	var ps []Problem
	if g.NRanks < 1 {
		return append(ps, Problem{Channel: -1, Rank: -1, Msg: fmt.Sprintf("graph has %d ranks", g.NRanks)})
	}
	if g.Channels < 1 {
		ps = append(ps, Problem{Channel: -1, Rank: -1, Msg: fmt.Sprintf("graph has %d channels", g.Channels)})
	}
	for c := 0; c < g.Channels; c++ {
		ps = append(ps, glValidateTree(g, c)...)
		ps = append(ps, glValidateRing(g, c)...)
	}
	key := func(p Problem) int {
		if p.Rank == -1 && strings.HasPrefix(p.Msg, glMoreProblems) {
			return 1 << 62 // the count of dropped problems goes last
		}
		return p.Rank
	}
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].Channel != ps[j].Channel {
			return ps[i].Channel < ps[j].Channel
		}
		return key(ps[i]) < key(ps[j])
	})
	return ps
}

func glValidateTree(g *Graph, c int) []Problem {
	n := g.NRanks
	var pl glProblems
	bad := func(r int, format string, args ...any) { pl.add(c, r, format, args...) }
	if c >= len(g.Trees) || len(g.Trees[c]) != n {
		got := 0
		if c < len(g.Trees) {
			got = len(g.Trees[c])
		}
		bad(-1, "tree has links for %d ranks, want %d", got, n)
		return pl.list(c)
	}
	t := g.Trees[c]
	inRange := func(x int) bool { return x >= 0 && x < n }

	// Links in range, not to self, no repeated child.
	for r, l := range t {
		if l.Up != -1 && (!inRange(l.Up) || l.Up == r) {
			bad(r, "tree up %d is not a rank other than itself", l.Up)
		}
		for i, d := range l.Down {
			if d == -1 {
				continue
			}
			if !inRange(d) || d == r {
				bad(r, "tree down[%d] %d is not a rank other than itself", i, d)
				continue
			}
			for j := 0; j < i; j++ {
				if l.Down[j] == d {
					bad(r, "tree lists child %d twice (down[%d] and down[%d])", d, j, i)
				}
			}
			if d == l.Up {
				bad(r, "tree lists rank %d as both parent and child", d)
			}
		}
	}

	// Parent and child agree.
	hasChild := func(p, ch int) bool {
		for _, d := range t[p].Down {
			if d == ch {
				return true
			}
		}
		return false
	}
	for r, l := range t {
		if inRange(l.Up) && l.Up != r && !hasChild(l.Up, r) {
			u := t[l.Up]
			bad(r, "tree up is %d but rank %d's down is %d/%d/%d", l.Up, l.Up, u.Down[0], u.Down[1], u.Down[2])
		}
		for _, d := range l.Down {
			if inRange(d) && d != r && t[d].Up != r {
				bad(r, "tree lists child %d but rank %d's up is %d", d, d, t[d].Up)
			}
		}
	}

	// Follow up links from every rank to where they end: a root (a rank
	// without up), or -1 for a loop or a link out of range. Loops are
	// reported once, from their smallest rank.
	const unseen, onPath = -2, -3
	end := make([]int, n)
	for r := range end {
		end[r] = unseen
	}
	for r := 0; r < n; r++ {
		var path []int
		x, res := r, -1
		for {
			if !inRange(x) {
				break
			}
			if end[x] == onPath {
				i := glIndexOf(path, x)
				bad(glMinOf(path[i:]), "tree has a cycle of up links %s", glLoopText(path[i:]))
				break
			}
			if end[x] != unseen {
				res = end[x]
				break
			}
			end[x] = onPath
			path = append(path, x)
			if t[x].Up == -1 {
				res = x
				break
			}
			x = t[x].Up
		}
		for _, y := range path {
			end[y] = res
		}
	}

	// Exactly one root: the one most ranks reach (the lowest on a tie) is
	// taken as the real one; the others are blamed.
	reach := make(map[int]int)
	var roots []int
	for r, l := range t {
		if l.Up == -1 {
			roots = append(roots, r)
		}
		if end[r] >= 0 {
			reach[end[r]]++
		}
	}
	root := -1
	for _, r := range roots {
		if root < 0 || reach[r] > reach[root] {
			root = r
		}
	}
	switch {
	case len(roots) == 0:
		bad(-1, "tree has no root (every rank has an up link)")
	case len(roots) > 1:
		for _, r := range roots {
			if r != root {
				bad(r, "tree has a second root (%d ranks reach root %d, %d reach this one)", reach[root], root, reach[r])
			}
		}
	}
	// Every rank reaches the root.
	if root >= 0 {
		for r := 0; r < n; r++ {
			if end[r] != root {
				bad(r, "does not reach the tree's root %d along up links", root)
			}
		}
	}

	// N-1 edges, counting each parent-child pair once from either side.
	type edge struct{ a, b int }
	edges := make(map[edge]bool)
	add := func(a, b int) {
		if !inRange(a) || !inRange(b) || a == b {
			return
		}
		if a > b {
			a, b = b, a
		}
		edges[edge{a, b}] = true
	}
	for r, l := range t {
		add(r, l.Up)
		for _, d := range l.Down {
			add(r, d)
		}
	}
	if len(edges) != n-1 {
		bad(-1, "tree has %d edges, want %d", len(edges), n-1)
	}
	return pl.list(c)
}

// glMaxProblems bounds the problems reported for one channel's tree or
// ring; a graph that is wrong everywhere would otherwise give millions.
const glMaxProblems = 32 // keep in step with ValidateGraph's comment

const glMoreProblems = "and more problems: "

// glProblems collects one channel's tree or ring problems, at most
// glMaxProblems of them and a count of the rest.
type glProblems struct {
	ps   []Problem
	more int
}

func (pl *glProblems) add(c, r int, format string, args ...any) {
	if len(pl.ps) == glMaxProblems {
		pl.more++
		return
	}
	pl.ps = append(pl.ps, Problem{Channel: c, Rank: r, Msg: fmt.Sprintf(format, args...)})
}

func (pl *glProblems) list(c int) []Problem {
	if pl.more > 0 {
		return append(pl.ps, Problem{Channel: c, Rank: -1, Msg: fmt.Sprintf("%s%d not shown", glMoreProblems, pl.more)})
	}
	return pl.ps
}

func glMinOf(s []int) int {
	m := s[0]
	for _, x := range s {
		m = min(m, x)
	}
	return m
}

// glLoopText prints a loop of ranks from its smallest: "1 -> 3 -> 2 -> 1".
func glLoopText(loop []int) string {
	lo := glMinOf(loop)
	k := glIndexOf(loop, lo)
	var b strings.Builder
	for j := range len(loop) {
		fmt.Fprintf(&b, "%d -> ", loop[(k+j)%len(loop)])
	}
	fmt.Fprintf(&b, "%d", lo)
	return b.String()
}

func glIndexOf(s []int, x int) int {
	for i, y := range s {
		if y == x {
			return i
		}
	}
	return -1
}

func glValidateRing(g *Graph, c int) []Problem {
	n := g.NRanks
	var pl glProblems
	bad := func(r int, format string, args ...any) { pl.add(c, r, format, args...) }
	if c >= len(g.Rings) || len(g.Rings[c]) != n {
		got := 0
		if c < len(g.Rings) {
			got = len(g.Rings[c])
		}
		bad(-1, "ring has links for %d ranks, want %d", got, n)
		return pl.list(c)
	}
	ring := g.Rings[c]
	inRange := func(x int) bool { return x >= 0 && x < n }
	for r, l := range ring {
		if !inRange(l.Next) {
			bad(r, "ring next %d is not a rank", l.Next)
		} else if ring[l.Next].Prev != r {
			bad(r, "ring next is %d but rank %d's prev is %d", l.Next, l.Next, ring[l.Next].Prev)
		}
		if !inRange(l.Prev) {
			bad(r, "ring prev %d is not a rank", l.Prev)
		} else if ring[l.Prev].Next != r {
			bad(r, "ring prev is %d but rank %d's next is %d", l.Prev, l.Prev, ring[l.Prev].Next)
		}
	}
	// The other end of each disagreeing link: a rank named as prev (next)
	// by a rank that is not its next (prev).
	for q, l := range ring {
		if inRange(l.Prev) && l.Prev != q && ring[l.Prev].Next != q && inRange(ring[l.Prev].Next) {
			bad(l.Prev, "ring next is %d but rank %d says its prev is %d", ring[l.Prev].Next, q, l.Prev)
		}
		if inRange(l.Next) && l.Next != q && ring[l.Next].Prev != q && inRange(ring[l.Next].Prev) {
			bad(l.Next, "ring prev is %d but rank %d says its next is %d", ring[l.Next].Prev, q, l.Next)
		}
	}
	// One cycle through every rank.
	walk := glWalkRing(g, c, 0)
	last := walk[len(walk)-1]
	if len(walk) < n {
		var out []int
		in := make([]bool, n)
		for _, r := range walk {
			in[r] = true
		}
		for r := range in {
			if !in[r] {
				out = append(out, r)
			}
		}
		bad(last, "ring from rank 0 goes %s -> %d and leaves out %s", glJoinInts(walk), ring[last].Next, glRankList(out))
	} else if ring[last].Next != 0 {
		bad(last, "ring from rank 0 visits every rank but %d's next is %d, not 0", last, ring[last].Next)
	}
	if c < len(g.RingOrder) && len(g.RingOrder[c]) > 0 && !slices.Equal(g.RingOrder[c], walk) {
		o := g.RingOrder[c]
		i := 0
		for i < len(o) && i < len(walk) && o[i] == walk[i] {
			i++
		}
		r := -1
		if i < len(walk) {
			r = walk[i]
		}
		bad(r, "ring order %s disagrees with prev/next (walk from rank 0: %s) at position %d", glJoinInts(o), glJoinInts(walk), i)
	}
	return pl.list(c)
}

func glJoinInts(xs []int) string {
	var b strings.Builder
	for i, x := range xs {
		if i > 0 {
			b.WriteString(" -> ")
		}
		fmt.Fprintf(&b, "%d", x)
	}
	return b.String()
}
