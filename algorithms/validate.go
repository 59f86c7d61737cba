package algorithms

import (
	"fmt"
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
// a sound graph. For each channel's tree: links name
// ranks in range and not the rank itself, no child twice; exactly one root;
// a child lists its parent as up if and only if the parent lists the child
// in down; no cycle; every rank reaches the root; N-1 edges. For each
// channel's ring: prev and next agree (next of a is b iff prev of b is a),
// following next from rank 0 visits every rank once and returns to 0, and
// RingOrder, where set, is that walk. Depth is not checked: NCCL stores an
// estimate there, not each rank's distance from the root.
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
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].Channel != ps[j].Channel {
			return ps[i].Channel < ps[j].Channel
		}
		return ps[i].Rank < ps[j].Rank
	})
	return ps
}

func glValidateTree(g *Graph, c int) []Problem {
	n := g.NRanks
	var ps []Problem
	bad := func(r int, format string, args ...any) {
		ps = append(ps, Problem{Channel: c, Rank: r, Msg: fmt.Sprintf(format, args...)})
	}
	if c >= len(g.Trees) || len(g.Trees[c]) != n {
		got := 0
		if c < len(g.Trees) {
			got = len(g.Trees[c])
		}
		bad(-1, "tree has links for %d ranks, want %d", got, n)
		return ps
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

	// Exactly one root.
	root := -1
	var roots []int
	for r, l := range t {
		if l.Up == -1 {
			roots = append(roots, r)
			if root < 0 {
				root = r
			}
		}
	}
	switch {
	case len(roots) == 0:
		bad(-1, "tree has no root (every rank has an up link)")
	case len(roots) > 1:
		for _, r := range roots[1:] {
			bad(r, "tree has a second root (rank %d is a root too)", root)
		}
	}

	// No cycle along up links; every rank reaches the root.
	state := make([]int8, n) // 0 new, 1 on the current path, 2 done
	reaches := make([]bool, n)
	for r := 0; r < n; r++ {
		var path []int
		x := r
		ok := false
		for {
			if !inRange(x) || x == -1 {
				break
			}
			if state[x] == 2 {
				ok = reaches[x]
				break
			}
			if state[x] == 1 {
				// x closes a loop: report it once, from its smallest rank.
				i := glIndexOf(path, x)
				loop := path[i:]
				lo := loop[0]
				for _, y := range loop {
					lo = min(lo, y)
				}
				var b strings.Builder
				k := glIndexOf(loop, lo)
				for j := range len(loop) {
					fmt.Fprintf(&b, "%d -> ", loop[(k+j)%len(loop)])
				}
				fmt.Fprintf(&b, "%d", lo)
				bad(lo, "tree has a cycle of up links %s", b.String())
				break
			}
			state[x] = 1
			path = append(path, x)
			if t[x].Up == -1 {
				ok = x == root
				break
			}
			x = t[x].Up
		}
		for _, y := range path {
			state[y] = 2
			reaches[y] = ok
		}
	}
	if root >= 0 {
		for r := 0; r < n; r++ {
			if !reaches[r] {
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
	return ps
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
	var ps []Problem
	bad := func(r int, format string, args ...any) {
		ps = append(ps, Problem{Channel: c, Rank: r, Msg: fmt.Sprintf(format, args...)})
	}
	if c >= len(g.Rings) || len(g.Rings[c]) != n {
		got := 0
		if c < len(g.Rings) {
			got = len(g.Rings[c])
		}
		bad(-1, "ring has links for %d ranks, want %d", got, n)
		return ps
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
	if c < len(g.RingOrder) && len(g.RingOrder[c]) > 0 && !glEqualInts(g.RingOrder[c], walk) {
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
	return ps
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
