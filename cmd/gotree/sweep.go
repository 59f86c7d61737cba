package main

// gotree sweep measures where ring and tree allreduce cross over on this
// machine, the way the crossover should be measured: world sizes × forced
// algorithms × sizes (factor 2), each (N, algorithm) in fresh processes,
// run twice in mirrored order (N ascending with ring then tree, then N
// descending with tree then ring) so that drift and warm-up do not favour
// one side; every size is timed in cycles of iterations, out-of-place and
// in-place, results checked (#wrong); a group (run, N, algorithm, size)
// whose cycle medians vary by more than 5% (CV) is measured again in fresh
// processes and both measurements are kept. The output directory receives
// the raw samples (raw.csv), per-group statistics (groups.csv), the
// interval table with the auto check (crossover.md) and a plot
// (busbw.png). `--from raw.csv` rebuilds the reports without measuring.

import (
	"cmp"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/pg"
)

func init() {
	register("sweep", "measure the ring/tree crossover: mirrored runs, interval table, CSV and PNG", runSweep)
}

// Tie and noise thresholds of the method.
const (
	sweepProbeFrom = 256 << 10 // the machine state is probed around each size from this one (benchSpec.ProbeFrom)
	sweepTie       = 0.05      // |loser/winner - 1| below this is a tie
	sweepMaxCV     = 0.05      // a group above this is measured again
	sweepAutoTol   = 0.05      // auto may be this much slower than the best forced algorithm
	sweepSignAlpha = 0.01      // level of the paired sign test that calls auto slower beyond noise
)

type sweepOpts struct {
	ns        []int
	algos     []string
	minBytes  int64
	maxBytes  int64
	cycles    int
	iters     int
	warmup    int
	budget    time.Duration // per cycle and placement: fewer iterations for large sizes
	remeasure int
	paired    bool
	join      bool // one rank of a launcher's run (sweepJoin)
	out       string
	from      string
	timeout   time.Duration
	dtype     string
}

func runSweep(args []string, stdout, stderr io.Writer) int {
	if os.Getenv(envBenchSpec) != "" {
		return benchChild(stdout, stderr)
	}
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o sweepOpts
	var ns, algos, minS, maxS string
	fs.StringVar(&ns, "n", "2,3,4", "world sizes (local ranks)")
	fs.StringVar(&algos, "algos", "ring,tree,hd", "forced algorithms, in the order of the first pass (oneshot only up to its limit, algorithms.OneShotMaxBytes)")
	fs.StringVar(&minS, "b", "4", "smallest size in bytes")
	fs.StringVar(&maxS, "e", "64M", "largest size in bytes (sizes double)")
	fs.IntVar(&o.cycles, "cycles", 5, "cycles per size")
	fs.IntVar(&o.iters, "iters", 20, "timed iterations per cycle (fewer for large sizes, see -budget)")
	fs.IntVar(&o.warmup, "w", 2, "warm-up iterations per cycle")
	fs.DurationVar(&o.budget, "budget", 150*time.Millisecond, "predicted time per cycle above which iterations are cut (at least 3)")
	fs.IntVar(&o.remeasure, "remeasure", 1, "rounds of re-measuring groups with CV > 5%")
	fs.BoolVar(&o.paired, "paired", false, "time the algorithms in the same processes, alternating cycles (ABBA), instead of one process set per algorithm")
	fs.BoolVar(&o.join, "join", false, "be one rank of a run described by RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (one rank per namespace or machine, e.g. under tests/netns/netns.sh) instead of starting local ranks; always paired, -n and -remeasure do not apply; rank 0 writes the reports")
	fs.StringVar(&o.out, "out", "docs/crossover", "output directory")
	fs.StringVar(&o.from, "from", "", "rebuild the reports from this raw.csv (several, comma-separated: pooled) instead of measuring")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "communicator timeout")
	fs.StringVar(&o.dtype, "d", "float32", "dtype")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if o.ns, err = parseInts(ns); err == nil {
		o.minBytes, err = pg.ParseSize(minS)
	}
	if err == nil {
		o.maxBytes, err = pg.ParseSize(maxS)
	}
	if err == nil {
		_, err = algorithms.ParseDType(o.dtype)
	}
	for _, a := range strings.Split(algos, ",") {
		if a = strings.TrimSpace(a); a != "auto" && err == nil {
			_, err = algorithms.ParseAlgorithm(a)
		}
		o.algos = append(o.algos, a)
	}
	if err == nil && (o.cycles < 1 || o.iters < 1 || o.minBytes < 1 || o.maxBytes < o.minBytes) {
		err = errors.New("need -cycles >= 1, -iters >= 1 and 1 <= -b <= -e")
	}
	if err != nil {
		fmt.Fprintf(stderr, "gotree sweep: %v\n", err)
		return 2
	}
	var samples []sweepSample
	cmdline := "gotree sweep " + strings.Join(args, " ")
	if o.from == "" {
		// The library's settings in the environment go in front, as a
		// shell takes them (GOTREE_ALGO forces what "auto" runs, for one).
		cmdline = envWords(os.Getenv) + cmdline
	}
	machine := "at start: " + machineLine()
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		fmt.Fprintf(stderr, "gotree sweep: %v\n", err)
		return 1
	}
	if o.from != "" {
		var err error
		if samples, err = readSweepCSVs(strings.Split(o.from, ",")); err != nil {
			fmt.Fprintf(stderr, "gotree sweep: %v\n", err)
			return 1
		}
	} else {
		start := time.Now()
		lead := true
		if o.join {
			samples, lead, err = sweepJoin(o, stdout, stderr)
		} else {
			samples, err = sweepMeasure(o, stdout, stderr)
		}
		if err != nil {
			fmt.Fprintf(stderr, "gotree sweep: %v\n", err)
			return 1
		}
		if !lead {
			return 0
		}
		fmt.Fprintf(stdout, "# measured in %.0f s\n", time.Since(start).Seconds())
		if err := writeFile(filepath.Join(o.out, "raw.csv"), func(w io.Writer) error { return writeSweepCSV(w, samples) }); err != nil {
			fmt.Fprintf(stderr, "gotree sweep: %v\n", err)
			return 1
		}
	}
	cfg, err := pg.LoadConfig(os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "gotree sweep: %v\n", err)
		return 2
	}
	rep := analyseSweepStates(samples, measuredChoice(samples, false, sweepAuto(cfg, false)), false)
	rep.placed = analyseSweepStates(samples, measuredChoice(samples, true, sweepAuto(cfg, true)), true)
	rep.cmdline = cmdline
	rep.when = time.Now().UTC().Format("2006-01-02 15:04 MST")
	if o.from != "" {
		machine = "measurement: see raw.csv's run; report rebuilt on " + machineLine()
	} else {
		machine += "; at end: load " + loadAvg()
	}
	rep.machine = machine
	for _, w := range []struct {
		name string
		f    func(io.Writer) error
	}{
		{"groups.csv", rep.writeGroupsCSV},
		{"crossover.md", rep.writeMarkdown},
		{"busbw.png", rep.writePNG},
	} {
		if err := writeFile(filepath.Join(o.out, w.name), w.f); err != nil {
			fmt.Fprintf(stderr, "gotree sweep: %v\n", err)
			return 1
		}
	}
	for _, r := range []*sweepReport{rep, rep.placed} {
		r.writeIntervals(stdout)
		r.writeAutoCheck(stdout)
	}
	if rep.wrong != 0 {
		fmt.Fprintf(stderr, "gotree sweep: %d wrong elements\n", rep.wrong)
		return 1
	}
	return 0
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("bad integer %q", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func writeFile(path string, f func(io.Writer) error) error {
	tmp := path + ".tmp"
	fh, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := f(fh); err != nil {
		fh.Close()
		os.Remove(tmp)
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := fh.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// envWords is the library's settings in the environment (pg.SetVars) as
// shell words, each followed by a space: NAME=value, the value quoted
// where a shell would split or interpret it
// (GOTREE_ALGO='allreduce:tree;allgather:ring').
func envWords(getenv pg.Getenv) string {
	var b strings.Builder
	for _, kv := range pg.SetVars(getenv) {
		name, v, _ := strings.Cut(kv, "=")
		if strings.IndexFunc(v, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.,:/=+@%", r))
		}) >= 0 {
			v = "'" + strings.ReplaceAll(v, "'", `'\''`) + "'"
		}
		b.WriteString(name + "=" + v + " ")
	}
	return b.String()
}

func machineLine() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s, %d CPUs, load %s", host, runtime.NumCPU(), loadAvg())
}

// loadAvg is the 1, 5 and 15 minute load average ("?" where unknown).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

// sweepSample is one cycle: rank-maximum times of its iterations.
type sweepSample struct {
	Run     string // A: first pass, B: mirrored pass, R1, R2: re-measurements
	Seq     int    // order of the run in the session
	N       int
	Algo    string
	Bytes   int64
	Cycle   int
	InPlace bool
	Wrong   int64 // -1: not checked
	Times   []float64
	Chose   string // auto runs: the algorithm autotuning settled on ("": not recorded)
	// The machine state around the cycles (backend.HandoffProbe): µs to hand
	// 512 KiB from one CPU to another, just before and just after them —
	// around each size from sweepProbeFrom (rank 0 of the run, while the
	// others sleep), around the smaller sizes together (before the run,
	// by this process, and before the first larger size); 0: not probed.
	Handoff [2]float64
}

// sweepRuns returns the runs of the two mirrored passes in order.
func sweepRuns(ns []int, algos []string) (runs []struct {
	pass string
	n    int
	algo string
}) {
	add := func(pass string, n int, a string) {
		runs = append(runs, struct {
			pass string
			n    int
			algo string
		}{pass, n, a})
	}
	for _, n := range ns {
		for _, a := range algos {
			add("A", n, a)
		}
	}
	for i := len(ns) - 1; i >= 0; i-- {
		for k := len(algos) - 1; k >= 0; k-- {
			add("B", ns[i], algos[k])
		}
	}
	return runs
}

// sweepIters cuts the iterations of a size so that a cycle takes about
// budget by the cost model's prediction (at least 3) on one node of n ranks.
func sweepIters(o sweepOpts, tu *algorithms.Tuning, n int, size int64) int {
	return sweepItersOn(o, tu, sweepTopo(n, 1), size)
}

// sweepTopo is the cost model's view of n ranks spread evenly over nodes
// nodes: shared memory within a node, TCP between them.
func sweepTopo(n, nodes int) algorithms.CostTopo {
	nodes = max(nodes, 1)
	return algorithms.CostTopo{NRanks: n, NNodes: nodes, RanksPerNode: (n + nodes - 1) / nodes, Intra: algorithms.Shm, Inter: algorithms.TCP, Channels: 2}
}

// sweepItersOn is sweepIters on the topology topo.
func sweepItersOn(o sweepOpts, tu *algorithms.Tuning, topo algorithms.CostTopo, size int64) int {
	worst := 0.0
	for _, a := range []algorithms.Algorithm{algorithms.Ring, algorithms.Tree} {
		if p, err := tu.Predict(algorithms.AllReduce, a, algorithms.Simple, topo, size, 0); err == nil {
			worst = max(worst, p.TimeUs)
		}
	}
	it := o.iters
	if worst > 0 {
		it = min(it, int(float64(o.budget.Microseconds())/worst))
	}
	return max(it, min(3, o.iters))
}

func sweepSizes(lo, hi int64) []int64 {
	var s []int64
	for b := lo; b <= hi; b *= 2 {
		s = append(s, b)
	}
	return s
}

func sweepMeasure(o sweepOpts, stdout, stderr io.Writer) ([]sweepSample, error) {
	cfg, err := pg.LoadConfig(os.Getenv)
	if err != nil {
		return nil, err
	}
	tu := cfg.TuningFor(runtime.NumCPU()) // as pg.Init on this host
	sizes := sweepSizes(o.minBytes, o.maxBytes)
	var all []sweepSample
	seq := 0
	run := func(pass string, n int, algos []string, sizes []int64) error {
		seq++
		spec := benchSpec{NRanks: n, Algo: algos[0], Sizes: sizes, Cycles: o.cycles, Warmup: o.warmup, DType: o.dtype, Timeout: o.timeout, ProbeFrom: sweepProbeFrom}
		if len(algos) > 1 {
			spec.Paired = algos
		}
		for _, s := range sizes {
			spec.Iters = append(spec.Iters, sweepIters(o, tu, n, s))
		}
		t0 := time.Now()
		pre := probeState(stderr)
		res, err := benchLaunch(spec, stderr)
		if err != nil {
			return fmt.Errorf("run %s N=%d %s: %w", pass, n, strings.Join(algos, "+"), err)
		}
		post := probeState(stderr)
		all = append(all, benchSamples(res, pass, seq, n, pre, post, stdout, time.Since(t0))...)
		return nil
	}
	if o.paired {
		for _, n := range o.ns {
			if err := run("A", n, o.algos, sizes); err != nil {
				return all, err
			}
		}
		for i := len(o.ns) - 1; i >= 0; i-- {
			if err := run("B", o.ns[i], reversed(o.algos), sizes); err != nil {
				return all, err
			}
		}
	} else {
		for _, r := range sweepRuns(o.ns, o.algos) {
			if err := run(r.pass, r.n, []string{r.algo}, sizes); err != nil {
				return all, err
			}
		}
	}
	for round := 1; round <= o.remeasure; round++ {
		groups := sweepGroups(all)
		noisy := map[[2]string][]int64{} // (N, algo or "" when paired) -> sizes
		var keys [][2]string
		for _, g := range groups {
			if g.InPlace || g.CV <= sweepMaxCV || g.Run != "A" && g.Run != "B" && g.Run != fmt.Sprintf("R%d", round-1) {
				continue
			}
			k := [2]string{strconv.Itoa(g.N), g.Algo}
			if o.paired {
				k[1] = ""
			}
			if _, ok := noisy[k]; !ok {
				keys = append(keys, k)
			}
			noisy[k] = append(noisy[k], g.Bytes)
		}
		if len(keys) == 0 {
			break
		}
		for _, k := range keys {
			n, _ := strconv.Atoi(k[0])
			algos := []string{k[1]}
			if o.paired {
				algos = o.algos
			}
			if err := run(fmt.Sprintf("R%d", round), n, algos, dedupSorted(noisy[k])); err != nil {
				return all, err
			}
		}
	}
	return all, nil
}

// benchSamples turns one run's result into samples of pass and seq (the
// probes it could not take at its start and end are pre and post) and
// prints a line about the run.
func benchSamples(res *benchResult, pass string, seq, n int, pre, post float64, stdout io.Writer, took time.Duration) []sweepSample {
	algos := res.Spec.algos()
	var out []sweepSample
	var lo, hi float64
	for _, c := range res.Cycles {
		c.Handoff[0] = cmp.Or(c.Handoff[0], pre)
		c.Handoff[1] = cmp.Or(c.Handoff[1], post)
		a := cmp.Or(c.Algo, algos[0])
		out = append(out, sweepSample{Run: pass, Seq: seq, N: n, Algo: a, Bytes: c.Bytes, Cycle: c.Cycle, InPlace: c.InPlace, Wrong: c.Wrong, Times: c.Times, Chose: c.Chose, Handoff: c.Handoff})
		for _, us := range c.Handoff {
			if us > 0 && (lo == 0 || us < lo) {
				lo = us
			}
			hi = max(hi, us)
		}
	}
	fmt.Fprintf(stdout, "# run %-2s N=%d %-9s %2d sizes %5.1f s  hand-off %.0f–%.0f us\n", pass, n, strings.Join(algos, "+"), len(res.Spec.Sizes), took.Seconds(), lo, hi)
	return out
}

// reversed is xs in reverse order.
func reversed(xs []string) []string {
	out := slices.Clone(xs)
	slices.Reverse(out)
	return out
}

// sweepJoin measures as one rank of a run that a launcher describes
// (launcherEnv: one rank per network namespace or machine): every rank
// builds the same paired runs from the same flags, pass A with the
// algorithms in order and pass B reversed, in the same processes on fresh
// communicators. Rank 0 returns the samples and lead true.
func sweepJoin(o sweepOpts, stdout, stderr io.Writer) (all []sweepSample, lead bool, err error) {
	rank, n, addr, err := launcherEnv()
	if err != nil {
		return nil, false, err
	}
	cfg, err := pg.LoadConfig(os.Getenv)
	if err != nil {
		return nil, false, err
	}
	tu := cfg.TuningFor(runtime.NumCPU()) // as pg.Init on this host
	sizes := sweepSizes(o.minBytes, o.maxBytes)
	specs := []benchSpec{
		{NRanks: n, Paired: o.algos, Sizes: sizes, Cycles: o.cycles, Warmup: o.warmup, DType: o.dtype, Timeout: o.timeout, ProbeFrom: sweepProbeFrom},
	}
	specs = append(specs, specs[0])
	specs[1].Paired = reversed(o.algos)
	k := specs[0].comms()
	// Every rank must run the same cycles of the same sizes.
	what := fmt.Sprintf("sweep -join -algos %s -b %d -e %d -cycles %d -iters %d -w %d -budget %v -d %s",
		strings.Join(o.algos, ","), o.minBytes, o.maxBytes, o.cycles, o.iters, o.warmup, o.budget, o.dtype)
	uids, err := joinUniqueIDs(addr, rank, n, 2*k, what, cfg, o.timeout)
	if err != nil {
		return nil, false, err
	}
	iters := func(g *algorithms.Graph) []int {
		var it []int
		for _, s := range sizes {
			it = append(it, sweepItersOn(o, tu, sweepTopo(n, g.NNodes), s))
		}
		return it
	}
	for i, spec := range specs {
		pass := string(rune('A' + i))
		t0 := time.Now()
		var pre, post float64
		if rank == 0 {
			pre = probeState(stderr)
		}
		res, err := benchRun(spec, rank, n, uids[i*k:(i+1)*k], cfg, iters, stderr)
		if err != nil {
			return nil, false, fmt.Errorf("run %s N=%d: %w", pass, n, err)
		}
		if rank == 0 {
			post = probeState(stderr)
			all = append(all, benchSamples(res, pass, i+1, n, pre, post, stdout, time.Since(t0))...)
		}
	}
	return all, rank == 0, nil
}

func dedupSorted(xs []int64) []int64 {
	sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
	out := xs[:0]
	for i, x := range xs {
		if i == 0 || x != xs[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// CSV of samples: one row per cycle, the iteration times space-separated;
// auto rows name the algorithm autotuning ran, and every row the hand-off
// probe's µs before and after its cycles (empty: not probed). Files from
// before autotuning lack the last three columns, files from before the
// probe the last two.
var sweepCSVHeader = []string{"run", "seq", "nranks", "algo", "bytes", "placement", "cycle", "iters", "wrong", "median_us", "times_us", "chose", "handoff_before_us", "handoff_after_us"}

// sweepCSVCols are the column counts of the headers readSweepCSV accepts,
// newest first.
var sweepCSVCols = []int{len(sweepCSVHeader), len(sweepCSVHeader) - 2, len(sweepCSVHeader) - 3}

func writeSweepCSV(w io.Writer, ss []sweepSample) error {
	cw := csv.NewWriter(w)
	cw.Write(sweepCSVHeader)
	for _, s := range ss {
		pl := "out"
		if s.InPlace {
			pl = "in"
		}
		ts := make([]string, len(s.Times))
		for i, t := range s.Times {
			ts[i] = strconv.FormatFloat(t, 'f', 1, 64)
		}
		var probe [2]string
		for i, us := range s.Handoff {
			if us > 0 {
				probe[i] = strconv.FormatFloat(us, 'f', 1, 64)
			}
		}
		med, _, _ := stats(s.Times)
		cw.Write([]string{s.Run, strconv.Itoa(s.Seq), strconv.Itoa(s.N), s.Algo, strconv.FormatInt(s.Bytes, 10), pl,
			strconv.Itoa(s.Cycle), strconv.Itoa(len(s.Times)), strconv.FormatInt(s.Wrong, 10), strconv.FormatFloat(med, 'f', 1, 64), strings.Join(ts, " "), s.Chose, probe[0], probe[1]})
	}
	cw.Flush()
	return cw.Error()
}

// readSweepCSVs reads and pools several sweeps' raw.csv files; with more
// than one, each file's run names get its position as a prefix ("2:A"),
// so the runs of different files stay apart.
func readSweepCSVs(paths []string) ([]sweepSample, error) {
	var all []sweepSample
	for i, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		ss, err := readSweepCSV(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if len(paths) > 1 {
			for j := range ss {
				ss[j].Run = fmt.Sprintf("%d:%s", i+1, ss[j].Run)
			}
		}
		all = append(all, ss...)
	}
	return all, nil
}

func readSweepCSV(r io.Reader) ([]sweepSample, error) {
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 || !slices.ContainsFunc(sweepCSVCols, func(n int) bool { return slices.Equal(rows[0], sweepCSVHeader[:n]) }) {
		return nil, errors.New("raw.csv: unexpected header")
	}
	var out []sweepSample
	for i, row := range rows[1:] {
		var s sweepSample
		var e [8]error
		s.Run, s.Algo, s.InPlace = row[0], row[3], row[5] == "in"
		if len(row) > 11 {
			s.Chose = row[11]
		}
		for k := range s.Handoff {
			if c := 12 + k; len(row) > c && row[c] != "" {
				s.Handoff[k], e[6+k] = strconv.ParseFloat(row[c], 64)
			}
		}
		s.Seq, e[0] = strconv.Atoi(row[1])
		s.N, e[1] = strconv.Atoi(row[2])
		s.Bytes, e[2] = strconv.ParseInt(row[4], 10, 64)
		s.Cycle, e[3] = strconv.Atoi(row[6])
		s.Wrong, e[4] = strconv.ParseInt(row[8], 10, 64)
		for _, f := range strings.Fields(row[10]) {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				e[5] = err
			}
			s.Times = append(s.Times, v)
		}
		if err := errors.Join(e[:]...); err != nil || len(s.Times) == 0 {
			return nil, fmt.Errorf("raw.csv line %d: %v", i+2, err)
		}
		out = append(out, s)
	}
	return out, nil
}
