package algorithms

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// This file prints a Graph as the log lines NCCL prints at INFO level
// (subsystems INIT and GRAPH) and reads such lines back, from NCCL's logs
// or from gotree's own.
//
// The four line shapes (message text only; a logger adds its prefix such as
// "host:pid:tid [dev] NCCL INFO "):
//
//	Tree 0 : -1 -> 0 -> 1/-1/-1           one channel's tree: up -> rank -> down0/down1/down2
//	Channel 00/04 :    0   1   2   3      one channel's ring order, seen from rank 0
//	Ring 00 : 3 -> 0 -> 1                 one channel's ring: prev -> rank -> next
//	Trees [0] 1/-1/-1->0->-1 [1] ...      every channel's tree: downs->rank->up
//
// Channel lines have had two shapes: up to NCCL 2.22 "Channel 00/04 : "
// followed by " %3d" per rank, only the first 20 ranks; from 2.23
// "Channel 00/04 :" followed by each rank right-aligned to the width of the
// largest rank, cut at 127 bytes whose last three become "...". gotree
// prints the first shape, which the issue and older tools expect, without
// the 20-rank limit. The parser reads both.
//
// Other differences from NCCL, all deliberate: NCCL prints "Tree" lines
// only on the ranks that head their node's tree and cuts the "Trees" line
// after 1027 bytes; gotree prints "Tree" lines on every rank and never
// cuts a line.

// FormatGraphLog returns the lines that rank logs for g, in NCCL's order:
// the Tree lines, then (rank 0 only) the Channel lines, then the Ring lines
// and the Trees line. Channel numbers in Channel and Ring lines are two
// digits wide (wider from 100 on) and ranks in Channel lines right-aligned
// in three columns after a space, as NCCL up to 2.22 prints them.
func FormatGraphLog(g *Graph, rank int) []string {
	if g == nil || rank < 0 || rank >= g.NRanks {
		return nil
	}
	var lines []string
	for c := 0; c < g.Channels; c++ {
		t := glTreeAt(g, c, rank)
		lines = append(lines, fmt.Sprintf("Tree %d : %d -> %d -> %d/%d/%d", c, t.Up, rank, t.Down[0], t.Down[1], t.Down[2]))
	}
	if rank == 0 {
		for c := 0; c < g.Channels; c++ {
			var b strings.Builder
			fmt.Fprintf(&b, "Channel %02d/%02d : ", c, g.Channels)
			for _, r := range glRingOrderOf(g, c) {
				fmt.Fprintf(&b, " %3d", r)
			}
			lines = append(lines, b.String())
		}
	}
	var trees strings.Builder
	trees.WriteString("Trees")
	for c := 0; c < g.Channels; c++ {
		l := glRingAt(g, c, rank)
		lines = append(lines, fmt.Sprintf("Ring %02d : %d -> %d -> %d", c, l.Prev, rank, l.Next))
		t := glTreeAt(g, c, rank)
		fmt.Fprintf(&trees, " [%d] %d/%d/%d->%d->%d", c, t.Down[0], t.Down[1], t.Down[2], rank, t.Up)
	}
	lines = append(lines, trees.String())
	return lines
}

func glTreeAt(g *Graph, c, r int) TreeLinks {
	if c < len(g.Trees) && r < len(g.Trees[c]) {
		return g.Trees[c][r]
	}
	return TreeLinks{Up: -1, Down: [3]int{-1, -1, -1}, Depth: -1}
}

func glRingAt(g *Graph, c, r int) RingLinks {
	if c < len(g.Rings) && r < len(g.Rings[c]) {
		return g.Rings[c][r]
	}
	return RingLinks{Prev: -1, Next: -1}
}

// glRingOrderOf is g.RingOrder[c] when set, else the walk along Next from
// rank 0, stopped at the first repeat, -1 or out-of-range rank.
func glRingOrderOf(g *Graph, c int) []int {
	if c < len(g.RingOrder) && len(g.RingOrder[c]) > 0 {
		return g.RingOrder[c]
	}
	return glWalkRing(g, c, 0)
}

func glWalkRing(g *Graph, c, start int) []int {
	var order []int
	seen := make(map[int]bool)
	for r := start; r >= 0 && r < g.NRanks && !seen[r]; r = glRingAt(g, c, r).Next {
		seen[r] = true
		order = append(order, r)
	}
	return order
}

// Warning is something odd in a log that ParseGraphLog worked around: a
// duplicate line that disagrees with an earlier one, a cut line, a rank or
// channel for which no line was found. Line is 1-based, 0 when the warning
// is about the log as a whole.
type Warning struct {
	Line int
	Msg  string
}

func (w Warning) String() string {
	if w.Line == 0 {
		return w.Msg
	}
	return fmt.Sprintf("line %d: %s", w.Line, w.Msg)
}

// glNCCLTreesMax is the longest text NCCL keeps after "Trees" (its buffer is
// 1024 bytes with the last one reserved); a line this long may be cut.
const glNCCLTreesMax = 1022

var (
	glReTreeLine = regexp.MustCompile(`(?:^|\s)Tree (\d+) : (-?\d+) -> (-?\d+) -> (-?\d+)/(-?\d+)/(-?\d+)\s*$`)
	glReRingLine = regexp.MustCompile(`(?:^|\s)Ring (\d+) : (-?\d+) -> (-?\d+) -> (-?\d+)\s*$`)
	// A ring order: "Channel 00/04 : ..." since NCCL 2.5, "Channel 00 : ..."
	// in 2.4, "Ring 00 : ..." in 2.3.
	glReOrderLine = regexp.MustCompile(`(?:^|\s)(?:Channel (\d+)(?:/(\d+))?|Ring (\d+)) :((?: +-?\d+)+)( ?\.\.\.)?\s*$`)
	glReTreesLine = regexp.MustCompile(`(?:^|\s)Trees((?: \[\d+\] [-0-9/>|]*)+)\s*$`)
	glReTreesItem = regexp.MustCompile(`\[(\d+)\] ([-0-9/>|]*)`)
	// One Trees entry; NCCL 2.4-2.6 appended "|up->rank->downs" of a second
	// (broadcast) tree, which is ignored.
	glReTreesBody = regexp.MustCompile(`^(-?\d+)/(-?\d+)/(-?\d+)->(\d+)->(-?\d+)(?:\|.*)?$`)
	// NCCL: "comm 0x.. rank 0 nRanks 8 nNodes 2 ..."; gotree: "comm rank 0
	// nranks 8 nnodes 2 ...".
	glReCommLine = regexp.MustCompile(`(?i)\bnranks (\d+) nnodes (\d+)\b`)
	glReHost     = regexp.MustCompile(`([^\s:\[\]]+):\d+:\d+ \[\d+\] (?:NCCL|GOTREE) INFO `)
)

type glKey struct{ c, r int }

type glSeenTree struct {
	t    TreeLinks
	line int
}

type glSeenRing struct {
	l    RingLinks
	line int
}

type glParser struct {
	warns  []Warning
	trees  map[glKey]glSeenTree
	rings  map[glKey]glSeenRing
	orders map[int][]int // channel -> ring order from a Channel line
	orderL map[int]int   // channel -> line of that order
	hosts  map[int]string
	maxC   int // highest channel seen, -1 if none
	maxR   int // highest rank referenced, -1 if none
	nRanks int // from a "nRanks N nNodes M" line, 0 if none
	nNodes int
	found  bool
}

func (p *glParser) warn(line int, format string, args ...any) {
	p.warns = append(p.warns, Warning{Line: line, Msg: fmt.Sprintf(format, args...)})
}

func (p *glParser) see(c int, ranks ...int) {
	p.found = true
	p.maxC = max(p.maxC, c)
	for _, r := range ranks {
		p.maxR = max(p.maxR, r)
	}
}

func (p *glParser) addTree(line, c, r int, t TreeLinks, what string) {
	p.see(c, append([]int{r, t.Up}, t.Down[:]...)...)
	k := glKey{c, r}
	if old, ok := p.trees[k]; ok {
		if old.t != t {
			p.warn(line, "channel %d rank %d: %s disagrees with line %d (%s vs %s); keeping line %d",
				c, r, what, old.line, glFmtTree(t), glFmtTree(old.t), old.line)
		}
		return
	}
	p.trees[k] = glSeenTree{t, line}
}

func (p *glParser) addRing(line, c, r int, l RingLinks) {
	p.see(c, r, l.Prev, l.Next)
	k := glKey{c, r}
	if old, ok := p.rings[k]; ok {
		if old.l != l {
			p.warn(line, "channel %d rank %d: ring %d -> %d -> %d disagrees with line %d (%d -> %d -> %d); keeping line %d",
				c, r, l.Prev, r, l.Next, old.line, old.l.Prev, r, old.l.Next, old.line)
		}
		return
	}
	p.rings[k] = glSeenRing{l, line}
}

func (p *glParser) addOrder(line, c, total int, order []int) {
	p.see(c, order...)
	p.maxC = max(p.maxC, total-1)
	if old, ok := p.orders[c]; ok {
		if !slices.Equal(old, order) {
			p.warn(line, "channel %d: ring order disagrees with line %d; keeping line %d", c, p.orderL[c], p.orderL[c])
		}
		return
	}
	p.orders[c] = order
	p.orderL[c] = line
}

func glFmtTree(t TreeLinks) string {
	return fmt.Sprintf("up %d down %d/%d/%d", t.Up, t.Down[0], t.Down[1], t.Down[2])
}

func glAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		// Only digit strings reach here; this is an overflow.
		return -1 << 31
	}
	return n
}

// glMaxRanks, glMaxChannels and glMaxLinks bound what a log may name, so
// that a corrupt number cannot make the parser allocate without limit.
const (
	glMaxRanks    = 1 << 16
	glMaxChannels = 1 << 10
	glMaxLinks    = 1 << 21 // ranks times channels
)

func (p *glParser) channelOK(line, c int) bool {
	if c < 0 || c >= glMaxChannels {
		p.warn(line, "channel %d out of range; line ignored", c)
		return false
	}
	return true
}

func (p *glParser) ranksOK(line int, ranks ...int) bool {
	for _, r := range ranks {
		if r < -1 || r >= glMaxRanks {
			p.warn(line, "rank %d out of range; line ignored", r)
			return false
		}
	}
	return true
}

// parseLine reads one log line and returns the rank that logged it as far
// as the text shows (-1 when it does not, or the line is unrelated).
func (p *glParser) parseLine(n int, line string) int {
	line = strings.TrimRight(line, " \t\r")
	switch {
	case strings.Contains(line, "Trees ["):
		m := glReTreesLine.FindStringSubmatch(line)
		if m == nil {
			return -1
		}
		body, own := m[1], -1
		cut := len(body) >= glNCCLTreesMax
		items := glReTreesItem.FindAllStringSubmatch(body, -1)
		for i, it := range items {
			c := glAtoi(it[1])
			if cut && i == len(items)-1 {
				p.warn(n, "Trees line is as long as NCCL's buffer: entry for channel %d may be cut, ignored", c)
				continue
			}
			b := glReTreesBody.FindStringSubmatch(it[2])
			if b == nil {
				p.warn(n, "Trees entry [%s] %q not understood", it[1], it[2])
				continue
			}
			r := glAtoi(b[4])
			t := TreeLinks{Up: glAtoi(b[5]), Down: [3]int{glAtoi(b[1]), glAtoi(b[2]), glAtoi(b[3])}}
			if !p.channelOK(n, c) || !p.ranksOK(n, r, t.Up, t.Down[0], t.Down[1], t.Down[2]) {
				continue
			}
			if own >= 0 && r != own {
				p.warn(n, "Trees line names rank %d after rank %d", r, own)
			}
			own = r
			p.addTree(n, c, r, t, "Trees entry")
		}
		return own
	case strings.Contains(line, "Tree "):
		m := glReTreeLine.FindStringSubmatch(line)
		if m == nil {
			return -1
		}
		c, r := glAtoi(m[1]), glAtoi(m[3])
		t := TreeLinks{Up: glAtoi(m[2]), Down: [3]int{glAtoi(m[4]), glAtoi(m[5]), glAtoi(m[6])}}
		if !p.channelOK(n, c) || !p.ranksOK(n, r, t.Up, t.Down[0], t.Down[1], t.Down[2]) {
			return -1
		}
		p.addTree(n, c, r, t, "Tree line")
		return r
	case strings.Contains(line, "Ring ") || strings.Contains(line, "Channel "):
		if m := glReRingLine.FindStringSubmatch(line); m != nil {
			c, r := glAtoi(m[1]), glAtoi(m[3])
			l := RingLinks{Prev: glAtoi(m[2]), Next: glAtoi(m[4])}
			if !p.channelOK(n, c) || !p.ranksOK(n, r, l.Prev, l.Next) {
				return -1
			}
			p.addRing(n, c, r, l)
			return r
		}
		m := glReOrderLine.FindStringSubmatch(line)
		if m == nil {
			return -1
		}
		c, total := 0, 0
		if m[1] != "" {
			c = glAtoi(m[1])
			if m[2] != "" {
				total = glAtoi(m[2])
			}
		} else {
			c = glAtoi(m[3])
		}
		var order []int
		for _, f := range strings.Fields(m[4]) {
			order = append(order, glAtoi(f))
		}
		if m[5] == "..." {
			// NCCL 2.23+ ends a cut line with "..." written over its
			// last bytes: a number right before it may be partial.
			order = order[:len(order)-1]
			if len(order) == 0 {
				return -1
			}
		}
		if !p.channelOK(n, c) || !p.channelOK(n, total-1+glBoolInt(total == 0)) || !p.ranksOK(n, order...) {
			return -1
		}
		for _, r := range order {
			if r < 0 {
				p.warn(n, "channel %d: ring order names rank %d; line ignored", c, r)
				return -1
			}
		}
		p.addOrder(n, c, total, order)
		return order[0] // NCCL prints the order from the logging rank
	default:
		if m := glReCommLine.FindStringSubmatch(line); m != nil {
			nr, nn := glAtoi(m[1]), glAtoi(m[2])
			if nr < 1 || nr > glMaxRanks || nn < 1 || nn > nr {
				p.warn(n, "ignoring nRanks %s nNodes %s", m[1], m[2])
				return -1
			}
			if p.nRanks != 0 && (p.nRanks != nr || p.nNodes != nn) {
				p.warn(n, "nRanks %d nNodes %d disagrees with an earlier line (nRanks %d nNodes %d); keeping the first",
					nr, nn, p.nRanks, p.nNodes)
				return -1
			}
			p.nRanks, p.nNodes = nr, nn
		}
	}
	return -1
}

func glBoolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ParseGraphLog reads the graph lines of NCCL's or gotree's logs (Tree,
// Channel, Ring and Trees lines, with or without a logger prefix such as
// "host:pid:tid [dev] NCCL INFO ") and rebuilds every channel's ring and
// tree for every rank. Other lines are ignored, so a whole job's output,
// several ranks' logs concatenated, may be given.
//
// Lines are keyed by the rank named in their text (the number in NCCL's
// prefix brackets is a local device, not a rank) and by channel; a
// repeated line is dropped, and one that disagrees with an earlier line is
// dropped with a Warning. A "nRanks N nNodes M" line (NCCL's "comm" line,
// or gotree's in lower case), when present, sets the rank and node counts;
// otherwise NRanks is one more than the highest rank named and NNodes is
// the number of distinct host names in the prefixes (0 when not every
// rank's host is known). When every rank's host is known and there are as
// many hosts as nodes, NodeOf numbers the hosts by first appearance in rank
// order. Channels is one more than the highest channel named. Pattern is
// left 0: a log does not show it.
//
// One log should hold one communicator: NCCL's graph lines do not name
// their communicator, so lines of a second one (a split, a subgroup)
// conflict with the first and are dropped with Warnings.
//
// A rank without a Ring line takes its neighbours from a complete Channel
// line of that channel (logs without the GRAPH subsystem have only those);
// ranks without any ring or tree line get -1 links and a Warning, which
// ValidateGraph then reports. Depth is each rank's distance from the root
// of its tree, -1 where the root cannot be reached.
//
// The error is non-nil only when reading fails or no graph line is found.
func ParseGraphLog(r io.Reader) (*Graph, []Warning, error) {
	p := &glParser{
		trees:  make(map[glKey]glSeenTree),
		rings:  make(map[glKey]glSeenRing),
		orders: make(map[int][]int),
		orderL: make(map[int]int),
		hosts:  make(map[int]string),
		maxC:   -1,
		maxR:   -1,
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		own := p.parseLine(n, line)
		if own < 0 {
			continue
		}
		if m := glReHost.FindStringSubmatch(line); m != nil {
			if h, ok := p.hosts[own]; ok && h != m[1] {
				p.warn(n, "rank %d logged from host %s and from host %s", own, h, m[1])
			} else {
				p.hosts[own] = m[1]
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, p.warns, fmt.Errorf("gotree/algorithms: reading graph log: %w", err)
	}
	if !p.found || p.maxR < 0 {
		return nil, p.warns, fmt.Errorf("gotree/algorithms: no graph lines (Tree, Channel, Ring, Trees) in log")
	}
	if nr, nc := max(p.maxR+1, p.nRanks), p.maxC+1; nr*nc > glMaxLinks {
		return nil, p.warns, fmt.Errorf("gotree/algorithms: graph log names %d ranks and %d channels, more than %d links in all", nr, nc, glMaxLinks)
	}
	return p.assemble(), p.warns, nil
}

func (p *glParser) assemble() *Graph {
	nr := p.maxR + 1
	if p.nRanks > 0 {
		if nr > p.nRanks {
			p.warn(0, "log names rank %d but says nRanks %d", p.maxR, p.nRanks)
		} else {
			nr = p.nRanks
		}
	}
	nc := p.maxC + 1
	g := &Graph{
		NRanks:    nr,
		NNodes:    p.nNodes,
		Channels:  nc,
		RingOrder: make([][]int, nc),
		Rings:     make([][]RingLinks, nc),
		Trees:     make([][]TreeLinks, nc),
	}
	if len(p.hosts) == nr {
		// Every rank's host is known: number nodes by first appearance in
		// rank order, as NCCL does.
		idx := make(map[string]int)
		g.NodeOf = make([]int, nr)
		for r := 0; r < nr; r++ {
			h := p.hosts[r]
			if _, ok := idx[h]; !ok {
				idx[h] = len(idx)
			}
			g.NodeOf[r] = idx[h]
		}
		if g.NNodes == 0 {
			g.NNodes = len(idx)
		} else if g.NNodes != len(idx) {
			// Nodes simulated on one host, or hosts renamed: the hosts
			// do not say which rank is on which node.
			g.NodeOf = nil
		}
	}
	for c := 0; c < nc; c++ {
		p.assembleRing(g, c)
		p.assembleTree(g, c)
	}
	return g
}

func (p *glParser) assembleRing(g *Graph, c int) {
	nr := g.NRanks
	order := p.orders[c]
	complete := len(order) == nr
	pos := make(map[int]int, len(order))
	for i, r := range order {
		if _, dup := pos[r]; dup {
			complete = false
		}
		pos[r] = i
	}
	links := make([]RingLinks, nr)
	var fromOrder, missing []int
	anyLine := false
	for r := 0; r < nr; r++ {
		if s, ok := p.rings[glKey{c, r}]; ok {
			links[r] = s.l
			anyLine = true
			continue
		}
		if i, ok := pos[r]; ok && complete {
			links[r] = RingLinks{Prev: order[(i+nr-1)%nr], Next: order[(i+1)%nr]}
			fromOrder = append(fromOrder, r)
			continue
		}
		links[r] = RingLinks{Prev: -1, Next: -1}
		missing = append(missing, r)
	}
	if anyLine && len(fromOrder) > 0 {
		p.warn(0, "channel %d: no Ring line for %s; taken from the Channel line", c, glRankList(fromOrder))
	}
	if len(missing) == nr {
		p.warn(0, "channel %d: no Ring lines and no complete Channel line", c)
	} else if len(missing) > 0 {
		p.warn(0, "channel %d: no Ring line for %s", c, glRankList(missing))
	}
	g.Rings[c] = links
	if complete {
		g.RingOrder[c] = order
		return
	}
	g.RingOrder[c] = glWalkRing(g, c, 0)
	if len(order) > 0 && !slices.Equal(order, g.RingOrder[c][:min(len(order), len(g.RingOrder[c]))]) {
		p.warn(p.orderL[c], "channel %d: ring order (cut after %d ranks) disagrees with the Ring lines", c, len(order))
	}
}

func (p *glParser) assembleTree(g *Graph, c int) {
	nr := g.NRanks
	links := make([]TreeLinks, nr)
	var missing []int
	for r := 0; r < nr; r++ {
		if s, ok := p.trees[glKey{c, r}]; ok {
			links[r] = s.t
			continue
		}
		links[r] = TreeLinks{Up: -1, Down: [3]int{-1, -1, -1}}
		missing = append(missing, r)
	}
	if len(missing) == nr {
		p.warn(0, "channel %d: no Tree or Trees lines", c)
	} else if len(missing) > 0 {
		p.warn(0, "channel %d: no Tree or Trees entry for %s", c, glRankList(missing))
	}
	depths := glTreeDepths(links)
	for r := range links {
		links[r].Depth = depths[r]
	}
	g.Trees[c] = links
}

// glTreeDepths gives each rank's number of up links to a rank without an up
// link, or -1 where the chain of up links leaves the range or loops.
func glTreeDepths(links []TreeLinks) []int {
	const unknown, onPath = -2, -3
	n := len(links)
	d := make([]int, n)
	for i := range d {
		d[i] = unknown
	}
	var path []int
	for r := 0; r < n; r++ {
		path = path[:0]
		res := -1 // depth of the last rank on the path, -1 if none
		for x := r; ; x = links[x].Up {
			if x < 0 || x >= n || d[x] == onPath {
				res = -1
				if x == -1 && len(path) > 0 {
					// The last rank on the path is a root.
					res = 0
					d[path[len(path)-1]] = 0
					path = path[:len(path)-1]
				}
				break
			}
			if d[x] != unknown {
				res = d[x]
				break
			}
			d[x] = onPath
			path = append(path, x)
		}
		for i := len(path) - 1; i >= 0; i-- {
			if res >= 0 {
				res++
			}
			d[path[i]] = res
		}
	}
	return d
}

// glRankList prints ranks as "rank 3" or "ranks 1, 2, 5" (at most 16 named).
func glRankList(rs []int) string {
	sort.Ints(rs)
	if len(rs) == 1 {
		return fmt.Sprintf("rank %d", rs[0])
	}
	var b strings.Builder
	b.WriteString("ranks ")
	for i, r := range rs {
		if i == 16 {
			fmt.Fprintf(&b, " and %d more", len(rs)-16)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(r))
	}
	return b.String()
}
