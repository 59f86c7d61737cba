package algorithms

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var glRewrite = flag.Bool("rewrite-graphlog", false, "rewrite graph log golden files under testdata/")

// glHandGraph builds a sound graph without BuildGraph: ranks are split over
// nodes as perNode says; channel c walks each node's ranks rotated by c;
// the ring joins the nodes in order; the tree is a chain inside each node
// below its first rank, and the nodes form a heap-shaped binary tree whose
// links join node heads. Good enough to exercise printing, parsing and
// validation on uneven glLayouts.
func glHandGraph(perNode []int, channels int) *Graph {
	var nodes [][]int
	var nodeOf []int
	n := 0
	for nd, k := range perNode {
		var rs []int
		for i := 0; i < k; i++ {
			rs = append(rs, n)
			nodeOf = append(nodeOf, nd)
			n++
		}
		nodes = append(nodes, rs)
	}
	g := &Graph{NRanks: n, NNodes: len(perNode), Channels: channels, NodeOf: nodeOf}
	for c := 0; c < channels; c++ {
		var order []int
		intra := make([][]int, len(nodes))
		for i, rs := range nodes {
			for j := range rs {
				intra[i] = append(intra[i], rs[(j+c)%len(rs)])
			}
			order = append(order, intra[i]...)
		}
		rings := make([]RingLinks, n)
		for i, r := range order {
			rings[r] = RingLinks{Prev: order[(i+n-1)%n], Next: order[(i+1)%n]}
		}
		// Rotate the order so that it starts at rank 0, as NCCL prints it.
		k := glIndexOf(order, 0)
		order = append(order[k:len(order):len(order)], order[:k]...)
		trees := make([]TreeLinks, n)
		for r := range trees {
			trees[r] = TreeLinks{Up: -1, Down: [3]int{-1, -1, -1}}
		}
		addChild := func(p, ch int) {
			trees[ch].Up = p
			for i := range trees[p].Down {
				if trees[p].Down[i] == -1 {
					trees[p].Down[i] = ch
					return
				}
			}
			panic("no free down slot")
		}
		for i, rs := range intra {
			if i > 0 {
				addChild(intra[(i-1)/2][0], rs[0])
			}
			for j := 1; j < len(rs); j++ {
				addChild(rs[j-1], rs[j])
			}
		}
		d := glTreeDepths(trees)
		for r := range trees {
			trees[r].Depth = d[r]
		}
		g.RingOrder = append(g.RingOrder, order)
		g.Rings = append(g.Rings, rings)
		g.Trees = append(g.Trees, trees)
	}
	return g
}

var glLayouts = []struct {
	name     string
	perNode  []int
	channels int
}{
	{"1x1", []int{1}, 1},
	{"1x2", []int{2}, 2},
	{"1x4", []int{4}, 2},
	{"4x1", []int{1, 1, 1, 1}, 2},
	{"2x4", []int{4, 4}, 4},
	{"3x3", []int{3, 3, 3}, 2},
	{"uneven", []int{3, 1, 2, 4, 2}, 3},
	{"8x8", []int{8, 8, 8, 8, 8, 8, 8, 8}, 8},
}

func TestHandGraphsAreValid(t *testing.T) {
	for _, l := range glLayouts {
		g := glHandGraph(l.perNode, l.channels)
		if ps := ValidateGraph(g); len(ps) != 0 {
			t.Errorf("%s: %v", l.name, ps)
		}
	}
}

func TestFormatGraphLogFourRanks(t *testing.T) {
	// Two channels over 4 ranks on 4 nodes, written by hand.
	g := &Graph{
		NRanks: 4, NNodes: 4, Channels: 2,
		RingOrder: [][]int{{0, 1, 2, 3}, {0, 1, 2, 3}},
		Rings: [][]RingLinks{
			{{3, 1}, {0, 2}, {1, 3}, {2, 0}},
			{{3, 1}, {0, 2}, {1, 3}, {2, 0}},
		},
		Trees: [][]TreeLinks{
			{ // tree0: 0 -> 2 -> {1,3}
				{Up: -1, Down: [3]int{2, -1, -1}},
				{Up: 2, Down: [3]int{-1, -1, -1}},
				{Up: 0, Down: [3]int{1, 3, -1}},
				{Up: 2, Down: [3]int{-1, -1, -1}},
			},
			{ // tree1: 3 -> 1 -> {2,0}
				{Up: 1, Down: [3]int{-1, -1, -1}},
				{Up: 3, Down: [3]int{2, 0, -1}},
				{Up: 1, Down: [3]int{-1, -1, -1}},
				{Up: -1, Down: [3]int{1, -1, -1}},
			},
		},
	}
	want0 := []string{
		"Tree 0 : -1 -> 0 -> 2/-1/-1",
		"Tree 1 : 1 -> 0 -> -1/-1/-1",
		"Channel 00/02 :    0   1   2   3",
		"Channel 01/02 :    0   1   2   3",
		"Ring 00 : 3 -> 0 -> 1",
		"Ring 01 : 3 -> 0 -> 1",
		"Trees [0] 2/-1/-1->0->-1 [1] -1/-1/-1->0->1",
	}
	if got := FormatGraphLog(g, 0); !reflect.DeepEqual(got, want0) {
		t.Errorf("rank 0:\n got %q\nwant %q", got, want0)
	}
	want2 := []string{
		"Tree 0 : 0 -> 2 -> 1/3/-1",
		"Tree 1 : 1 -> 2 -> -1/-1/-1",
		"Ring 00 : 1 -> 2 -> 3",
		"Ring 01 : 1 -> 2 -> 3",
		"Trees [0] 1/3/-1->2->0 [1] -1/-1/-1->2->1",
	}
	if got := FormatGraphLog(g, 2); !reflect.DeepEqual(got, want2) {
		t.Errorf("rank 2:\n got %q\nwant %q", got, want2)
	}
	if ps := ValidateGraph(g); len(ps) != 0 {
		t.Errorf("valid graph: %v", ps)
	}
}

func TestFormatChannelWidths(t *testing.T) {
	g := glHandGraph([]int{120}, 1)
	lines := FormatGraphLog(g, 0)
	var ch string
	for _, l := range lines {
		if strings.HasPrefix(l, "Channel") {
			ch = l
		}
	}
	if !strings.HasPrefix(ch, "Channel 00/01 :    0   1   2") || !strings.HasSuffix(ch, " 118 119") {
		t.Errorf("channel line %q", ch)
	}
	if len(ch) != len("Channel 00/01 : ")+4*120 {
		t.Errorf("channel line is %d bytes, want %d", len(ch), len("Channel 00/01 : ")+4*120)
	}
	// Channels past 99 widen.
	g = glHandGraph([]int{2}, 101)
	lines = FormatGraphLog(g, 0)
	if !glContains(lines, "Channel 100/101 :    0   1") || !glContains(lines, "Ring 100 : 1 -> 0 -> 1") || !glContains(lines, "Tree 100 : -1 -> 0 -> 1/-1/-1") {
		t.Errorf("wide channel numbers missing in %q", lines[len(lines)-3:])
	}
}

func glContains(lines []string, s string) bool {
	for _, l := range lines {
		if l == s {
			return true
		}
	}
	return false
}

// glLogOf writes every rank's lines with an NCCL- or gotree-style prefix
// (host from g.NodeOf, else r/perNode), each rank's block twice and in
// reverse rank order, with unrelated lines around them.
func glLogOf(g *Graph, lib string, perNode int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "host0:100:100 [0] %s INFO Bootstrap : Using eth0:10.0.0.1<0>\n", lib)
	fmt.Fprintf(&b, "host0:100:100 [0] %s INFO comm 0x5555 rank 0 nRanks %d nNodes %d localRanks %d localRank 0 MNNVL 0\n", lib, g.NRanks, g.NNodes, perNode)
	for rep := 0; rep < 2; rep++ {
		for r := g.NRanks - 1; r >= 0; r-- {
			node := r / perNode
			if g.NodeOf != nil {
				node = g.NodeOf[r]
			}
			host := fmt.Sprintf("host%d", node)
			pfx := fmt.Sprintf("%s:%d:%d [%d] %s INFO ", host, 1000+r, 2000+r, r%perNode, lib)
			for _, l := range FormatGraphLog(g, r) {
				b.WriteString(pfx + l + "\n")
			}
			b.WriteString(pfx + "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n")
			b.WriteString(pfx + "Connected all rings\n")
			b.WriteString("some unrelated output: Ring of fire, Tree 0 planted\n")
		}
	}
	return b.String()
}

func glSameLinks(t *testing.T, name string, got, want *Graph) {
	t.Helper()
	if got.NRanks != want.NRanks || got.Channels != want.Channels || got.NNodes != want.NNodes {
		t.Fatalf("%s: got %d ranks %d nodes %d channels, want %d %d %d", name,
			got.NRanks, got.NNodes, got.Channels, want.NRanks, want.NNodes, want.Channels)
	}
	if !reflect.DeepEqual(got.Rings, want.Rings) {
		t.Errorf("%s: rings differ\n got %v\nwant %v", name, got.Rings, want.Rings)
	}
	if !reflect.DeepEqual(got.RingOrder, want.RingOrder) {
		t.Errorf("%s: ring orders differ\n got %v\nwant %v", name, got.RingOrder, want.RingOrder)
	}
	for c := range want.Trees {
		for r := range want.Trees[c] {
			g, w := got.Trees[c][r], want.Trees[c][r]
			if g.Up != w.Up || g.Down != w.Down {
				t.Errorf("%s: channel %d rank %d tree %v, want %v", name, c, r, g, w)
			}
		}
	}
}

func TestParseGraphLogRoundTrip(t *testing.T) {
	for _, l := range glLayouts {
		for _, lib := range []string{"NCCL", "GOTREE"} {
			want := glHandGraph(l.perNode, l.channels)
			got, warns, err := ParseGraphLog(strings.NewReader(glLogOf(want, lib, l.perNode[0])))
			if err != nil {
				t.Fatalf("%s/%s: %v", l.name, lib, err)
			}
			if len(warns) != 0 {
				t.Errorf("%s/%s: warnings %v", l.name, lib, warns)
			}
			glSameLinks(t, l.name+"/"+lib, got, want)
			if !reflect.DeepEqual(got.Trees, want.Trees) {
				t.Errorf("%s/%s: depths differ", l.name, lib)
			}
			if ps := ValidateGraph(got); len(ps) != 0 {
				t.Errorf("%s/%s: %v", l.name, lib, ps)
			}
		}
	}
}

func TestParseGraphLogBareLines(t *testing.T) {
	// Lines without any prefix, as FormatGraphLog returns them; no
	// nRanks line and no hosts, so NNodes is unknown (0).
	want := glHandGraph([]int{2, 2, 2}, 2)
	var b strings.Builder
	for r := 0; r < want.NRanks; r++ {
		for _, l := range FormatGraphLog(want, r) {
			b.WriteString(l + "\r\n")
		}
	}
	got, warns, err := ParseGraphLog(strings.NewReader(b.String()))
	if err != nil || len(warns) != 0 {
		t.Fatalf("err %v warnings %v", err, warns)
	}
	want.NNodes = 0
	glSameLinks(t, "bare", got, want)
}

func TestParseGraphLogGotreeCommLine(t *testing.T) {
	// gotree's own INIT line gives the counts; one host simulating two
	// nodes leaves NodeOf unknown.
	want := glHandGraph([]int{2, 2}, 1)
	var b strings.Builder
	b.WriteString("box:7:7 [0] GOTREE INFO comm rank 0 nranks 4 nnodes 2 channels 1 init done in 3.0 ms\n")
	for r := 0; r < 4; r++ {
		for _, l := range FormatGraphLog(want, r) {
			fmt.Fprintf(&b, "box:7:7 [%d] GOTREE INFO %s\n", r, l)
		}
	}
	got, warns, err := ParseGraphLog(strings.NewReader(b.String()))
	if err != nil || len(warns) != 0 {
		t.Fatalf("err %v warnings %v", err, warns)
	}
	glSameLinks(t, "gotree comm line", got, want)
	if got.NodeOf != nil {
		t.Errorf("NodeOf %v from one host", got.NodeOf)
	}
}

func TestParseGraphLogHostsGiveNodes(t *testing.T) {
	want := glHandGraph([]int{2, 2, 2}, 1)
	log := glLogOf(want, "NCCL", 2)
	// Drop the "nRanks .. nNodes .." line: nodes then come from host names.
	var kept []string
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, "nNodes") {
			kept = append(kept, l)
		}
	}
	got, warns, err := ParseGraphLog(strings.NewReader(strings.Join(kept, "\n")))
	if err != nil || len(warns) != 0 {
		t.Fatalf("err %v warnings %v", err, warns)
	}
	if got.NNodes != 3 {
		t.Errorf("NNodes %d, want 3", got.NNodes)
	}
}

func TestParseGraphLogRealNCCLShapes(t *testing.T) {
	// Shapes as NCCL prints them: Tree lines only on heads, Channel lines
	// only on rank 0, a torchrun prefix, a Trees line from NCCL 2.4-2.6
	// with a second tree after '|'.
	log := `[rank0]:node1:4242:4242 [0] NCCL INFO Channel 00/02 :    0   1
node1:4242:4242 [0] NCCL INFO Channel 01/02 :    0   1
node1:4242:4300 [0] NCCL INFO Ring 00 : 1 -> 0 -> 1
node1:4242:4300 [0] NCCL INFO Ring 01 : 1 -> 0 -> 1
node1:4242:4300 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1|-1->0->1/-1/-1
node1:4243:4301 [1] NCCL INFO Ring 00 : 0 -> 1 -> 0
node1:4243:4301 [1] NCCL INFO Ring 01 : 0 -> 1 -> 0
node1:4243:4301 [1] NCCL INFO Trees [0] -1/-1/-1->1->0 [1] -1/-1/-1->1->0
node1:4243:4301 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read
`
	g, warns, err := ParseGraphLog(strings.NewReader(log))
	if err != nil || len(warns) != 0 {
		t.Fatalf("err %v warnings %v", err, warns)
	}
	if g.NRanks != 2 || g.Channels != 2 || g.NNodes != 1 {
		t.Fatalf("got %d ranks %d channels %d nodes", g.NRanks, g.Channels, g.NNodes)
	}
	if ps := ValidateGraph(g); len(ps) != 0 {
		t.Errorf("%v", ps)
	}
	if g.Trees[1][1].Depth != 1 || g.Trees[1][0].Depth != 0 {
		t.Errorf("depths %v", g.Trees[1])
	}
}

func TestParseGraphLogChannelLinesOnly(t *testing.T) {
	// Default NCCL_DEBUG_SUBSYS has no GRAPH: no Ring lines, the rings
	// come from rank 0's Channel lines.
	want := glHandGraph([]int{3, 3}, 2)
	var b strings.Builder
	for r := 0; r < want.NRanks; r++ {
		for _, l := range FormatGraphLog(want, r) {
			if !strings.HasPrefix(l, "Ring ") && !strings.HasPrefix(l, "Tree ") {
				b.WriteString("h:1:1 [0] NCCL INFO " + l + "\n")
			}
		}
	}
	got, warns, err := ParseGraphLog(strings.NewReader(b.String()))
	if err != nil || len(warns) != 0 {
		t.Fatalf("err %v warnings %v", err, warns)
	}
	want.NNodes = 1 // one host name in the prefixes
	glSameLinks(t, "channel-only", got, want)
}

func TestParseGraphLogWarnings(t *testing.T) {
	cases := []struct {
		name, log, warn string
	}{
		{"conflict", "Ring 00 : 1 -> 0 -> 1\nRing 00 : 1 -> 0 -> 2\nRing 00 : 0 -> 1 -> 0\n",
			"line 2: channel 0 rank 0: ring 1 -> 0 -> 2 disagrees with line 1"},
		{"tree conflict", "Trees [0] 1/-1/-1->0->-1\nTree 0 : -1 -> 0 -> 2/-1/-1\nTrees [0] -1/-1/-1->1->0\n",
			"line 2: channel 0 rank 0: Tree line disagrees with line 1"},
		{"missing ring", "Ring 00 : 1 -> 0 -> 1\nTrees [0] 1/-1/-1->0->-1\nTrees [0] -1/-1/-1->1->0\n",
			"channel 0: no Ring line for rank 1"},
		{"missing tree", "Ring 00 : 1 -> 0 -> 1\nRing 00 : 0 -> 1 -> 0\nTrees [0] 1/-1/-1->0->-1\n",
			"channel 0: no Tree or Trees entry for rank 1"},
		{"bad entry", "Trees [0] 1/-1->0->-1 [1] 1/-1/-1->0->-1\n", `Trees entry [0] "1/-1->0->-1" not understood`},
		{"nranks", "x INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2\nRing 00 : 2 -> 0 -> 1\n", "log names rank 2 but says nRanks 2"},
		{"cut order", "Channel 00/01 :    0   2\nRing 00 : 2 -> 0 -> 1\nRing 00 : 0 -> 1 -> 2\nRing 00 : 1 -> 2 -> 0\n",
			"line 1: channel 0: ring order (cut after 2 ranks) disagrees with the Ring lines"},
	}
	for _, c := range cases {
		_, warns, err := ParseGraphLog(strings.NewReader(c.log))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		found := false
		for _, w := range warns {
			if strings.Contains(w.String(), c.warn) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: warnings %v, want one containing %q", c.name, warns, c.warn)
		}
	}
}

func TestParseGraphLogCutTreesLine(t *testing.T) {
	// A Trees line as long as NCCL's buffer: its last entry is dropped.
	var b strings.Builder
	b.WriteString("Trees")
	c := 0
	for b.Len() < 5+glNCCLTreesMax-20 {
		fmt.Fprintf(&b, " [%d] 1/-1/-1->0->-1", c)
		c++
	}
	s := b.String()
	s += " [99] 1/-1/-1->0->-1"
	s = s[:5+glNCCLTreesMax] // cut as snprintf would
	g, warns, err := ParseGraphLog(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	if g.Channels != c {
		t.Errorf("channels %d, want %d", g.Channels, c)
	}
	if len(warns) == 0 || !strings.Contains(warns[0].Msg, "may be cut") {
		t.Errorf("warnings %v", warns)
	}
}

func TestParseGraphLogErrors(t *testing.T) {
	for _, log := range []string{"", "nothing to see\nNCCL INFO Connected all rings\n", "Ring 00 : x -> 0 -> 1\n"} {
		if _, _, err := ParseGraphLog(strings.NewReader(log)); err == nil {
			t.Errorf("%q: no error", log)
		}
	}
	// A rank and a channel that are each allowed but together too many.
	if _, _, err := ParseGraphLog(strings.NewReader("Ring 1000 : 1 -> 65000 -> 1\n")); err == nil || !strings.Contains(err.Error(), "links in all") {
		t.Errorf("huge graph: err %v", err)
	}
	// Out-of-range numbers are warned about, not allocated.
	_, warns, err := ParseGraphLog(strings.NewReader("Ring 00 : 0 -> 99999999 -> 1\nRing 99999 : 1 -> 0 -> 1\nRing 00 : 1 -> 0 -> 1\n"))
	if err != nil || len(warns) < 2 {
		t.Errorf("err %v warnings %v", err, warns)
	}
}

func TestTreeDepths(t *testing.T) {
	T := func(up int) TreeLinks { return TreeLinks{Up: up} }
	cases := []struct {
		links []TreeLinks
		want  []int
	}{
		{[]TreeLinks{T(-1)}, []int{0}},
		{[]TreeLinks{T(-1), T(0), T(1), T(1)}, []int{0, 1, 2, 2}},
		{[]TreeLinks{T(3), T(2), T(-1), T(1)}, []int{3, 1, 0, 2}},
		{[]TreeLinks{T(1), T(0), T(1), T(-1)}, []int{-1, -1, -1, 0}},
		{[]TreeLinks{T(7), T(0), T(-5)}, []int{-1, -1, -1}},
	}
	for _, c := range cases {
		if got := glTreeDepths(c.links); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%v: got %v want %v", c.links, got, c.want)
		}
	}
}

// glBuilt builds a graph with BuildGraph or fails the test.
func glBuilt(t testing.TB, l Layout) *Graph {
	t.Helper()
	g, err := BuildGraph(l)
	if err != nil {
		t.Fatalf("BuildGraph(%+v): %v", l, err)
	}
	return g
}

// glFixtureLayouts are the layouts of the good logs under
// testdata/graphlog.
var glFixtureLayouts = []struct {
	name string
	l    Layout
}{
	{"2x4-balanced", UniformLayout(2, 4, 1, BalancedTree)},
	{"uneven-split", Layout{NodeOf: []int{7, 7, 7, 3, 5, 5}, Channels: 2, Pattern: SplitTree,
		Intra: [][][]int{{{0, 1, 2}, {3}, {4, 5}}, {{2, 0, 1}, {3}, {5, 4}}}}},
	{"4x1-tree", UniformLayout(4, 1, 1, TreePattern)},
	{"1x8", UniformLayout(1, 8, 2, BalancedTree)},
}

// glFixtures returns the testdata logs by file name: good ones written
// from BuildGraph's graphs, bad ones from a 2x4 graph broken on purpose.
func glFixtures(t testing.TB) map[string]string {
	files := make(map[string]string)
	for i, f := range glFixtureLayouts {
		lib := "NCCL"
		if i%2 == 1 {
			lib = "GOTREE"
		}
		g := glBuilt(t, f.l)
		perNode := 0
		for _, nd := range g.NodeOf {
			if nd == 0 {
				perNode++
			}
		}
		files["good-"+f.name+".log"] = glLogOf(g, lib, perNode)
	}
	breakers := []struct {
		name   string
		c      int
		break_ func(g *Graph, c int)
	}{
		// Ranks 1 -> 2 -> 3 of node 0 loop: 1's up is 3, 3's child is 1.
		{"cycle", 0, func(g *Graph, c int) {
			tr := g.Trees[c]
			tr[0].Down = [3]int{4, -1, -1}
			tr[1].Up = 3
			tr[3].Down[0] = 1
		}},
		// Node 1's head leaves the tree and becomes a second root.
		{"two-roots", 0, func(g *Graph, c int) {
			tr := g.Trees[c]
			tr[0].Down = [3]int{1, -1, -1}
			tr[4].Up = -1
		}},
		// Rank 6 names 4 as its parent; 5 still lists 6 as its child.
		{"parent-child", 1, func(g *Graph, c int) {
			g.Trees[c][6].Up = 4
		}},
		// Rank 5 skips 6: 5 -> 7, while 6 still says 5 -> 6 -> 7.
		{"broken-ring", 1, func(g *Graph, c int) {
			g.Rings[c][5].Next = 7
			g.Rings[c][7].Prev = 5
			g.RingOrder[c] = nil
		}},
	}
	for _, b := range breakers {
		g := glBuilt(t, UniformLayout(2, 4, 1, BalancedTree))
		b.break_(g, b.c)
		files["bad-"+b.name+".log"] = glLogOf(g, "NCCL", 4)
	}
	return files
}

// glBadRanks are the channel and rank each bad log must be blamed on.
var glBadRanks = map[string]Problem{
	"bad-cycle.log":        {Channel: 0, Rank: 1},
	"bad-two-roots.log":    {Channel: 0, Rank: 4},
	"bad-parent-child.log": {Channel: 1, Rank: 6},
	"bad-broken-ring.log":  {Channel: 1, Rank: 5},
}

// TestGoldenLogs checks the logs under testdata/graphlog: good-*.log must
// parse without warnings or problems; bad-*.log must give the problems in
// the matching .want file, one of them on the expected channel and rank.
// -rewrite-graphlog regenerates the logs and the .want files.
func TestGoldenLogs(t *testing.T) {
	dir := filepath.Join("testdata", "graphlog")
	if *glRewrite {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, log := range glFixtures(t) {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(log), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(files) < len(glFixtureLayouts)+len(glBadRanks) {
		t.Fatalf("only %d logs in %s (run with -rewrite-graphlog)", len(files), dir)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		g, warns, err := ParseGraphLog(bytes.NewReader(data))
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		ps := ValidateGraph(g)
		var out strings.Builder
		fmt.Fprintf(&out, "ranks %d nodes %d channels %d\n", g.NRanks, g.NNodes, g.Channels)
		for _, w := range warns {
			fmt.Fprintf(&out, "warning: %s\n", w)
		}
		for _, p := range ps {
			fmt.Fprintf(&out, "problem: %s\n", p)
		}
		want := strings.TrimSuffix(f, ".log") + ".want"
		if *glRewrite {
			if err := os.WriteFile(want, []byte(out.String()), 0o644); err != nil {
				t.Fatal(err)
			}
		} else if w, err := os.ReadFile(want); err != nil {
			t.Errorf("%s: %v (run with -rewrite-graphlog)", f, err)
		} else if out.String() != string(w) {
			t.Errorf("%s:\n got:\n%s\nwant:\n%s", f, out.String(), w)
		}
		base := filepath.Base(f)
		if strings.HasPrefix(base, "good-") && (len(warns) != 0 || len(ps) != 0) {
			t.Errorf("%s: good log has warnings %v problems %v", f, warns, ps)
		}
		if blame, ok := glBadRanks[base]; ok {
			found := false
			for _, p := range ps {
				if p.Channel == blame.Channel && p.Rank == blame.Rank {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: no problem on channel %d rank %d in %v", f, blame.Channel, blame.Rank, ps)
			}
		}
	}
}

// TestBuildGraphLogRoundTrip prints BuildGraph's graphs for many layouts as
// every rank's log and reads them back.
func TestBuildGraphLogRoundTrip(t *testing.T) {
	var ls []Layout
	for _, p := range []Pattern{BalancedTree, SplitTree, TreePattern, RingPattern} {
		for _, nn := range []int{1, 2, 3, 4, 5, 8, 16} {
			for _, k := range []int{1, 2, 3, 8} {
				ls = append(ls, UniformLayout(nn, k, 1+nn%3, p))
			}
		}
		ls = append(ls, Layout{NodeOf: []int{0, 1, 1, 2, 2, 2, 0, 3}, Channels: 3, Pattern: p})
	}
	for _, l := range ls {
		want := glBuilt(t, l)
		if ps := ValidateGraph(want); len(ps) != 0 {
			t.Errorf("%+v: BuildGraph's graph: %v", l, ps)
			continue
		}
		perNode := 0
		for _, nd := range want.NodeOf {
			if nd == want.NodeOf[0] {
				perNode++
			}
		}
		got, warns, err := ParseGraphLog(strings.NewReader(glLogOf(want, "GOTREE", perNode)))
		if err != nil || len(warns) != 0 {
			t.Fatalf("%+v: err %v warnings %v", l, err, warns)
		}
		glSameLinks(t, fmt.Sprintf("%+v", l), got, want)
		for c := range want.Trees {
			for r := range want.Trees[c] {
				if got.Trees[c][r].Depth != want.Trees[c][r].Depth {
					t.Errorf("%+v: channel %d rank %d depth %d, want %d", l, c, r, got.Trees[c][r].Depth, want.Trees[c][r].Depth)
				}
			}
		}
		if ps := ValidateGraph(got); len(ps) != 0 {
			t.Errorf("%+v: %v", l, ps)
		}
	}
}

func FuzzParseGraphLog(f *testing.F) {
	f.Add(glLogOf(glHandGraph([]int{2, 1}, 2), "NCCL", 2))
	f.Add("Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1|-1->0->1/-1/-1\nChannel 00/02 :    0   1\n")
	f.Add("Tree 3 : -1 -> 0 -> 1/2/3\nRing 7 : 3 -> 0 -> 1\n")
	f.Fuzz(func(t *testing.T, log string) {
		g, _, err := ParseGraphLog(strings.NewReader(log))
		if err != nil {
			return
		}
		// Whatever parses must be printable and checkable without panics,
		// and printing a sound graph must give it back.
		ps := ValidateGraph(g)
		for r := 0; r < g.NRanks && r < 8; r++ {
			FormatGraphLog(g, r)
		}
		if len(ps) == 0 {
			var b strings.Builder
			for r := 0; r < g.NRanks; r++ {
				for _, l := range FormatGraphLog(g, r) {
					b.WriteString(l + "\n")
				}
			}
			g2, _, err := ParseGraphLog(strings.NewReader(b.String()))
			if err != nil {
				t.Fatal(err)
			}
			g.NNodes = 0
			if !reflect.DeepEqual(g.Rings, g2.Rings) || !reflect.DeepEqual(g.Trees, g2.Trees) {
				t.Fatalf("round trip differs")
			}
		}
	})
}

func TestParseGraphLogOldOrderShapes(t *testing.T) {
	// NCCL 2.3 and 2.4 printed the ring order as "Ring 00 :" and
	// "Channel 00 :"; their transport lines look alike and are ignored.
	for _, log := range []string{
		"h:1:1 [0] NCCL INFO Ring 00 :    0   2   1\nh:1:1 [0] NCCL INFO Ring 00 : 0[0] -> 2[2] via P2P/IPC\n",
		"h:1:1 [0] NCCL INFO Channel 00 :    0   2   1\nh:1:1 [0] NCCL INFO Ring 00 : 0 -> 2 [send] via NET/IB/0\n",
	} {
		g, _, err := ParseGraphLog(strings.NewReader(log))
		if err != nil {
			t.Fatal(err)
		}
		want := [][]RingLinks{{{Prev: 1, Next: 2}, {Prev: 2, Next: 0}, {Prev: 0, Next: 1}}}
		if g.NRanks != 3 || g.Channels != 1 || !reflect.DeepEqual(g.Rings, want) || !reflect.DeepEqual(g.RingOrder, [][]int{{0, 2, 1}}) {
			t.Errorf("%q: got %+v", log, g)
		}
	}
}

func TestParseGraphLogNewChannelShape(t *testing.T) {
	// NCCL 2.23+: ranks as wide as the largest, the line cut at 127 bytes
	// ending in "...". With Ring lines for every rank the cut order is
	// only checked against them.
	want := glHandGraph([]int{40}, 1)
	line := "Channel 00/01 :"
	for _, r := range want.RingOrder[0] {
		line += fmt.Sprintf(" %2d", r)
	}
	line = line[:124] + "..."
	var b strings.Builder
	b.WriteString("h:1:1 [0] NCCL INFO " + line + "\n")
	for r := 0; r < want.NRanks; r++ {
		for _, l := range FormatGraphLog(want, r) {
			if !strings.HasPrefix(l, "Channel") {
				b.WriteString("h:1:1 [0] NCCL INFO " + l + "\n")
			}
		}
	}
	got, warns, err := ParseGraphLog(strings.NewReader(b.String()))
	if err != nil || len(warns) != 0 {
		t.Fatalf("err %v warnings %v", err, warns)
	}
	want.NNodes = 1
	glSameLinks(t, "2.23 channel line", got, want)

	// Cut one byte later, a partial number sits before "...": dropped.
	partial := strings.Replace(b.String(), line, line[:123]+" 3...", 1)
	if _, warns, err = ParseGraphLog(strings.NewReader(partial)); err != nil || len(warns) != 0 {
		t.Fatalf("err %v warnings %v", err, warns)
	}

	// The same cut line disagreeing with the Ring lines is reported.
	bad := strings.Replace(b.String(), "Channel 00/01 :  0  1  2", "Channel 00/01 :  0  2  1", 1)
	_, warns, err = ParseGraphLog(strings.NewReader(bad))
	if err != nil || len(warns) != 1 || !strings.Contains(warns[0].String(), "line 1: channel 0: ring order (cut after 36 ranks) disagrees") {
		t.Fatalf("err %v warnings %v", err, warns)
	}
}

func TestValidateGraphCapsProblems(t *testing.T) {
	// 4096 ranks with no links: thousands of problems per channel, only
	// the first glMaxProblems of the tree and of the ring are kept.
	g, _, err := ParseGraphLog(strings.NewReader("Ring 01 : 1 -> 4095 -> 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	ps := ValidateGraph(g)
	if len(ps) != 2*2*(glMaxProblems+1) {
		t.Fatalf("%d problems", len(ps))
	}
	last := ps[len(ps)-1]
	if last.Channel != 1 || last.Rank != -1 || !strings.HasPrefix(last.Msg, "and more problems: ") {
		t.Errorf("last problem %v", last)
	}
	if ps[0].Channel != 0 || ps[0].Rank < 0 {
		t.Errorf("first problem %v", ps[0])
	}
}

func ExampleFormatGraphLog() {
	g, err := BuildGraph(UniformLayout(4, 1, 1, BalancedTree))
	if err != nil {
		panic(err)
	}
	for _, l := range FormatGraphLog(g, 0) {
		fmt.Println(l)
	}
	// Output:
	// Tree 0 : -1 -> 0 -> 2/-1/-1
	// Tree 1 : 1 -> 0 -> -1/-1/-1
	// Channel 00/02 :    0   1   2   3
	// Channel 01/02 :    0   1   2   3
	// Ring 00 : 3 -> 0 -> 1
	// Ring 01 : 3 -> 0 -> 1
	// Trees [0] 2/-1/-1->0->-1 [1] -1/-1/-1->0->1
}

func ExampleValidateGraph() {
	log := `host:1:1 [0] NCCL INFO Ring 00 : 2 -> 0 -> 1
host:1:1 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1
host:2:2 [1] NCCL INFO Ring 00 : 0 -> 1 -> 2
host:2:2 [1] NCCL INFO Trees [0] 2/-1/-1->1->0
host:3:3 [2] NCCL INFO Ring 00 : 1 -> 2 -> 0
host:3:3 [2] NCCL INFO Trees [0] -1/-1/-1->2->0
`
	g, _, err := ParseGraphLog(strings.NewReader(log))
	if err != nil {
		panic(err)
	}
	for _, p := range ValidateGraph(g) {
		fmt.Println(p)
	}
	// Output:
	// channel 0: tree has 3 edges, want 2
	// channel 0 rank 1: tree lists child 2 but rank 2's up is 0
	// channel 0 rank 2: tree up is 0 but rank 0's down is 1/-1/-1
}
