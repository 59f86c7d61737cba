package main

// gotree explain tells a newcomer what gotree (and NCCL) builds for a
// communicator and what the cost model predicts: the channels, the rings,
// every channel's tree with each rank's role, depth and fan-out, the
// predicted time of ring and tree across sizes, and where they cross.

import (
	"flag"
	"fmt"
	"io"
	"math/bits"
	"os"
	"strings"

	"github.com/gotree/gotree/algorithms"
)

func init() {
	register("explain", "explain the channels, rings and trees of a communicator and the predicted ring/tree crossover", runExplain)
}

func runExplain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nranks := fs.Int("nranks", 4, "ranks in the communicator")
	nodes := fs.Int("nodes", 1, "nodes (ranks are spread evenly, rank r on node r/(nranks/nodes))")
	channels := fs.Int("channels", 2, "channels found by the search (the graph has twice as many)")
	link := fs.String("links", "gpu", "gpu: NVLink inside a node, network between nodes (NCCL's constants); cpu: shm and tcp (the tuning file's)")
	tuning := fs.String("tuning", os.Getenv("GOTREE_TUNING_FILE"), "tuning file (default $GOTREE_TUNING_FILE, else built-in values)")
	maxS := fs.String("e", "1G", "largest size of the prediction table")
	trees := fs.Int("show", 4, "print at most this many channels' trees in full")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	maxB, err := parseSize(*maxS)
	if err == nil && (*nranks < 1 || *nodes < 1 || *nranks%*nodes != 0) {
		err = fmt.Errorf("--nranks %d must be a positive multiple of --nodes %d", *nranks, *nodes)
	}
	if err == nil && (*channels < 1 || *channels > algorithms.MaxSearchChannels) {
		err = fmt.Errorf("--channels must be in 1..%d", algorithms.MaxSearchChannels)
	}
	intra, inter := algorithms.NVLink, algorithms.Net
	switch *link {
	case "gpu":
	case "cpu":
		intra, inter = algorithms.Shm, algorithms.TCP
	default:
		if err == nil {
			err = fmt.Errorf("--links %q: want gpu or cpu", *link)
		}
	}
	tu := algorithms.DefaultTuning()
	if err == nil && *tuning != "" {
		var data []byte
		if data, err = os.ReadFile(*tuning); err == nil {
			tu, err = algorithms.ParseTuning(data)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "gotree explain: %v\n", err)
		return 2
	}
	perNode := *nranks / *nodes
	g, err := algorithms.BuildGraph(algorithms.UniformLayout(*nodes, perNode, *channels, algorithms.BalancedTree))
	if err != nil {
		fmt.Fprintf(stderr, "gotree explain: %v\n", err)
		return 1
	}
	topo := algorithms.TopoOfGraph(g, intra, inter)
	explainGraph(stdout, g, *channels, *trees)
	explainCost(stdout, tu, topo, maxB)
	return 0
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// explainGraph prints the channels, rings and trees with sentences.
func explainGraph(w io.Writer, g *algorithms.Graph, search, show int) {
	n, m := g.NRanks, g.NNodes
	per := n / max(m, 1)
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
	fmt.Fprintf(w, "the ranks in order; between nodes the last rank of node k sends to the first rank of node k+1.\n")
	fmt.Fprintf(w, "A ring allreduce cuts each channel's slice into %d pieces and takes 2(n-1) = %d steps: %d steps of\n", n, steps, n-1)
	fmt.Fprintf(w, "reduce-scatter (each piece is added up as it goes round) and %d of all-gather (the finished pieces\n", n-1)
	fmt.Fprintf(w, "go round once more). Each rank sends 2(n-1)/n = %.2f times the message, which is optimal, but the\n", 2*float64(n-1)/float64(n))
	fmt.Fprintf(w, "latency grows with n because the %d steps happen one after another.\n\n", steps)

	fmt.Fprintf(w, "== Trees\n\n")
	l2 := bits.Len(uint(max(m, 1))) - 1
	if m == 1 {
		fmt.Fprintf(w, "With one node there is no tree between nodes: the tree of every channel is the node's chain\n")
		fmt.Fprintf(w, "%s, so its depth is %d = ranks per node - 1, not log2(%d) as a balanced binary tree would\n", joinArrow(g, 0), per-1, n)
		fmt.Fprintf(w, "have. NCCL (and gotree) build chains inside a node on purpose: the links inside a node are fast\n")
		fmt.Fprintf(w, "and the tree is pipelined in chunks, so extra depth only adds a few hop latencies, while a chain\n")
		fmt.Fprintf(w, "gives every rank at most one child and one parent, so no rank has to receive and add up two\n")
		fmt.Fprintf(w, "streams at once and every link carries the data once in each direction.\n\n")
	} else {
		fmt.Fprintf(w, "Inside each node the ranks form a chain (%d deep); the double binary tree connects the nodes\n", per-1)
		fmt.Fprintf(w, "(depth floor(log2 %d) = %d). The first rank of a node talks to the parent node; children nodes\n", m, l2)
		fmt.Fprintf(w, "attach to the first or second rank of the chain (the balanced-tree pattern). Tree 0 and tree 1 are\n")
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
	}
	fmt.Fprintf(w, "A tree allreduce sends every chunk up the tree (each rank adds its children's data to its own and\n")
	fmt.Fprintf(w, "passes the sum to its parent) and then down again (the root's result is copied to every rank).\n")
	fmt.Fprintf(w, "Up and down run at the same time on different chunks. Its latency grows with the depth, not with n.\n\n")
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
			fmt.Fprintf(w, "  %6s %5s %5s %6s  %s\n", "rank", "node", "depth", "fanout", "role")
			for r, t := range tr {
				if r >= 64 {
					fmt.Fprintf(w, "  ... (%d more ranks)\n", n-r)
					break
				}
				fmt.Fprintf(w, "  %6d %5d %5d %6d  %s\n", r, g.NodeOf[r], t.Depth, len(t.Children()), graphTreeRole(t))
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
	n := topo.NRanks
	fmt.Fprintf(w, "time = latency + bytes / algorithm bandwidth. Latency is a fixed cost per call plus one hop cost per\n")
	fmt.Fprintf(w, "step on the critical path: ring 2(n-1) = %d steps, tree 2 x ((ranks per node - 1) + log2(nodes)) = %d.\n",
		2*(n-1), 2*(topo.RanksPerNode-1+bits.Len(uint(topo.NNodes))-1))
	fmt.Fprintf(w, "Ring moves 2(n-1)/n of the message over each link, so its algorithm bandwidth is the bus bandwidth x\n")
	fmt.Fprintf(w, "n/(2(n-1)); the tree moves the whole message up and down, so it gets about half the bus bandwidth.\n")
	fmt.Fprintf(w, "Each protocol trades latency for bandwidth: LL (8-byte flags, lowest latency, half the bandwidth),\n")
	fmt.Fprintf(w, "LL128 (92%% of the bandwidth), Simple (full bandwidth, highest latency).\n\n")
	var sizes []int64
	for b := int64(4); b <= maxB; b *= 4 {
		sizes = append(sizes, b)
	}
	fmt.Fprintf(w, "%10s  %-24s %-24s %-18s %9s\n", "size", "ring (best protocol)", "tree (best protocol)", "auto", "busbw")
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
		fmt.Fprintf(w, "%10s  %-24s %-24s %-18s %6.2f GB/s\n", fmtBytes(b), cell(algorithms.Ring), cell(algorithms.Tree),
			fmt.Sprintf("%v/%v ch=%d", best.Algo, best.Proto, best.Channels), bus)
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
		fmt.Fprintf(w, "\nThe model predicts no ring/tree crossover here: %v is faster at every size", xs[0].Algo)
		if topo.NNodes == 1 && xs[0].Algo == algorithms.Ring {
			fmt.Fprintf(w, " (in one node the tree is a chain of %d hops each way, no shorter than the ring's critical path, and it gets only half the bandwidth)", topo.RanksPerNode-1)
		}
		fmt.Fprintln(w, ".")
	default:
		fmt.Fprintf(w, "\nPredicted crossover: %s.\n", strings.Join(cross, "; "))
	}
}
