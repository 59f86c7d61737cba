package main

// gotree explain tells a newcomer what gotree (and NCCL) builds for a
// communicator and what the cost model predicts: the channels, the rings,
// every channel's tree with each rank's role, depth and fan-out, the
// predicted time of ring and tree across sizes, and where they cross.
//
// The layout comes from a topology — a file (--topo, gotree JSON or NCCL
// XML; or $GOTREE_TOPO_FILE) or this machine (topology/discover) — run
// through gotree's channel search (topology.Search, ring and tree) and
// turned into an algorithms.Layout per search the way topology's package
// comment describes; or, with --nranks/--nodes and no topology, from the
// uniform layout. The output says which.

import (
	"flag"
	"fmt"
	"io"
	"math/bits"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/pg"
	"github.com/gotree/gotree/topology"
)

func init() {
	register("explain", "explain the channels, rings and trees of a communicator and the predicted ring/tree crossover", runExplain)
}

// explainSource says where the communicator's layout comes from: a
// topology (a file or this machine) run through gotree's channel search,
// or the uniform layout of --nranks/--nodes.
type explainSource struct {
	kind       string // "file", "discovered", "uniform"
	path       string // the file
	sys        *topology.System
	ring, tree *topology.SearchResult
	channels   int   // search channels used (min of ring and tree)
	gpuOf      []int // rank -> GPU index in its node; nil for the uniform layout
	nodes      int
	note       string // why a topology was not used (no GPU)
	intra      algorithms.Transport
}

func runExplain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	topoFile := fs.String("topo", "", "topology file (gotree JSON or NCCL topology XML): explain what gotree's channel search builds for it; default $GOTREE_TOPO_FILE unless --nranks is given, else this machine (discovery) unless --nranks or --nodes is given (then the uniform layout)")
	nranks := fs.Int("nranks", 4, "ranks in the communicator (uniform layout; with a topology: must be GPUs × nodes)")
	nodes := fs.Int("nodes", 1, "nodes (uniform layout: rank r on node r/(nranks/nodes); with a topology: copies of the machine)")
	channels := fs.Int("channels", 2, "channels found by the search (the graph has twice as many); with a topology: at most this many (default: the search's)")
	link := fs.String("links", "gpu", "gpu: NVLink inside a node, network between (NCCL's constants); cpu: shm and tcp (the tuning file's); default cpu for a machine without GPUs")
	tuning := fs.String("tuning", os.Getenv("GOTREE_TUNING_FILE"), "tuning file (default $GOTREE_TUNING_FILE, else built-in values)")
	maxS := fs.String("e", "1G", "largest size of the prediction table")
	trees := fs.Int("show", 4, "print at most this many channels' trees in full")
	verbose := fs.Bool("v", false, "log discovery at INFO level on stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	maxB, err := pg.ParseSize(*maxS)
	if err == nil && (*nranks < 1 || *nodes < 1 || *nranks%*nodes != 0) {
		err = fmt.Errorf("--nranks %d must be a positive multiple of --nodes %d", *nranks, *nodes)
	}
	if err == nil && (*channels < 1 || *channels > algorithms.MaxSearchChannels) {
		err = fmt.Errorf("--channels must be in 1..%d", algorithms.MaxSearchChannels)
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var tu *algorithms.Tuning
	if err == nil {
		tu, err = loadTuning(*tuning)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gotree explain: %v\n", err)
		return 2
	}

	// Where the layout comes from.
	// --topo; else, unless --nranks asks for the uniform layout,
	// $GOTREE_TOPO_FILE; else, unless --nodes does, this machine.
	src := explainSource{kind: "uniform", nodes: *nodes}
	file := *topoFile
	useTopo := file != ""
	if !useTopo && !set["nranks"] {
		file = topoFileFromEnv()
		useTopo = file != "" || !set["nodes"]
	}
	if useTopo {
		src.kind, src.path = "discovered", file
		if file != "" {
			src.kind = "file"
		}
		s, err := loadTopo(file, "", *verbose, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "gotree explain: %v\n", err)
			return 1
		}
		src.sys = s
	}
	if src.sys != nil && src.sys.Count(topology.GPU) == 0 {
		src.note = fmt.Sprintf("it has no GPU, so the channel search has nothing to order. gotree runs its CPU executor there, whose communicator visits the ranks of a node in rank order on every channel (pg/comm.go, buildGraph); what follows is that uniform layout for --nranks %d on --nodes %d",
			*nranks, *nodes)
		if !set["links"] {
			*link = "cpu"
			src.note += ", with the CPU transports (shared memory inside a node, TCP between nodes)"
		}
	}
	intra, inter := algorithms.NVLink, algorithms.Net
	switch *link {
	case "gpu":
	case "cpu":
		intra, inter = algorithms.Shm, algorithms.TCP
	default:
		fmt.Fprintf(stderr, "gotree explain: --links %q: want gpu or cpu\n", *link)
		return 2
	}
	src.intra = intra
	var g *algorithms.Graph
	search := *channels
	cpuChannels, cpuCores := 0, 0 // the CPU executor's channel cap, when it decides the channels, and the cores it assumed
	if src.sys != nil && src.note == "" {
		maxCh := 0
		if set["channels"] {
			maxCh = *channels
		}
		if g, err = explainTopoGraph(&src, maxCh); err != nil {
			fmt.Fprintf(stderr, "gotree explain: %v\n", err)
			return 1
		}
		if set["nranks"] && *nranks != g.NRanks {
			fmt.Fprintf(stderr, "gotree explain: --nranks %d: the topology gives %d GPUs × %d nodes = %d ranks\n", *nranks, src.sys.Count(topology.GPU), *nodes, g.NRanks)
			return 2
		}
		search = src.channels
		if !set["links"] {
			src.intra = explainIntra(src.ring.TypeIntra)
			intra = src.intra
		}
		tu = explainTopoTuning(tu, &src)
	} else {
		perNode := *nranks / *nodes
		if intra == algorithms.Shm && !set["channels"] {
			// The CPU executor's channels follow the CPUs (pg.DefaultChannels,
			// GOTREE_MAX_NCHANNELS unset): its graph has one search channel.
			if cpuCores = tu.Cores; cpuCores <= 0 {
				cpuCores = runtime.NumCPU()
			}
			cpuChannels = pg.DefaultChannels(cpuCores, perNode)
			search = max(1, cpuChannels/2)
		}
		if g, err = algorithms.BuildGraph(algorithms.UniformLayout(*nodes, perNode, search, algorithms.BalancedTree)); err != nil {
			fmt.Fprintf(stderr, "gotree explain: %v\n", err)
			return 1
		}
	}
	topo := algorithms.TopoOfGraph(g, intra, inter)
	if cpuChannels > 0 {
		topo.Channels = min(topo.Channels, cpuChannels)
	}
	explainSourceText(stdout, &src, g, search)
	explainGraph(stdout, g, search, *trees, &src)
	if cpuChannels > 0 {
		fmt.Fprintf(stdout, "The CPU executor runs at most %s here: with GOTREE_MAX_NCHANNELS unset it uses 2 when every\n"+
			"rank of the most crowded node has 2 CPUs, else 1 (here %d cores per node for %s; --channels shows more).\n\n",
			plural(cpuChannels, "channel", "channels"), cpuCores, plural(topo.RanksPerNode, "rank", "ranks"))
		if cpuChannels > 1 {
			fmt.Fprintf(stdout, "Within that, a call of any algorithm but the tree gets one channel per %d KiB (two from %d MiB): each\n"+
				"channel is a stream that every step of the call wakes, and the bandwidth it adds is the host's, not a link's.\n"+
				"The tree keeps two from 64 KiB: they carry its two trees (docs/cost-model.md §1b).\n\n",
				algorithms.CPUChannelMinBytes>>10, 2*algorithms.CPUChannelMinBytes>>20)
		}
	}
	explainCost(stdout, tu, topo, maxB)
	explainGatherScatter(stdout, tu, topo, maxB)
	return 0
}

// explainGatherScatter says how allgather and reduce-scatter (FSDP's
// collectives, sizes as nccl-tests count them: the gathered buffer) are
// chosen: the ring, or on one node halving-doubling (Bruck's order where
// the ranks are not a power of two), by the model alone (no autotuning).
func explainGatherScatter(w io.Writer, tu *algorithms.Tuning, topo algorithms.CostTopo, maxB int64) {
	n := topo.NRanks
	fmt.Fprintf(w, "\n== Allgather and reduce-scatter (FSDP's collectives)\n\n")
	hd := algorithms.Constraints{Algos: 1 << algorithms.HalvingDoubling}
	if _, err := tu.Choose(algorithms.AllGather, topo, 1<<20, hd); err != nil {
		fmt.Fprintf(w, "Both run the ring here: n-1 = %d steps, each rank passing on the blocks it received.\n", n-1)
		fmt.Fprintf(w, "Halving-doubling needs the ranks on one node (%s on %s here).\n", plural(n, "rank", "ranks"), plural(topo.NNodes, "node", "nodes"))
		return
	}
	steps := algorithms.ShapeOf(algorithms.AllGather, algorithms.HalvingDoubling, topo).IntraHops
	fmt.Fprintf(w, "The ring takes n-1 = %d steps. On one node each block can instead travel a binomial tree\n", n-1)
	if n&(n-1) == 0 {
		fmt.Fprintf(w, "of partners (the ranks n/2, n/4, ..., 1 positions away: halving-doubling),\n")
		fmt.Fprintf(w, "reduced or copied and passed on in one step as in the ring: log2(%d) = %v steps, the ring's bytes.\n", n, steps)
	} else {
		fmt.Fprintf(w, "(%d is not a power of two: Bruck's order, each rank sending to the ranks 1, 2, 4, ... positions\n", n)
		fmt.Fprintf(w, "before it and receiving from those as far after it), reduced or copied and passed on in one step\n")
		fmt.Fprintf(w, "as in the ring: ceil(log2(%d)) = %v steps, the ring's bytes.\n", n, steps)
	}
	fmt.Fprintf(w, "The model prices its steps as the ring's and takes whichever it predicts faster, for both\n")
	fmt.Fprintf(w, "collectives alike (through torch at 4 ranks on 2 cores hd took 8-49%% less time at 4-64 KiB,\n")
	fmt.Fprintf(w, "median 34%%, and tied with the ring above; docs/bench.md).\n")
	if n&(n-1) != 0 {
		fmt.Fprintf(w, "Above %s auto keeps the ring, though the model prices Bruck's order lower: on 2 cores\n", fmtBytes(algorithms.BruckAutoMaxBytes))
		fmt.Fprintf(w, "it took longer there (through torch on 6 ranks at 4 MiB in 7 of 10 pairs, 1 MiB a tie; at\n")
		fmt.Fprintf(w, "the C ABI on 3, 5 and 6 ranks at 1-4 MiB in 22 of 24; docs/bench.md).\n")
		fmt.Fprintf(w, "GOTREE_ALGO=allgather:hd;reducescatter:hd runs it at any size.\n")
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%10s  %13s  %13s  %s\n", "size", "ring", "hd", "auto")
	for b := int64(4 * n); b <= maxB; b *= 16 {
		ring, err1 := tu.Choose(algorithms.AllGather, topo, b, algorithms.Constraints{Algos: 1 << algorithms.Ring})
		h, err2 := tu.Choose(algorithms.AllGather, topo, b, hd)
		best, err3 := tu.Choose(algorithms.AllGather, topo, b, algorithms.Constraints{Algos: 1<<algorithms.Ring | 1<<algorithms.HalvingDoubling})
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		fmt.Fprintf(w, "%10s  %10.1f us  %10.1f us  %v\n", fmtBytes(b), ring.TimeUs, h.TimeUs, best.Algo)
	}
}

// explainIntra is the cost model's transport for the search's worst path
// type between GPUs: NVLink (direct or through one GPU) or PCI.
func explainIntra(t topology.PathType) algorithms.Transport {
	if t <= topology.PathNVB {
		return algorithms.NVLink
	}
	return algorithms.PCI
}

// explainTopoGraph runs gotree's channel search on src.sys the way NCCL
// does for a communicator of src.nodes copies of the machine (one rank per
// GPU, ranks numbered node by node): a ring search and a tree search
// (through the network ports when there are several nodes); the
// communicator takes the smaller channel count of the two (NCCL: min of
// the ring and tree graphs), the ring graph's orders for its rings and the
// tree graph's orders for its chains, and doubles the channels
// (algorithms.BuildGraph). maxCh > 0 caps the search.
func explainTopoGraph(src *explainSource, maxCh int) (*algorithms.Graph, error) {
	s := src.sys
	inter := src.nodes > 1
	var err error
	if src.ring, err = topology.Search(s, topology.SearchOptions{Pattern: topology.PatternRing, InterNode: inter, MaxChannels: maxCh}); err != nil {
		return nil, err
	}
	if src.tree, err = topology.Search(s, topology.SearchOptions{Pattern: topology.PatternTree, InterNode: inter, MaxChannels: maxCh}); err != nil {
		return nil, err
	}
	C := min(src.ring.Channels, src.tree.Channels, algorithms.MaxSearchChannels)
	if C < 1 {
		return nil, fmt.Errorf("the channel search found no channel (ring %d, tree %d)", src.ring.Channels, src.tree.Channels)
	}
	src.channels = C
	G := s.Count(topology.GPU)
	// A GPU's rank on its node: its local rank (GPUInfo.Rank) when those
	// number the GPUs 0..G-1, else its index.
	lr := make([]int, G)
	seen := make([]bool, G)
	ok := true
	for i, gi := range s.GPUs() {
		lr[i] = s.Nodes[gi].GPU.Rank
		if lr[i] < 0 || lr[i] >= G || seen[lr[i]] {
			ok = false
			break
		}
		seen[lr[i]] = true
	}
	if !ok {
		for i := range lr {
			lr[i] = i
		}
	}
	local := func(r *topology.SearchResult) [][]int {
		out := make([][]int, len(r.Orders))
		for c, o := range r.Orders {
			for _, x := range o {
				out[c] = append(out[c], lr[x])
			}
		}
		return out
	}
	ringL, treeL := local(src.ring), local(src.tree)
	src.gpuOf = make([]int, G*src.nodes)
	for i := range lr {
		for nd := 0; nd < src.nodes; nd++ {
			src.gpuOf[nd*G+lr[i]] = i
		}
	}
	layout := func(orders [][]int, p algorithms.Pattern) algorithms.Layout {
		l := algorithms.Layout{NodeOf: make([]int, G*src.nodes), Channels: C, Pattern: p, Intra: make([][][]int, C)}
		for r := range l.NodeOf {
			l.NodeOf[r] = r / G
		}
		for c := 0; c < C; c++ {
			l.Intra[c] = make([][]int, src.nodes)
			for nd := 0; nd < src.nodes; nd++ {
				for _, x := range orders[c] {
					l.Intra[c][nd] = append(l.Intra[c][nd], nd*G+x)
				}
			}
		}
		return l
	}
	gr, err := algorithms.BuildGraph(layout(ringL, algorithms.RingPattern))
	if err != nil {
		return nil, err
	}
	gt, err := algorithms.BuildGraph(layout(treeL, algorithms.Pattern(src.tree.Pattern)))
	if err != nil {
		return nil, err
	}
	g := *gt
	g.Rings, g.RingOrder = gr.Rings, gr.RingOrder
	return &g, nil
}

// explainTopoTuning gives the GPU transports the search's bandwidths: the
// ring graph's C channels at its speed for ring, the tree graph's for tree
// (NCCL's busBw = channels × speed), spread over the 2C channels of the
// communicator, so each carries half the search's per-channel speed.
func explainTopoTuning(tu *algorithms.Tuning, src *explainSource) *algorithms.Tuning {
	t := *tu
	def := algorithms.DefaultTuning()
	scale := func(tr algorithms.Transport, defGBps float64, ring, tree float64) {
		if !t.Transports[tr].PerChannel || ring <= 0 || tree <= 0 {
			return
		}
		tc := t.Transports[tr]
		for p := 0; p < algorithms.NumProtocols; p++ {
			tc.BusGBps[algorithms.Ring][p] = def.Transports[tr].BusGBps[algorithms.Ring][p] * ring / 2 / defGBps
			tc.BusGBps[algorithms.Tree][p] = def.Transports[tr].BusGBps[algorithms.Tree][p] * tree / 2 / defGBps
		}
		t.Transports[tr] = tc
	}
	switch src.intra {
	case algorithms.NVLink:
		scale(algorithms.NVLink, algorithms.DefaultNVLinkGBps, src.ring.SpeedIntra, src.tree.SpeedIntra)
	case algorithms.PCI:
		scale(algorithms.PCI, algorithms.DefaultPCIGBps, src.ring.SpeedIntra, src.tree.SpeedIntra)
	}
	if src.nodes > 1 {
		scale(algorithms.Net, algorithms.DefaultNetGBps, src.ring.SpeedInter, src.tree.SpeedInter)
	}
	t.Source = fmt.Sprintf("%s; GPU link bandwidths from the channel search", tu.Source)
	return &t
}

// explainSourceText says where the layout comes from and, for a topology,
// what the channel search found.
func explainSourceText(w io.Writer, src *explainSource, g *algorithms.Graph, search int) {
	fmt.Fprintf(w, "== Source\n\n")
	what := ""
	switch src.kind {
	case "file":
		what = fmt.Sprintf("Topology file %s", src.path)
	case "discovered":
		what = "This machine, discovered (topology/discover: NVML for GPUs, sysfs for PCI, CPUs and NICs)"
	}
	if src.kind == "uniform" {
		fmt.Fprintf(w, "Uniform layout from --nranks %d and --nodes %d (no topology): every node holds the same number of ranks,\n", g.NRanks, g.NNodes)
		fmt.Fprintf(w, "and every channel visits a node's ranks in ascending order — what gotree's CPU communicator builds\n")
		fmt.Fprintf(w, "(pg/comm.go) and what a GPU machine whose search returns index order would give. Give --topo FILE (or no\n")
		fmt.Fprintf(w, "--nranks/--nodes, to discover this machine) to see the channels the topology search builds instead.\n\n")
		return
	}
	s := src.sys
	text := fmt.Sprintf("%s: %d GPUs, %d CPUs (NUMA nodes), %d NICs.", what, s.Count(topology.GPU), s.Count(topology.CPU), s.Count(topology.NIC))
	if src.note != "" {
		text += fmt.Sprintf(" Not used for the layout: %s.", src.note)
	}
	wrapText(w, text, 104)
	if src.note != "" {
		fmt.Fprintln(w)
		return
	}
	if src.nodes > 1 {
		fmt.Fprintf(w, "The communicator spans %d nodes, each a copy of this machine with one rank per GPU (%d ranks); the\n", src.nodes, g.NRanks)
		fmt.Fprintf(w, "search is the inter-node one: every channel enters and leaves the node through a network port.\n")
	} else {
		fmt.Fprintf(w, "The communicator is this one node with one rank per GPU (%d ranks).\n", g.NRanks)
	}
	fmt.Fprintf(w, "\n== Channel search (gotree's version of NCCL's, topology.Search)\n\n")
	fmt.Fprintf(w, "The search looks for orders of the GPUs in which every step from one GPU to the next has a fast path,\n")
	fmt.Fprintf(w, "and as many such channels as the links can carry at one speed (each channel takes its bandwidth off\n")
	fmt.Fprintf(w, "every link it uses). It runs twice, once for rings and once for trees (chains).\n\n")
	for _, r := range []*topology.SearchResult{src.ring, src.tree} {
		fmt.Fprintf(w, "%s search: %s at %g GB/s each (%s between GPUs", r.Pattern, plural(r.Channels, "channel", "channels"), r.SpeedIntra, r.TypeIntra)
		if src.nodes > 1 {
			fmt.Fprintf(w, ", %g GB/s and %s to the network", r.SpeedInter, r.TypeInter)
		}
		fmt.Fprintf(w, ")")
		if r.Duplicated {
			fmt.Fprintf(w, ", duplicated (the links had room for each order twice)")
		}
		fmt.Fprintln(w, ":")
		for c, o := range r.Orders {
			fmt.Fprintf(w, "  search channel %2d: GPUs", c)
			for _, x := range o {
				fmt.Fprintf(w, " %d", x)
			}
			if c < len(r.Nets) {
				fmt.Fprintf(w, "  (in through net%d, out through net%d)", r.Nets[c][0], r.Nets[c][1])
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintf(w, "\nThe communicator uses the smaller count, %d = min(%d ring, %d tree) as NCCL does: search channel c gives\n", search, src.ring.Channels, src.tree.Channels)
	fmt.Fprintf(w, "channel c's ring (the ring search's order) and its chain (the tree search's order). Ranks are the GPUs'\n")
	fmt.Fprintf(w, "local ranks; node k holds ranks %d·k .. %d·k+%d.", g.NRanks/g.NNodes, g.NRanks/g.NNodes, g.NRanks/g.NNodes-1)
	if src.tree.Pattern != topology.PatternTree || src.nodes > 1 {
		fmt.Fprintf(w, " The tree pattern is %s.", src.tree.Pattern)
	}
	fmt.Fprintf(w, "\n\n")
}

// wrapText writes text as lines of at most width characters.
func wrapText(w io.Writer, text string, width int) {
	line := 0
	for i, word := range strings.Fields(text) {
		if i > 0 && line+1+len(word) > width {
			fmt.Fprintln(w)
			line = 0
		} else if i > 0 {
			fmt.Fprint(w, " ")
			line++
		}
		fmt.Fprint(w, word)
		line += len(word)
	}
	fmt.Fprintln(w)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// explainGraph prints the channels, rings and trees with sentences.
func explainGraph(w io.Writer, g *algorithms.Graph, search, show int, src *explainSource) {
	n, m := g.NRanks, g.NNodes
	per := n / max(m, 1)
	topo := src.gpuOf != nil
	fmt.Fprintf(w, "== Communicator\n\n")
	fmt.Fprintf(w, "%s on %s (%d per node). Ranks are numbered node by node: node k holds ranks %d·k .. %d·k+%d.\n\n",
		plural(n, "rank", "ranks"), plural(m, "node", "nodes"), per, per, per, per-1)
	fmt.Fprintf(w, "== Channels\n\n")
	fmt.Fprintf(w, "A channel is an independent lane with its own connections; a message is cut into one slice per\n")
	fmt.Fprintf(w, "channel and the slices travel in parallel. The search found %s; as NCCL does, gotree doubles\n", plural(search, "channel", "channels"))
	fmt.Fprintf(w, "them to %d: channel c and channel c+%d use the same ring, but channel c carries tree 0 and channel\n", g.Channels, search)
	fmt.Fprintf(w, "c+%d tree 1 of the double binary tree, so that every rank's links are used in both trees.\n", search)
	fmt.Fprintf(w, "Small messages use fewer channels (at least 512 bytes each, and about 32 KiB per channel for the\n")
	fmt.Fprintf(w, "Simple protocol) because a slice that is too small costs more in latency than it gains in bandwidth.\n\n")

	fmt.Fprintf(w, "== Rings\n\n")
	for c := 0; c < g.Channels; c++ {
		fmt.Fprintf(w, "Channel %02d/%02d : %s\n", c, g.Channels, joinInts(g.RingOrder[c]))
	}
	steps := 2 * (n - 1)
	fmt.Fprintf(w, "\nEvery rank sends to the next one in the list (the last to the first). Inside a node the ring visits\n")
	if topo {
		fmt.Fprintf(w, "the ranks in the ring search's order for its channel; between nodes the last rank of node k sends\nto the first rank of node k+1.\n")
	} else {
		fmt.Fprintf(w, "the ranks in order; between nodes the last rank of node k sends to the first rank of node k+1.\n")
	}
	fmt.Fprintf(w, "A ring allreduce cuts each channel's slice into %d pieces and takes 2(n-1) = %d steps: %d steps of\n", n, steps, n-1)
	fmt.Fprintf(w, "reduce-scatter (each piece is added up as it goes round) and %d of all-gather (the finished pieces\n", n-1)
	fmt.Fprintf(w, "go round once more). Each rank sends 2(n-1)/n = %.2f times the message, which is optimal, but the\n", 2*float64(n-1)/float64(n))
	fmt.Fprintf(w, "latency grows with n because the %d steps happen one after another.\n\n", steps)

	fmt.Fprintf(w, "== Trees\n\n")
	l2 := bits.Len(uint(max(m, 1))) - 1
	chainWhy := func() {
		fmt.Fprintf(w, "NCCL (and gotree) build chains inside a node on purpose: the tree is pipelined in chunks, so a\n")
		fmt.Fprintf(w, "deeper tree only adds one hop latency per level (about a microsecond on NVLink), while a chain gives\n")
		fmt.Fprintf(w, "every rank at most one child and one parent: no rank has to receive and add up two streams at once,\n")
		fmt.Fprintf(w, "and every link carries the data once in each direction, at the speed the search found for it.\n")
		fmt.Fprintf(w, "A balanced binary tree would be shallower but its inner ranks would split their links between two\n")
		fmt.Fprintf(w, "children and their root would be the bottleneck.\n\n")
	}
	if m == 1 {
		if topo {
			fmt.Fprintf(w, "With one node there is no tree between nodes: the tree of every channel is a chain through the\n")
			fmt.Fprintf(w, "node's GPUs in the tree search's order for that channel (channel 0: %s), so its depth is\n", joinArrow(g, 0))
			fmt.Fprintf(w, "%d = GPUs per node - 1, not floor(log2 %d) = %d as a balanced binary tree would have; each channel\n", per-1, n, bits.Len(uint(n))-1)
			fmt.Fprintf(w, "starts its chain at another GPU, so the roots (and the ends) are spread over the GPUs.\n")
		} else {
			fmt.Fprintf(w, "With one node there is no tree between nodes: the tree of every channel is the node's chain\n")
			fmt.Fprintf(w, "%s, so its depth is %d = ranks per node - 1, not log2(%d) as a balanced binary tree would\n", joinArrow(g, 0), per-1, n)
			fmt.Fprintf(w, "have.\n")
		}
		chainWhy()
	} else {
		fmt.Fprintf(w, "Inside each node the ranks form a chain (%d deep); the double binary tree connects the nodes\n", per-1)
		fmt.Fprintf(w, "(depth floor(log2 %d) = %d). ", m, l2)
		switch g.Pattern {
		case algorithms.TreePattern:
			fmt.Fprintf(w, "With the tree pattern every link between nodes enters and leaves a\n")
			fmt.Fprintf(w, "node through the first rank of its chain (the one next to the network port the search chose). ")
		case algorithms.SplitTree:
			fmt.Fprintf(w, "With the split-tree pattern the first rank of a chain talks to the parent node and\n")
			fmt.Fprintf(w, "child nodes attach to its second rank. ")
		default:
			fmt.Fprintf(w, "The first rank of a node talks to the parent node; children nodes\n")
			fmt.Fprintf(w, "attach to the second (child 0) or the first rank (child 1) of the chain (the balanced-tree pattern). ")
		}
		fmt.Fprintf(w, "Tree 0 and tree 1 are\n")
		fmt.Fprintf(w, "built so that a node that is a leaf in one is interior in the other (for even node counts), which\n")
		fmt.Fprintf(w, "spreads the work. NCCL's depth estimate is %d - 1 + %d = %d; ", per, l2, algorithms.NCCLTreeDepth(n, m))
		deepest := 0
		for c := 0; c < g.Channels; c++ {
			deepest = max(deepest, g.TreeHeight(c))
		}
		if deepest > algorithms.NCCLTreeDepth(n, m) {
			fmt.Fprintf(w, "the exact depth here is %d, because a child node that\nattaches to the second rank of its parent's chain (and the uneven last level) adds hops.\n\n", deepest)
		} else {
			fmt.Fprintf(w, "the exact depth here is %d.\n\n", deepest)
		}
		if per > 1 {
			chainWhy()
		}
	}
	fmt.Fprintf(w, "A tree allreduce sends every chunk up the tree (each rank adds its children's data to its own and\n")
	fmt.Fprintf(w, "passes the sum to its parent) and then down again (the root's result is copied to every rank).\n")
	fmt.Fprintf(w, "Up and down run at the same time on different chunks; a message whose slice fits in one fragment (128 KiB\n")
	fmt.Fprintf(w, "on the CPU executor) has nothing to overlap and goes down right after it went up. Its latency grows\n")
	fmt.Fprintf(w, "with the depth, not with n.\n")
	fmt.Fprintf(w, "Roles: the root has no parent, an internal rank has a parent and children, a leaf has no children;\n")
	fmt.Fprintf(w, "a rank's depth is its distance from the root, its fan-out its number of children.\n\n")
	for c := 0; c < g.Channels; c++ {
		tr := g.Trees[c]
		if same := sameTreeAs(g, c); same >= 0 {
			fmt.Fprintf(w, "Channel %d: the same tree as channel %d (it carries another slice of the message).\n", c, same)
			continue
		}
		roles := map[string]int{}
		root, height, fan := -1, 0, 0
		for r, t := range tr {
			roles[graphTreeRole(t)]++
			if t.Up == -1 {
				root = r
			}
			height = max(height, t.Depth)
			fan = max(fan, len(t.Children()))
		}
		which := 0
		if c >= search {
			which = 1
		}
		fmt.Fprintf(w, "Channel %d (tree %d): root %d, depth %d, largest fan-out %d; %s, %s.\n",
			c, which, root, height, fan, plural(roles["internal"], "internal rank", "internal ranks"), plural(roles["leaf"], "leaf", "leaves"))
		if c < show {
			if topo {
				fmt.Fprintf(w, "  %6s %5s %4s %5s %6s  %s\n", "rank", "node", "gpu", "depth", "fanout", "role")
			} else {
				fmt.Fprintf(w, "  %6s %5s %5s %6s  %s\n", "rank", "node", "depth", "fanout", "role")
			}
			for r, t := range tr {
				if r >= 64 {
					fmt.Fprintf(w, "  ... (%d more ranks)\n", n-r)
					break
				}
				if topo {
					fmt.Fprintf(w, "  %6d %5d %4d %5d %6d  %s\n", r, g.NodeOf[r], src.gpuOf[r], t.Depth, len(t.Children()), graphTreeRole(t))
				} else {
					fmt.Fprintf(w, "  %6d %5d %5d %6d  %s\n", r, g.NodeOf[r], t.Depth, len(t.Children()), graphTreeRole(t))
				}
			}
			if n <= 64 && root >= 0 {
				graphPrintTreeText(w, g, c, root)
			}
		}
	}
	fmt.Fprintln(w)
}

// sameTreeAs returns an earlier channel with exactly channel c's tree, or -1.
func sameTreeAs(g *algorithms.Graph, c int) int {
	for d := 0; d < c; d++ {
		same := true
		for r := range g.Trees[c] {
			a, b := g.Trees[c][r], g.Trees[d][r]
			if a.Up != b.Up || a.Down != b.Down {
				same = false
				break
			}
		}
		if same {
			return d
		}
	}
	return -1
}

func joinInts(xs []int) string {
	var b strings.Builder
	for _, x := range xs {
		fmt.Fprintf(&b, "%4d", x)
	}
	return b.String()
}

// joinArrow prints channel c's chain from the root down ("0 -> 1 -> 2").
func joinArrow(g *algorithms.Graph, c int) string {
	tr := g.Trees[c]
	r := g.TreeRoot(c)
	var parts []string
	for r >= 0 && len(parts) <= g.NRanks {
		parts = append(parts, fmt.Sprint(r))
		kids := tr[r].Children()
		if len(kids) == 0 {
			break
		}
		r = kids[0]
	}
	return strings.Join(parts, " -> ")
}

// explainCost prints the predicted times and the crossover.
func explainCost(w io.Writer, tu *algorithms.Tuning, topo algorithms.CostTopo, maxB int64) {
	fmt.Fprintf(w, "== Cost model (%s; %v inside nodes, %v between)\n\n", tu.Source, topo.Intra, topo.Inter)
	var used []string
	if topo.RanksPerNode > 1 {
		used = append(used, fmt.Sprintf("%v: %s", topo.Intra, tu.EntryOf(topo.Intra, topo.RanksPerNode, topo.NNodes)))
	}
	if topo.NNodes > 1 {
		used = append(used, fmt.Sprintf("%v: %s", topo.Inter, tu.EntryOf(topo.Inter, topo.RanksPerNode, topo.NNodes)))
	}
	if len(used) > 0 {
		fmt.Fprintf(w, "Calibration used for %s of %s: %s.\n", plural(topo.NNodes, "node", "nodes"), plural(topo.RanksPerNode, "rank", "ranks"), strings.Join(used, "; "))
	}
	n := topo.NRanks
	fmt.Fprintf(w, "time = latency + bytes / algorithm bandwidth. Latency is a fixed cost per call plus one hop cost per\n")
	fmt.Fprintf(w, "step on the critical path: ring 2(n-1) = %d steps, tree 2 x ((ranks per node - 1) + log2(nodes)) = %d.\n",
		2*(n-1), 2*(topo.RanksPerNode-1+bits.Len(uint(topo.NNodes))-1))
	fmt.Fprintf(w, "Ring moves 2(n-1)/n of the message over each link, so its algorithm bandwidth is the bus bandwidth x\n")
	fmt.Fprintf(w, "n/(2(n-1)); the tree moves the whole message up and down, so it gets about half the bus bandwidth.\n")
	fmt.Fprintf(w, "Each protocol trades latency for bandwidth: LL (8-byte flags, lowest latency, half the bandwidth),\n")
	fmt.Fprintf(w, "LL128 (92%% of the bandwidth), Simple (full bandwidth, highest latency).\n")
	algos := []algorithms.Algorithm{algorithms.Ring, algorithms.Tree}
	if _, err := tu.Choose(algorithms.AllReduce, topo, 1<<20, algorithms.Constraints{Algos: 1 << algorithms.HalvingDoubling}); err == nil {
		algos = append(algos, algorithms.HalvingDoubling)
		sh := algorithms.ShapeOf(algorithms.AllReduce, algorithms.HalvingDoubling, topo)
		p := 1 << (bits.Len(uint(n)) - 1)
		fmt.Fprintf(w, "On one node the CPU executor also has halving-doubling (hd, Rabenseifner's allreduce): ranks\n")
		fmt.Fprintf(w, "exchange half of what they hold with the rank 1, 2, 4, ... positions away, keeping and reducing\n")
		fmt.Fprintf(w, "the other half, then exchange the finished halves back: 2 x log2(%d) = %d exchanges.\n", p, 2*(bits.Len(uint(p))-1))
		if p != n {
			fmt.Fprintf(w, "%d is not a power of two: %d of the ranks first hand their data to a partner and get the result\n", n, n-p)
			fmt.Fprintf(w, "back last, 2 more steps. ")
		}
		fmt.Fprintf(w, "That is %v steps against the ring's %d. It moves as many bytes as the ring when n\n", sh.IntraHops, 2*(n-1))
		fmt.Fprintf(w, "is a power of two, but reads and writes the buffers more often, so it wins where steps cost\n")
		fmt.Fprintf(w, "more than bytes: mid-sized messages, above all when ranks share CPU cores.\n")
	}
	if _, err := tu.Choose(algorithms.AllReduce, topo, 1<<20, algorithms.Constraints{Algos: 1 << algorithms.Direct}); err == nil {
		algos = append(algos, algorithms.Direct)
		fmt.Fprintf(w, "On one node whose ranks may read and write each other's memory (Linux process_vm_readv and\n")
		fmt.Fprintf(w, "process_vm_writev; GOTREE_CMA_DISABLE=1 turns it off) there is also direct, single-copy allreduce:\n")
		fmt.Fprintf(w, "each rank owns 1/%d of the message, reduces it reading the other ranks' buffers in place, and\n", n)
		fmt.Fprintf(w, "writes the finished part into theirs. No data goes through a FIFO: %v rounds of small messages\n", algorithms.ShapeOf(algorithms.AllReduce, algorithms.Direct, topo).IntraHops)
		fmt.Fprintf(w, "(buffers ready, done) instead of the ring's %d dependent steps. Each round is a message to every\n", 2*(n-1))
		fmt.Fprintf(w, "other rank, so it costs more than a ring step; direct wins where the ring's hand-offs and copies\n")
		fmt.Fprintf(w, "cost most: mid-sized to large messages on ranks that share cores.\n")
	}
	if _, err := tu.Choose(algorithms.AllReduce, topo, 1<<20, algorithms.Constraints{Algos: 1 << algorithms.Shared}); err == nil {
		algos = append(algos, algorithms.Shared)
		fmt.Fprintf(w, "On one node whose ranks link by shared memory there is also shared allreduce: every rank maps a\n")
		fmt.Fprintf(w, "staging region of every other rank. Per chunk of %s each rank copies its part of the message\n", fmtBytes(algorithms.SharedStageBytes))
		fmt.Fprintf(w, "into its region, reduces 1/%d of the chunk reading all %d regions, and copies the reduced parts\n", n, n)
		fmt.Fprintf(w, "back out: plain loads and stores, no system call per byte (direct's reads and writes pin every\n")
		fmt.Fprintf(w, "page), two rounds per chunk that are counters in the regions rather than messages.")
		if tu.SharedUnknown(topo, algorithms.Simple) {
			fmt.Fprintf(w, "\nNo calibration here has measured it, so the model's numbers for it are a guess: auto\nconsiders it by measuring it on the first calls of each size (autotuning).")
		}
		fmt.Fprintln(w)
	}
	if _, err := tu.Choose(algorithms.AllReduce, topo, 4, algorithms.Constraints{Algos: 1 << algorithms.OneShot}); err == nil {
		algos = append(algos, algorithms.OneShot)
		fmt.Fprintf(w, "For small messages on one node there is also one-shot: every rank sends its whole message to\n")
		fmt.Fprintf(w, "the %d others and adds up all %d itself, in rank order, so every rank gets the same bits. One step\n", n-1, n)
		fmt.Fprintf(w, "instead of the ring's %d, but each rank sends %d times the message, so it runs only up to %s\n", 2*(n-1), n-1, fmtBytes(algorithms.OneShotMaxBytes))
		fmt.Fprintf(w, "(each message within one FIFO slot) and wins only where steps cost more than bytes.")
		if tu.OneShotUnknown(topo, algorithms.Simple) {
			fmt.Fprintf(w, "\nWith more ranks than cores its one step is not the others' steps scaled up (every rank must\nhave run once): auto considers it only where a calibration for this many ranks measured it,\nand none has here.")
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	var sizes []int64
	for b := int64(4); b <= maxB; b *= 4 {
		sizes = append(sizes, b)
	}
	fmt.Fprintf(w, "%10s ", "size")
	for _, a := range algos {
		fmt.Fprintf(w, " %-24s", fmt.Sprintf("%v (best protocol)", a))
	}
	fmt.Fprintf(w, " %-18s %9s\n", "auto", "busbw")
	for _, b := range sizes {
		cell := func(a algorithms.Algorithm) string {
			p, err := tu.Choose(algorithms.AllReduce, topo, b, algorithms.Constraints{Algos: 1 << a})
			if err != nil {
				return "-"
			}
			return fmt.Sprintf("%10.1f us %-7v", p.TimeUs, p.Proto)
		}
		best, err := tu.Choose(algorithms.AllReduce, topo, b, algorithms.Constraints{})
		if err != nil {
			fmt.Fprintf(w, "%10s  %v\n", fmtBytes(b), err)
			continue
		}
		bus := float64(b) / (best.TimeUs * 1e3) * busFactor(algorithms.AllReduce, n)
		fmt.Fprintf(w, "%10s ", fmtBytes(b))
		for _, a := range algos {
			fmt.Fprintf(w, " %-24s", cell(a))
		}
		fmt.Fprintf(w, " %-18s %6.2f GB/s\n", fmt.Sprintf("%v/%v ch=%d", best.Algo, best.Proto, best.Channels), bus)
	}
	var fine []int64
	for b := int64(4); b <= maxB; b *= 2 {
		fine = append(fine, b)
	}
	xs, err := tu.Crossovers(algorithms.AllReduce, topo, fine, algorithms.Constraints{})
	if err != nil {
		return
	}
	fmt.Fprintf(w, "\nPredicted choice by size (powers of two from 4 B to %s):\n", fmtBytes(maxB))
	for _, x := range xs {
		fmt.Fprintf(w, "  %8s .. %-8s %v/%v\n", fmtBytes(x.From), fmtBytes(x.To), x.Algo, x.Proto)
	}
	var cross []string
	for i := 1; i < len(xs); i++ {
		if xs[i].Algo != xs[i-1].Algo {
			cross = append(cross, fmt.Sprintf("%v gives way to %v between %s and %s", xs[i-1].Algo, xs[i].Algo, fmtBytes(xs[i-1].To), fmtBytes(xs[i].From)))
		}
	}
	switch {
	case len(cross) == 0:
		fmt.Fprintf(w, "\nThe model predicts no crossover here: %v is faster at every size", xs[0].Algo)
		if topo.NNodes == 1 && xs[0].Algo == algorithms.Ring {
			fmt.Fprintf(w, " (in one node the tree is a chain of %d hops each way, no shorter than the ring's critical path, and it gets only half the bandwidth)", topo.RanksPerNode-1)
		}
		fmt.Fprintln(w, ".")
	default:
		fmt.Fprintf(w, "\nPredicted crossover: %s.\n", strings.Join(cross, "; "))
	}
	// In place the calibration may time the algorithms differently.
	if inXs, err := tu.Crossovers(algorithms.AllReduce, topo, fine, algorithms.Constraints{InPlace: true}); err == nil && !slices.Equal(inXs, xs) {
		fmt.Fprintf(w, "\nIn place (output = input, as in every allreduce torch issues) the calibration times the\n")
		fmt.Fprintf(w, "algorithms differently (its in-place factors), and the choice becomes:\n")
		for _, x := range inXs {
			fmt.Fprintf(w, "  %8s .. %-8s %v/%v\n", fmtBytes(x.From), fmtBytes(x.To), x.Algo, x.Proto)
		}
		fmt.Fprintf(w, "(The direct allreduce gains most: in place it writes each sum over lines it has just read,\n")
		fmt.Fprintf(w, "where out of place it also pulls the output buffers through the caches.)\n")
	}
	explainAutotune(w, tu, topo, fine)
}

// explainAutotune says which algorithms autotuning times per size
// (algorithms.AutotuneCandidates with pg's defaults), in runs of sizes
// with the same list.
func explainAutotune(w io.Writer, tu *algorithms.Tuning, topo algorithms.CostTopo, sizes []int64) {
	type run struct {
		from, to int64
		list     string
	}
	var runs []run
	for _, b := range sizes {
		cands, err := tu.AutotuneCandidates(algorithms.AllReduce, topo, b, algorithms.Constraints{}, algorithms.AutotuneSpan, algorithms.AutotuneMaxCandidates)
		if err != nil {
			return
		}
		var names []string
		for _, p := range cands {
			names = append(names, p.Algo.String())
		}
		list := strings.Join(names, ", ")
		if len(cands) < 2 {
			list += " (nothing else close: no measurement)"
		}
		if len(runs) > 0 && runs[len(runs)-1].list == list {
			runs[len(runs)-1].to = b
			continue
		}
		runs = append(runs, run{b, b, list})
	}
	fmt.Fprintf(w, "\nAt run time the model's choice is where a size starts (GOTREE_AUTOTUNE=0 keeps it): the first\n")
	fmt.Fprintf(w, "calls of each allreduce size run the algorithms it predicts within %gx of its choice, at most %d,\n", algorithms.AutotuneSpan, algorithms.AutotuneMaxCandidates)
	fmt.Fprintf(w, "and one-shot or shared where it cannot predict them (one-shot up to %s with more ranks than\n", fmtBytes(algorithms.OneShotMaxBytes))
	fmt.Fprintf(w, "cores, shared above that without a calibration of it), 4 calls each in three\n")
	fmt.Fprintf(w, "rounds of rotated order (A B C, B C A, C A B); all ranks keep the fastest measured (GOTREE_DEBUG=INFO\n")
	fmt.Fprintf(w, "GOTREE_DEBUG_SUBSYS=TUNING prints the times). Measured per size, in this order:\n")
	for _, r := range runs {
		fmt.Fprintf(w, "  %8s .. %-8s %s\n", fmtBytes(r.from), fmtBytes(r.to), r.list)
	}
}
