package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/gotree/gotree/algorithms"
)

func init() {
	register("graph", "show the trees and rings of a layout, or validate those in NCCL/gotree logs", runGraph)
}

// graphMaxRanks bounds the layouts "graph show" builds.
const graphMaxRanks = 1 << 16

func graphUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: gotree graph show --nodes M --ranks-per-node K [--channels C] [--pattern balanced|split|tree|ring] [--out DIR] [--log]")
	fmt.Fprintln(w, "       gotree graph validate [--strict] FILE")
	fmt.Fprintln(w, "\nshow      builds the graph NCCL would build for M nodes of K ranks (C search channels,")
	fmt.Fprintln(w, "          2C channels) and prints every channel's ring and tree; --out writes a PNG")
	fmt.Fprintln(w, "          of each channel's tree, --log prints every rank's NCCL-format log lines.")
	fmt.Fprintln(w, "validate  reads Tree/Channel/Ring/Trees lines from NCCL's or gotree's logs (FILE, or -")
	fmt.Fprintln(w, "          for stdin) and checks every channel's tree and ring; exits 1 naming the")
	fmt.Fprintln(w, "          channel and rank of each broken rule.")
}

func runGraph(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		graphUsage(stderr)
		return 2
	}
	switch args[0] {
	case "show":
		return runGraphShow(args[1:], stdout, stderr)
	case "validate":
		return runGraphValidate(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		graphUsage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "gotree graph: unknown subcommand %q\n", args[0])
	graphUsage(stderr)
	return 2
}

// graphPattern maps the --pattern names (short or NCCL's) to a Pattern.
func graphPattern(s string) (algorithms.Pattern, error) {
	switch s {
	case "balanced":
		return algorithms.BalancedTree, nil
	case "split":
		return algorithms.SplitTree, nil
	}
	return algorithms.ParsePattern(s)
}

func runGraphShow(args []string, stdout, stderr io.Writer) int {
	fs := graphFlags("graph show", stderr)
	nodes := fs.Int("nodes", 0, "number of nodes, >= 1")
	perNode := fs.Int("ranks-per-node", 0, "ranks on each node, >= 1")
	channels := fs.Int("channels", 1, fmt.Sprintf("search channels, 1..%d (the graph has twice as many)", algorithms.MaxSearchChannels))
	pattern := fs.String("pattern", "balanced", "tree pattern: balanced, split, tree or ring")
	out := fs.String("out", "", "write tree-chNN.png for every channel into this directory")
	logLines := fs.Bool("log", false, "also print every rank's NCCL-format graph log lines")
	fs.Usage = func() { graphUsage(stderr); fmt.Fprintln(stderr); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return graphFlagExit(err)
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "gotree graph show: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *nodes < 1 || *perNode < 1 || *nodes**perNode > graphMaxRanks {
		fmt.Fprintf(stderr, "gotree graph show: --nodes %d --ranks-per-node %d: need both >= 1 and at most %d ranks\n", *nodes, *perNode, graphMaxRanks)
		return 2
	}
	p, err := graphPattern(*pattern)
	if err != nil {
		fmt.Fprintf(stderr, "gotree graph show: --pattern: %v\n", err)
		return 2
	}
	g, err := algorithms.BuildGraph(algorithms.UniformLayout(*nodes, *perNode, *channels, p))
	if err != nil {
		fmt.Fprintf(stderr, "gotree graph show: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "graph: %d nodes x %d ranks = %d ranks, pattern %v, %d channels (%d found by the search, each used twice)\n",
		*nodes, *perNode, g.NRanks, p, g.Channels, *channels)
	fmt.Fprintf(stdout, "  channel c carries tree0 of the double binary tree over nodes, channel c+%d tree1; both have the same ring\n",
		*channels)
	for c := 0; c < g.Channels; c++ {
		fmt.Fprintln(stdout)
		graphPrintChannel(stdout, g, c, *channels)
		if *out != "" {
			path := filepath.Join(*out, fmt.Sprintf("tree-ch%02d.png", c))
			if err := graphWritePNG(path, g, c); err != nil {
				fmt.Fprintf(stderr, "gotree graph show: %v\n", err)
				return 1
			}
			fmt.Fprintf(stdout, "  picture: %s\n", path)
		}
	}
	if *logLines {
		fmt.Fprintln(stdout)
		for r := 0; r < g.NRanks; r++ {
			for _, l := range algorithms.FormatGraphLog(g, r) {
				fmt.Fprintln(stdout, l)
			}
		}
	}
	if ps := algorithms.ValidateGraph(g); len(ps) != 0 {
		// BuildGraph's graphs are checked by its tests; say so loudly if not.
		for _, p := range ps {
			fmt.Fprintf(stderr, "gotree graph show: built graph is broken: %v\n", p)
		}
		return 1
	}
	return 0
}

func graphWritePNG(path string, g *algorithms.Graph, c int) (err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	return writeTreePNG(f, g, c)
}

// graphTreeRole is a rank's role in a tree: root, internal (has children) or leaf.
func graphTreeRole(t algorithms.TreeLinks) string {
	switch {
	case t.Up == -1:
		return "root"
	case t.Down[0] == -1 && t.Down[1] == -1 && t.Down[2] == -1:
		return "leaf"
	}
	return "internal"
}

func graphPrintChannel(w io.Writer, g *algorithms.Graph, c, search int) {
	which := "tree0"
	if c >= search {
		which = "tree1"
	}
	fmt.Fprintf(w, "channel %d (search channel %d, %s)\n", c, c%search, which)
	var ring strings.Builder
	for _, r := range g.RingOrder[c] {
		fmt.Fprintf(&ring, "%d -> ", r)
	}
	fmt.Fprintf(w, "  ring: %s%d\n", ring.String(), g.RingOrder[c][0])
	tr := g.Trees[c]
	root, height := -1, 0
	for r, t := range tr {
		if t.Up == -1 && root < 0 {
			root = r
		}
		height = max(height, t.Depth)
	}
	fmt.Fprintf(w, "  tree: root %d, height %d (* marks an edge between nodes)\n", root, height)
	fmt.Fprintf(w, "  %6s %5s %6s  %-16s %5s  %s\n", "rank", "node", "up", "down", "depth", "role")
	for r, t := range tr {
		node := "-"
		if g.NodeOf != nil {
			node = fmt.Sprint(g.NodeOf[r])
		}
		down := fmt.Sprintf("%d/%d/%d", t.Down[0], t.Down[1], t.Down[2])
		fmt.Fprintf(w, "  %6d %5s %6d  %-16s %5d  %s\n", r, node, t.Up, down, t.Depth, graphTreeRole(t))
	}
	if root >= 0 {
		graphPrintTreeText(w, g, c, root)
	}
}

// graphPrintTreeText draws channel c's tree as indented text below root; "*"
// marks an edge between two nodes.
func graphPrintTreeText(w io.Writer, g *algorithms.Graph, c, root int) {
	tr := g.Trees[c]
	seen := make([]bool, g.NRanks)
	var walk func(r int, prefix, branch string)
	walk = func(r int, prefix, branch string) {
		mark := ""
		if up := tr[r].Up; up >= 0 && g.NodeOf != nil && g.NodeOf[up] != g.NodeOf[r] {
			mark = " *"
		}
		if branch == "" {
			mark = " (root)"
		}
		fmt.Fprintf(w, "  %s%s%d%s\n", prefix, branch, r, mark)
		if seen[r] {
			return
		}
		seen[r] = true
		var kids []int
		for _, d := range tr[r].Down {
			if d >= 0 && d < g.NRanks {
				kids = append(kids, d)
			}
		}
		next := prefix
		switch branch {
		case "|-- ":
			next += "|   "
		case "`-- ":
			next += "    "
		}
		for i, k := range kids {
			b := "|-- "
			if i == len(kids)-1 {
				b = "`-- "
			}
			walk(k, next, b)
		}
	}
	walk(root, "", "")
}

func runGraphValidate(args []string, stdout, stderr io.Writer) int {
	fs := graphFlags("graph validate", stderr)
	strict := fs.Bool("strict", false, "fail on warnings too (conflicting duplicates, missing or cut lines)")
	fs.Usage = func() { graphUsage(stderr); fmt.Fprintln(stderr); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return graphFlagExit(err)
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "gotree graph validate: need exactly one FILE (- for stdin)")
		return 2
	}
	name := fs.Arg(0)
	var in io.Reader = os.Stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintf(stderr, "gotree graph validate: %v\n", err)
			return 2
		}
		defer f.Close()
		in = f
	}
	g, warns, err := algorithms.ParseGraphLog(in)
	for _, w := range warns {
		fmt.Fprintf(stderr, "gotree graph validate: %s: warning: %s\n", name, w)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gotree graph validate: %s: %v\n", name, err)
		return 2
	}
	nodes := "unknown number of"
	if g.NNodes > 0 {
		nodes = fmt.Sprint(g.NNodes)
	}
	fmt.Fprintf(stdout, "graph: %d ranks on %s nodes, %d channels\n", g.NRanks, nodes, g.Channels)
	ps := algorithms.ValidateGraph(g)
	byChan := make(map[int][]algorithms.Problem)
	for _, p := range ps {
		byChan[p.Channel] = append(byChan[p.Channel], p)
	}
	for _, p := range byChan[-1] {
		fmt.Fprintf(stdout, "graph: %s\n", p.Msg)
	}
	for c := 0; c < g.Channels; c++ {
		cps := byChan[c]
		if len(cps) == 0 {
			fmt.Fprintf(stdout, "channel %d: OK\n", c)
			continue
		}
		fmt.Fprintf(stdout, "channel %d: FAIL\n", c)
		for _, p := range cps {
			if p.Rank >= 0 {
				fmt.Fprintf(stdout, "  rank %d: %s\n", p.Rank, p.Msg)
			} else {
				fmt.Fprintf(stdout, "  %s\n", p.Msg)
			}
		}
	}
	if len(ps) > 0 {
		first := ps[0]
		for _, p := range ps {
			if p.Rank >= 0 {
				first = p // name a rank where one is to blame
				break
			}
		}
		fmt.Fprintf(stderr, "gotree graph validate: %s: %d problems; first: %v\n", name, len(ps), first)
		return 1
	}
	if *strict && len(warns) > 0 {
		fmt.Fprintf(stderr, "gotree graph validate: %s: %d warnings (--strict)\n", name, len(warns))
		return 1
	}
	return 0
}
