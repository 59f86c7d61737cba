package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/gotree/gotree/topology"
	"github.com/gotree/gotree/topology/discover"
)

func init() {
	register("topo", "show this machine's topology (or a file's), or search its ring/tree channels", runTopo)
}

// topoFileFromEnv is the one place the CLI reads GOTREE_TOPO_FILE; --topo
// overrides it.
func topoFileFromEnv() string { return os.Getenv("GOTREE_TOPO_FILE") }

func topoUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: gotree topo [--topo FILE] [--dump FILE] [--json] [-v]")
	fmt.Fprintln(w, "       gotree topo search [--pattern ring|tree|split_tree] [--topo FILE] [--internode] [--crossnic]")
	fmt.Fprintln(w, "                          [--max-channels N] [--xml FILE]")
	fmt.Fprintln(w, "\ntopo    prints the machine as a tree (CPUs, PCI switches, GPUs, NICs, NVLinks) and a")
	fmt.Fprintln(w, "        GPU×GPU (+NIC) matrix of path types like 'nvidia-smi topo -m'. The machine is")
	fmt.Fprintln(w, "        discovered (NVML, sysfs, rdmamap) unless --topo or GOTREE_TOPO_FILE names a")
	fmt.Fprintln(w, "        gotree JSON or NCCL_TOPO_FILE XML file; --dump writes it (NCCL XML for *.xml).")
	fmt.Fprintln(w, "search  runs NCCL's channel search and prints each channel's GPU order and bandwidth;")
	fmt.Fprintln(w, "        --xml writes the result in NCCL_GRAPH_DUMP_FILE format.")
}

func topoFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("gotree "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func topoFlagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// loadTopo loads --topo/GOTREE_TOPO_FILE or discovers this machine, logging
// INFO lines to stderr when verbose.
func loadTopo(file, dump string, verbose bool, stderr io.Writer) (*topology.System, error) {
	if file == "" {
		file = topoFileFromEnv()
	}
	logf := func(format string, args ...any) {
		if verbose {
			fmt.Fprintf(stderr, format+"\n", args...)
		}
	}
	return topology.LoadSystem(topology.LoadOptions{
		TopoFile:   file,
		DumpFile:   dump,
		Discoverer: discover.New(discover.Options{Logf: logf}),
		Logf:       logf,
	})
}

func runTopo(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "search":
			return runTopoSearch(args[1:], stdout, stderr)
		case "help":
			topoUsage(stdout)
			return 0
		}
	}
	fs := topoFlags("topo", stderr)
	file := fs.String("topo", "", "topology file (gotree JSON or NCCL XML); default $GOTREE_TOPO_FILE, else discover")
	dump := fs.String("dump", "", "write the topology to this file (NCCL XML if it ends in .xml, else gotree JSON)")
	asJSON := fs.Bool("json", false, "print the topology as gotree JSON instead of a tree and matrix")
	verbose := fs.Bool("v", true, "log discovery at INFO level on stderr")
	fs.Usage = func() { topoUsage(stderr); fmt.Fprintln(stderr); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return topoFlagExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gotree topo: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	s, err := loadTopo(*file, *dump, *verbose, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "gotree topo:", err)
		return 1
	}
	if *asJSON {
		err = topology.WriteJSON(stdout, s)
	} else {
		err = topology.WriteTree(stdout, s)
		if err == nil {
			fmt.Fprintln(stdout)
			err = topology.WriteMatrix(stdout, s, nil)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "gotree topo:", err)
		return 1
	}
	return 0
}

func runTopoSearch(args []string, stdout, stderr io.Writer) int {
	fs := topoFlags("topo search", stderr)
	file := fs.String("topo", "", "topology file (gotree JSON or NCCL XML); default $GOTREE_TOPO_FILE, else discover")
	pattern := fs.String("pattern", "ring", "ring, tree or split_tree")
	inter := fs.Bool("internode", false, "channels enter and leave the node through its network ports")
	cross := fs.Bool("crossnic", false, "with --internode, a channel may leave through another port")
	maxCh := fs.Int("max-channels", 0, "most channels to search (default 16)")
	xmlOut := fs.String("xml", "", "also write the result to this file in NCCL_GRAPH_DUMP_FILE format")
	verbose := fs.Bool("v", false, "log discovery at INFO level on stderr")
	fs.Usage = func() { topoUsage(stderr); fmt.Fprintln(stderr); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return topoFlagExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gotree topo search: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	p, err := topology.ParsePattern(*pattern)
	if err != nil {
		fmt.Fprintln(stderr, "gotree topo search:", err)
		return 2
	}
	s, err := loadTopo(*file, "", *verbose, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "gotree topo search:", err)
		return 1
	}
	r, err := topology.Search(s, topology.SearchOptions{Pattern: p, InterNode: *inter, CrossNIC: *cross, MaxChannels: *maxCh})
	if err != nil {
		fmt.Fprintln(stderr, "gotree topo search:", err)
		return 1
	}
	writeSearch(stdout, s, r)
	if *xmlOut != "" {
		var b strings.Builder
		if err := topology.WriteGraphXML(&b, s, []*topology.SearchResult{r}); err == nil {
			err = os.WriteFile(*xmlOut, []byte(b.String()), 0o644)
		}
		if err != nil {
			fmt.Fprintln(stderr, "gotree topo search:", err)
			return 1
		}
	}
	return 0
}

// writeSearch prints a search result with NCCL's "Channel cc/nn :" lines,
// in GPU indices, with each channel's bandwidth.
func writeSearch(w io.Writer, s *topology.System, r *topology.SearchResult) {
	fmt.Fprintf(w, "Pattern %s, %d GPUs: %d channels × %g GB/s intra (%s), %g GB/s inter (%s)", r.Pattern, s.Count(topology.GPU), r.Channels, r.SpeedIntra, r.TypeIntra, r.SpeedInter, r.TypeInter)
	if r.Duplicated {
		fmt.Fprint(w, ", duplicated")
	}
	if r.Fallback {
		fmt.Fprint(w, ", FALLBACK (no order fits)")
	}
	fmt.Fprintf(w, "; %d search steps\n", r.Steps)
	if r.Channels == 0 {
		fmt.Fprintln(w, "No GPU: no channels (ranks on CPUs are ordered by the communicator).")
		return
	}
	ranks := r.RankOrders(s)
	for c, o := range r.Orders {
		fmt.Fprintf(w, "Channel %02d/%02d :", c, r.Channels)
		if c < len(r.Nets) {
			fmt.Fprintf(w, " net%d ->", r.Nets[c][0])
		}
		for _, g := range o {
			fmt.Fprintf(w, " %4d", g)
		}
		if c < len(r.Nets) {
			fmt.Fprintf(w, " -> net%d", r.Nets[c][1])
		}
		fmt.Fprintf(w, "   %g GB/s", r.SpeedIntra)
		if !slices.Equal(o, ranks[c]) {
			fmt.Fprintf(w, "   (local ranks %v)", ranks[c])
		}
		fmt.Fprintln(w)
	}
	var total float64
	total = float64(r.Channels) * r.SpeedIntra
	fmt.Fprintf(w, "Total: %g GB/s\n", total)
}
