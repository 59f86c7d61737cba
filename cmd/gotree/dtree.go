package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/gotree/gotree/algorithms"
)

func init() {
	register("dtree", "print NCCL's double binary tree over N ranks (--json for programs)", runDtree)
}

// dtreeMaxRanks bounds --nranks; NCCL's trees connect nodes, and no job has
// more than this many.
const dtreeMaxRanks = 1 << 20

// dtreeRank is one rank's entry of the --json output. Each tree is
// [up, down0, down1] in NCCL's slot order, -1 for none.
type dtreeRank struct {
	Rank  int    `json:"rank"`
	Tree0 [3]int `json:"tree0"`
	Tree1 [3]int `json:"tree1"`
}

type dtreeOut struct {
	NRanks int         `json:"nranks"`
	Ranks  []dtreeRank `json:"ranks"`
}

func dtreeOf(n int) dtreeOut {
	out := dtreeOut{NRanks: n, Ranks: make([]dtreeRank, n)}
	for r := 0; r < n; r++ {
		t0, t1 := algorithms.Dtree(n, r)
		out.Ranks[r] = dtreeRank{
			Rank:  r,
			Tree0: [3]int{t0.Up, t0.Down0, t0.Down1},
			Tree1: [3]int{t1.Up, t1.Down0, t1.Down1},
		}
	}
	return out
}

// graphFlags makes a flag set that reports to stderr and does not exit.
func graphFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("gotree "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// graphFlagExit maps a flag parsing error to an exit code: 0 for -h, else 2.
func graphFlagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

func runDtree(args []string, stdout, stderr io.Writer) int {
	fs := graphFlags("dtree", stderr)
	n := fs.Int("nranks", 0, "number of ranks (or nodes) the trees span, >= 1")
	asJSON := fs.Bool("json", false, `print one line of JSON: {"nranks":N,"ranks":[{"rank":0,"tree0":[up,down0,down1],"tree1":[...]},...]}`)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gotree dtree --nranks N [--json]")
		fmt.Fprintln(stderr, "\nPrints every rank's links in NCCL's double binary tree: tree0 is the binary")
		fmt.Fprintln(stderr, "tree rooted at 0, tree1 its mirror (even N) or shift (odd N). NCCL builds it")
		fmt.Fprintln(stderr, "over nodes; inside a node the ranks form a chain (see 'gotree graph show').")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return graphFlagExit(err)
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "gotree dtree: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *n < 1 || *n > dtreeMaxRanks {
		fmt.Fprintf(stderr, "gotree dtree: --nranks %d: need 1..%d\n", *n, dtreeMaxRanks)
		return 2
	}
	out := dtreeOf(*n)
	if *asJSON {
		b, err := json.Marshal(out)
		if err != nil {
			fmt.Fprintf(stderr, "gotree dtree: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s\n", b)
		return 0
	}
	printDtreeTable(stdout, out)
	return 0
}

// dtreeRole is a rank's role in a tree given [up, down0, down1].
func dtreeRole(t [3]int) string {
	switch {
	case t[0] == -1:
		return "root"
	case t[1] == -1 && t[2] == -1:
		return "leaf"
	}
	return "internal"
}

func printDtreeTable(w io.Writer, out dtreeOut) {
	n := out.NRanks
	how := "mirror (n-1-r) of tree0, n even"
	if n%2 == 1 {
		how = "shift (r+1) of tree0, n odd"
	}
	if n == 1 {
		how = "a single rank"
	}
	r0, r1 := algorithms.DtreeRoots(n)
	fmt.Fprintf(w, "double binary tree over %d ranks: tree0 root %d, tree1 root %d; tree1 is the %s\n", n, r0, r1, how)
	fmt.Fprintf(w, "%6s | %-31s | %s\n", "rank", "tree0:  up down0 down1 role", "tree1:  up down0 down1 role")
	fmt.Fprintf(w, "%s-+-%s-+-%s\n", strings.Repeat("-", 6), strings.Repeat("-", 31), strings.Repeat("-", 31))
	var both []string
	for _, e := range out.Ranks {
		fmt.Fprintf(w, "%6d | %10d %5d %5d %-8s | %10d %5d %5d %s\n", e.Rank,
			e.Tree0[0], e.Tree0[1], e.Tree0[2], dtreeRole(e.Tree0),
			e.Tree1[0], e.Tree1[1], e.Tree1[2], dtreeRole(e.Tree1))
		if dtreeHasChild(e.Tree0) && dtreeHasChild(e.Tree1) {
			both = append(both, fmt.Sprint(e.Rank))
		}
	}
	if len(both) == 0 {
		fmt.Fprintln(w, "no rank has children in both trees")
	} else {
		fmt.Fprintf(w, "ranks with children in both trees: %s\n", strings.Join(both, ", "))
	}
}

func dtreeHasChild(t [3]int) bool { return t[1] != -1 || t[2] != -1 }
