package topology

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Pattern is the shape of a channel, with NCCL's numbering.
type Pattern int

// Patterns. Inside a node every tree pattern is a chain of the GPUs; they
// differ in where the chain meets the network: Tree enters and leaves
// through the first GPU, SplitTree leaves through the second.
const (
	PatternSplitTree Pattern = 2
	PatternTree      Pattern = 3
	PatternRing      Pattern = 4
)

func (p Pattern) String() string {
	switch p {
	case PatternSplitTree:
		return "split_tree"
	case PatternTree:
		return "tree"
	case PatternRing:
		return "ring"
	}
	return fmt.Sprintf("pattern(%d)", int(p))
}

// ParsePattern maps "ring", "tree" or "split_tree" to a Pattern.
func ParsePattern(s string) (Pattern, error) {
	for _, p := range []Pattern{PatternRing, PatternTree, PatternSplitTree} {
		if strings.EqualFold(s, p.String()) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("gotree/topology: unknown pattern %q (want ring, tree or split_tree)", s)
}

// Search limits, after NCCL.
const (
	DefaultMaxChannels = 16      // MAXCHANNELS/2
	DefaultMaxSteps    = 1 << 19 // global step budget
	roundSteps         = 1 << 14 // per attempt
	roundStepsSame     = 1 << 8  // per attempt that only replays the previous channel
)

// Speed lists (GB/s per channel) tried from the top, after NCCL 2.22.
var (
	speedsIntra     = []float64{40, 30, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3}
	speedsIntraSM90 = []float64{60, 50, 40, 30, 24, 20, 15, 12, 11, 6, 3}
	speedsInter     = []float64{48, 30, 28, 24, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3, 2.4, 1.2, 0.24, 0.12}
	speedsInterSM90 = []float64{48, 45, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12}
)

// SearchOptions configures Search. The zero value searches rings inside
// one node.
type SearchOptions struct {
	Pattern     Pattern // PatternRing when zero
	InterNode   bool    // channels enter and leave the node through NET ports
	CrossNIC    bool    // a channel may leave through another port than it entered
	MinChannels int     // default 1
	MaxChannels int     // default DefaultMaxChannels
	MaxSteps    int     // bound on search steps over all attempts; default DefaultMaxSteps
}

// SearchResult is the outcome of a channel search: per channel, the order
// in which the node's GPUs are visited.
//
// Orders[c][i] is a GPU index: a position in System.GPUs(). A ring visits
// Orders[c] and returns to Orders[c][0]; a tree is the chain Orders[c][0] →
// Orders[c][1] → …, Orders[c][0] being the chain's head (its link to the
// parent node). RankOrders turns GPU indices into local ranks, which is what
// algorithms' hierarchical construction (Layout.Intra) takes.
type SearchResult struct {
	Pattern    Pattern  // the pattern found (a tree search may relax to PatternTree)
	Channels   int      // len(Orders)
	Orders     [][]int  // [channel] GPU indices in order
	Nets       [][2]int // [channel] {NET dev in, NET dev out}; only for inter-node searches
	SpeedIntra float64  // GB/s per channel between GPUs
	SpeedInter float64  // GB/s per channel to the network (= SpeedIntra inside one node)
	TypeIntra  PathType // worst path type used between GPUs
	TypeInter  PathType // worst path type used between GPUs and NETs
	CrossNIC   bool     // channels leave through a different port than they entered
	SameChans  bool     // all channels found by replaying the first
	Hops       int      // links traversed by all channels (before duplication)
	Duplicated bool     // channels were doubled because bandwidth allowed
	Steps      int      // search steps spent
	Fallback   bool     // nothing fitted; the result is the GPUs in index order at 0.1 GB/s
}

// RankOrders maps Orders from GPU indices to the local ranks that drive
// those GPUs (GPUInfo.Rank).
func (r *SearchResult) RankOrders(s *System) [][]int {
	gpus := s.GPUs()
	out := make([][]int, len(r.Orders))
	for c, o := range r.Orders {
		out[c] = make([]int, len(o))
		for i, g := range o {
			out[c][i] = s.Nodes[gpus[g]].GPU.Rank
		}
	}
	return out
}

// graphState is one candidate set of channels and the parameters it was
// searched with.
type graphState struct {
	pattern                Pattern
	speedIntra, speedInter float64
	typeIntra, typeInter   PathType
	crossNIC, same         bool
	duplicated             bool
	orders                 [][]int
	nets                   [][2]int
	hops                   int
}

func (g *graphState) clone() *graphState {
	c := *g
	c.orders = make([][]int, len(g.orders))
	for i, o := range g.orders {
		c.orders[i] = append([]int(nil), o...)
	}
	c.nets = append([][2]int(nil), g.nets...)
	return &c
}

type searcher struct {
	s      *System
	ps     *Paths
	gpus   []int // GPU index → node
	nets   []int // NET nodes by dev
	ngpu   int
	nvs    bool
	remain []float64 // per link, GB/s left
	used   []bool    // per GPU index, in the channel being built
	cur    []int
	curNet [2]int
	inter  bool
	minCh  int
	maxCh  int

	st   graphState // parameters of the current attempt and channels so far
	best *graphState

	loadCache [][]linkLoad           // from*len(Nodes)+to → loads at speed 1
	candCache map[candKey][]gpuScore // static candidate orders
	candBuf   [][]int                // [channel*ngpu+step] scratch
	time      int                    // steps left in this attempt; -1 once an optimal answer is found
	spent     int
}

// Search finds the channels of the given pattern over the GPUs of s that
// maximise channels × bandwidth, the way NCCL does. It takes a speed from a
// descending list (the first not above the best GPU-to-GPU path), builds as
// many channels as fit — each subtracting its speed from every link it
// uses — and then relaxes the constraints in NCCL's order: different
// channels instead of replays, a simpler tree, worse intra-node then
// network path types, crossing NICs, and finally lower speeds while that
// may still help. It stops early when the channels use all of a GPU's
// bandwidth or reach MaxChannels. The best set is duplicated when each
// channel carries at least 25 GB/s (50 on Hopper and later with more than
// 4 channels), then a second pass tries higher speeds with as many
// channels. On NVSwitch systems a GPU's next GPU is only its index
// neighbour, so GPUs come in index order. Work is bounded by
// opts.MaxSteps; the result is deterministic.
//
// A system without GPUs yields a result with no channels.
func Search(s *System, opts SearchOptions) (*SearchResult, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	pattern := opts.Pattern
	if pattern == 0 {
		pattern = PatternRing
	}
	if pattern != PatternRing && pattern != PatternTree && pattern != PatternSplitTree {
		return nil, fmt.Errorf("gotree/topology: search: unsupported pattern %d", int(pattern))
	}
	sr := &searcher{s: s, ps: ComputePaths(s), gpus: s.GPUs(), minCh: opts.MinChannels, maxCh: opts.MaxChannels}
	sr.ngpu = len(sr.gpus)
	if sr.ngpu == 0 {
		return &SearchResult{Pattern: pattern, TypeIntra: PathLOC, TypeInter: PathLOC}, nil
	}
	if sr.minCh <= 0 {
		sr.minCh = 1
	}
	if sr.maxCh <= 0 {
		sr.maxCh = DefaultMaxChannels
	}
	if sr.minCh > sr.maxCh {
		return nil, fmt.Errorf("gotree/topology: search: MinChannels %d > MaxChannels %d", sr.minCh, sr.maxCh)
	}
	global := opts.MaxSteps
	if global <= 0 {
		global = DefaultMaxSteps
	}
	sr.nvs = s.Count(NVS) > 0
	if opts.InterNode {
		sr.nets = s.Of(NET)
		sort.SliceStable(sr.nets, func(a, b int) bool { return s.Nodes[sr.nets[a]].NET.Dev < s.Nodes[sr.nets[b]].NET.Dev })
		sr.inter = len(sr.nets) > 0
	}
	if sr.ngpu == 1 && pattern != PatternRing {
		pattern = PatternTree
	}
	if pattern == PatternSplitTree && !sr.inter {
		pattern = PatternTree // identical inside one node
	}
	sr.remain = make([]float64, len(s.Links))
	for i, l := range s.Links {
		sr.remain[i] = l.BW
	}
	sr.used = make([]bool, sr.ngpu)
	sr.cur = make([]int, sr.ngpu)

	minSM := math.MaxInt
	for _, g := range sr.gpus {
		minSM = min(minSM, s.Nodes[g].GPU.SM)
	}
	speeds := speedsIntra
	switch {
	case sr.inter && minSM >= 90:
		speeds = speedsInterSM90
	case sr.inter:
		speeds = speedsInter
	case minSM >= 90:
		speeds = speedsIntraSM90
	}
	maxBW, totalBW := sr.bandwidthBounds()
	minIntra, maxIntra, minInter, maxInter := sr.typeBounds()
	amdSYS := false
	if cpus := s.Of(CPU); len(cpus) > 0 {
		c := s.Nodes[cpus[0]].CPU
		amdSYS = c.Vendor == "AuthenticAMD" && (c.Arch == "" || c.Arch == "x86_64")
	}
	// A tree's last GPU sends nothing: n-1 links carry a GPU's bandwidth.
	targetBW := totalBW
	if sr.ngpu > 1 && pattern != PatternRing {
		targetBW *= float64(sr.ngpu) / float64(sr.ngpu-1)
	}

	speedIdx := 0
	for speedIdx < len(speeds)-1 && (speeds[speedIdx] > maxBW || speeds[speedIdx]*float64(sr.minCh) > targetBW) {
		speedIdx++
	}
	st := graphState{pattern: pattern, typeIntra: minIntra, typeInter: minInter, same: true,
		speedIntra: speeds[speedIdx], speedInter: speeds[speedIdx]}
	crossOK := opts.CrossNIC && len(sr.nets) > 1

	// Pass 1: find a solution, relaxing constraints.
	for {
		spent, perfect := sr.attempt(st, min(sr.roundBudget(st), global))
		global -= spent
		if perfect || (sr.best != nil && float64(len(sr.best.orders))*sr.best.speedInter >= totalBW) {
			break
		}
		if st.same && !(amdSYS && st.typeIntra == PathSYS) {
			st.same = false
			continue
		}
		st.same = true
		if global <= 0 && sr.best != nil {
			break
		}
		if st.pattern == PatternSplitTree {
			st.pattern = PatternTree
			continue
		}
		st.pattern = pattern
		limit := maxIntra
		if sr.inter {
			limit = st.typeInter // inside the node, no worse than to the network
		}
		if st.typeIntra < limit && (sr.best == nil || st.typeIntra < sr.best.typeIntra) {
			st.typeIntra++
			continue
		}
		st.typeIntra = minIntra
		if sr.inter && st.typeInter < maxInter && (sr.best == nil || st.typeInter < sr.best.typeInter || st.typeInter < PathPXN) {
			st.typeInter++
			continue
		}
		st.typeInter = minInter
		if crossOK && !st.crossNIC {
			st.crossNIC = true
			continue
		}
		st.crossNIC = false
		if global > 0 && speedIdx < len(speeds)-1 && (sr.best == nil || speeds[speedIdx+1]/sr.best.speedInter > .49) {
			speedIdx++
			st.speedIntra, st.speedInter = speeds[speedIdx], speeds[speedIdx]
			continue
		}
		break
	}
	if sr.best == nil {
		return sr.result(), nil
	}

	sr.duplicate(minSM)

	// Pass 2: with at least as many channels, try a higher speed — for
	// rings overall, for trees inside the node (up to twice the network).
	b := sr.best.clone()
	sr.minCh = len(b.orders)
	speedIdx = 0
	for speedIdx < len(speeds)-1 && speeds[speedIdx] > b.speedInter {
		speedIdx++
	}
	st = *b
	for global > 0 && speedIdx > 0 {
		if pattern == PatternRing {
			speedIdx--
			st.speedIntra, st.speedInter = speeds[speedIdx], speeds[speedIdx]
		} else if st.speedIntra == sr.best.speedIntra && st.speedIntra < 2*st.speedInter {
			speedIdx--
			st.speedIntra = speeds[speedIdx]
		} else {
			break
		}
		spent, _ := sr.attempt(st, min(sr.roundBudget(st), global))
		global -= spent
		if sr.time == 0 {
			break // timed out: stop raising
		}
	}
	return sr.result(), nil
}

// duplicate doubles the best channels (up to MaxChannels), halving their
// speed, when each channel is fast: at least 25 GB/s, and on Hopper and
// later at least 50 GB/s unless there are at most 4 channels.
func (sr *searcher) duplicate(minSM int) {
	b := sr.best
	n := len(b.orders)
	if n == 0 || b.speedIntra < 25 || (minSM > 80 && b.speedIntra < 50 && n > 4) {
		return
	}
	dup := min(2*n, sr.maxCh)
	if dup == n {
		return
	}
	for c := n; c < dup; c++ {
		b.orders = append(b.orders, append([]int(nil), b.orders[c-n]...))
		if b.nets != nil {
			b.nets = append(b.nets, b.nets[c-n])
		}
	}
	div := float64((dup + n - 1) / n)
	b.speedIntra /= div
	b.speedInter /= div
	b.duplicated = true
}

// typeBounds returns the best and worst path types between GPUs, and
// between GPUs and network ports.
func (sr *searcher) typeBounds() (minIntra, maxIntra, minInter, maxInter PathType) {
	minIntra, maxIntra, minInter, maxInter = PathLOC, PathSYS, PathPIX, PathSYS
	if sr.ngpu > 1 {
		minIntra, maxIntra = PathDIS, PathLOC
		for _, a := range sr.gpus {
			for _, b := range sr.gpus {
				if a != b {
					t := sr.ps.Get(a, b).Type
					minIntra, maxIntra = min(minIntra, t), max(maxIntra, t)
				}
			}
		}
	}
	if len(sr.nets) > 0 {
		minInter, maxInter = PathDIS, PathLOC
		for _, g := range sr.gpus {
			for _, n := range sr.nets {
				t := sr.ps.Get(g, n).Type
				minInter, maxInter = min(minInter, t), max(maxInter, t)
			}
		}
	}
	return
}

// bandwidthBounds returns the best single path bandwidth a channel could
// use, and the total bandwidth a GPU can push (NVLinks summed, or its PCI
// link), maximised over GPUs.
func (sr *searcher) bandwidthBounds() (maxBW, totalBW float64) {
	if sr.ngpu == 1 && !sr.inter {
		maxBW = LocBW
	}
	for _, g := range sr.gpus {
		targets := sr.gpus
		if sr.inter {
			targets = sr.nets
		}
		for _, t := range targets {
			if p := sr.ps.Get(g, t); t != g && p.Type != PathDIS {
				maxBW = max(maxBW, p.BW)
			}
		}
		nvl, pci := 0.0, 0.0
		for _, li := range sr.s.Out(g) {
			switch l := sr.s.Links[li]; l.Type {
			case LinkNVL:
				nvl += l.BW
			case LinkPCI:
				pci = max(pci, l.BW)
			}
		}
		totalBW = max(totalBW, max(nvl, pci))
	}
	if sr.ngpu == 1 && !sr.inter {
		totalBW = LocBW
	}
	return maxBW, totalBW
}

func (sr *searcher) roundBudget(st graphState) int {
	if st.same {
		return roundStepsSame
	}
	return roundSteps
}

// attempt searches channels with the parameters of st; it returns the
// steps spent and whether MaxChannels were reached.
func (sr *searcher) attempt(st graphState, budget int) (spent int, perfect bool) {
	sr.st = st
	sr.st.orders, sr.st.nets, sr.st.hops, sr.st.duplicated = nil, nil, 0, false
	sr.time = budget
	before := sr.spent
	sr.searchRec()
	return sr.spent - before, sr.time == -1
}

// better reports whether the channels found so far beat the best saved.
func (sr *searcher) better() bool {
	n := len(sr.st.orders)
	if n < sr.minCh {
		return false
	}
	if sr.best == nil {
		return true
	}
	v, bv := float64(n)*sr.st.speedIntra, float64(len(sr.best.orders))*sr.best.speedIntra
	if v != bv {
		return v > bv
	}
	return sr.st.pattern == sr.best.pattern && sr.st.crossNIC == sr.best.crossNIC && sr.st.hops < sr.best.hops
}

func (sr *searcher) result() *SearchResult {
	r := &SearchResult{Steps: sr.spent}
	b := sr.best
	if b == nil {
		order := make([]int, sr.ngpu)
		for i := range order {
			order[i] = i
		}
		r.Pattern = sr.st.pattern
		r.Channels, r.Orders = 1, [][]int{order}
		r.SpeedIntra, r.SpeedInter = 0.1, 0.1
		r.TypeIntra, r.TypeInter = PathSYS, PathSYS
		r.Fallback = true
		if sr.inter {
			d := sr.s.Nodes[sr.nets[0]].NET.Dev
			r.Nets = [][2]int{{d, d}}
		}
		return r
	}
	r.Pattern = b.pattern
	r.Orders, r.Nets = b.orders, b.nets
	r.SpeedIntra, r.SpeedInter = b.speedIntra, b.speedInter
	r.TypeIntra, r.TypeInter = b.typeIntra, b.typeInter
	if !sr.inter {
		r.SpeedInter, r.TypeInter = r.SpeedIntra, r.TypeIntra
	}
	r.CrossNIC, r.SameChans, r.Hops, r.Duplicated = b.crossNIC, b.same, b.hops, b.duplicated
	r.Channels = len(r.Orders)
	return r
}

// LinkUsage returns, per link of s, the bandwidth the channels of r take,
// charged the way the search charges them.
func (r *SearchResult) LinkUsage(s *System) []float64 {
	sr := &searcher{s: s, ps: ComputePaths(s), gpus: s.GPUs()}
	sr.st.speedIntra, sr.st.speedInter = r.SpeedIntra, r.SpeedInter
	use := make([]float64, len(s.Links))
	add := func(from, to int, speed float64) {
		p := sr.ps.Get(from, to)
		for _, ld := range sr.linkLoads(p, from, speed) {
			use[ld.link] += ld.bw
		}
	}
	netByDev := map[int]int{}
	for _, n := range s.Of(NET) {
		netByDev[s.Nodes[n].NET.Dev] = n
	}
	for c, o := range r.Orders {
		for i := 0; i+1 < len(o); i++ {
			add(sr.gpus[o[i]], sr.gpus[o[i+1]], r.SpeedIntra)
		}
		if r.Nets != nil && c < len(r.Nets) {
			in, out := netByDev[r.Nets[c][0]], netByDev[r.Nets[c][1]]
			add(in, sr.gpus[o[0]], r.SpeedInter)
			last := len(o) - 1
			switch r.Pattern {
			case PatternSplitTree:
				last = min(1, last)
			case PatternTree:
				last = 0
			}
			add(sr.gpus[o[last]], out, r.SpeedInter)
		} else if r.Pattern == PatternRing && len(o) > 1 {
			add(sr.gpus[o[len(o)-1]], sr.gpus[o[0]], r.SpeedIntra)
		}
	}
	return use
}
