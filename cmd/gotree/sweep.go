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
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
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
	sweepTie     = 0.05 // |loser/winner - 1| below this is a tie
	sweepMaxCV   = 0.05 // a group above this is measured again
	sweepAutoTol = 0.05 // auto may be this much slower than the best forced algorithm
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
	fs.StringVar(&algos, "algos", "ring,tree", "forced algorithms, in the order of the first pass")
	fs.StringVar(&minS, "b", "4", "smallest size in bytes")
	fs.StringVar(&maxS, "e", "64M", "largest size in bytes (sizes double)")
	fs.IntVar(&o.cycles, "cycles", 5, "cycles per size")
	fs.IntVar(&o.iters, "iters", 20, "timed iterations per cycle (fewer for large sizes, see -budget)")
	fs.IntVar(&o.warmup, "w", 2, "warm-up iterations per cycle")
	fs.DurationVar(&o.budget, "budget", 150*time.Millisecond, "predicted time per cycle above which iterations are cut (at least 3)")
	fs.IntVar(&o.remeasure, "remeasure", 1, "rounds of re-measuring groups with CV > 5%")
	fs.StringVar(&o.out, "out", "docs/crossover", "output directory")
	fs.StringVar(&o.from, "from", "", "rebuild the reports from this raw.csv instead of measuring")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "communicator timeout")
	fs.StringVar(&o.dtype, "d", "float32", "dtype")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if o.ns, err = parseInts(ns); err == nil {
		o.minBytes, err = parseSize(minS)
	}
	if err == nil {
		o.maxBytes, err = parseSize(maxS)
	}
	if err == nil {
		_, err = algorithms.ParseDType(o.dtype)
	}
	for _, a := range strings.Split(algos, ",") {
		if a = strings.TrimSpace(a); a != "ring" && a != "tree" && a != "auto" && err == nil {
			err = fmt.Errorf("unknown algorithm %q", a)
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
	if o.from != "" {
		f, err := os.Open(o.from)
		if err == nil {
			samples, err = readSweepCSV(f)
			f.Close()
		}
		if err != nil {
			fmt.Fprintf(stderr, "gotree sweep: %v\n", err)
			return 1
		}
	} else {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			fmt.Fprintf(stderr, "gotree sweep: %v\n", err)
			return 1
		}
		start := time.Now()
		if samples, err = sweepMeasure(o, stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "gotree sweep: %v\n", err)
			return 1
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
	rep := analyseSweep(samples, sweepAuto(cfg))
	rep.cmdline = cmdline
	rep.when = time.Now().UTC().Format("2006-01-02 15:04 MST")
	rep.machine = machineLine()
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
	rep.writeIntervals(stdout)
	rep.writeAutoCheck(stdout)
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

func machineLine() string {
	host, _ := os.Hostname()
	load := ""
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = ", load average " + strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return fmt.Sprintf("%s, %d CPUs%s", host, numCPU(), load)
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
// budget by the cost model's prediction (at least 3).
func sweepIters(o sweepOpts, tu *algorithms.Tuning, n int, size int64) int {
	topo := algorithms.CostTopo{NRanks: n, NNodes: 1, RanksPerNode: n, Intra: algorithms.Shm, Inter: algorithms.TCP, Channels: 2}
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
	tu := cfg.Tuning
	if tu == nil {
		tu = algorithms.DefaultTuning()
	}
	sizes := sweepSizes(o.minBytes, o.maxBytes)
	var all []sweepSample
	seq := 0
	run := func(pass string, n int, algo string, sizes []int64) error {
		seq++
		spec := benchSpec{NRanks: n, Algo: algo, Sizes: sizes, Cycles: o.cycles, Warmup: o.warmup, DType: o.dtype, Timeout: o.timeout}
		for _, s := range sizes {
			spec.Iters = append(spec.Iters, sweepIters(o, tu, n, s))
		}
		t0 := time.Now()
		res, err := benchLaunch(spec, stderr)
		if err != nil {
			return fmt.Errorf("run %s N=%d %s: %w", pass, n, algo, err)
		}
		for _, c := range res.Cycles {
			all = append(all, sweepSample{Run: pass, Seq: seq, N: n, Algo: algo, Bytes: c.Bytes, Cycle: c.Cycle, InPlace: c.InPlace, Wrong: c.Wrong, Times: c.Times})
		}
		fmt.Fprintf(stdout, "# run %-2s N=%d %-4s %2d sizes %5.1f s\n", pass, n, algo, len(sizes), time.Since(t0).Seconds())
		return nil
	}
	for _, r := range sweepRuns(o.ns, o.algos) {
		if err := run(r.pass, r.n, r.algo, sizes); err != nil {
			return all, err
		}
	}
	for round := 1; round <= o.remeasure; round++ {
		groups := sweepGroups(all)
		noisy := map[[2]string][]int64{} // (N, algo) -> sizes
		var keys [][2]string
		for _, g := range groups {
			if g.InPlace || g.CV <= sweepMaxCV || g.Run != "A" && g.Run != "B" && g.Run != fmt.Sprintf("R%d", round-1) {
				continue
			}
			k := [2]string{strconv.Itoa(g.N), g.Algo}
			if _, ok := noisy[k]; !ok {
				keys = append(keys, k)
			}
			if s := noisy[k]; len(s) == 0 || s[len(s)-1] != g.Bytes {
				noisy[k] = append(s, g.Bytes)
			}
		}
		if len(keys) == 0 {
			break
		}
		for _, k := range keys {
			n, _ := strconv.Atoi(k[0])
			s := dedupSorted(noisy[k])
			if err := run(fmt.Sprintf("R%d", round), n, k[1], s); err != nil {
				return all, err
			}
		}
	}
	return all, nil
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

// CSV of samples: one row per cycle, the iteration times space-separated.
var sweepCSVHeader = []string{"run", "seq", "nranks", "algo", "bytes", "placement", "cycle", "iters", "wrong", "median_us", "times_us"}

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
		med, _, _ := stats(s.Times)
		cw.Write([]string{s.Run, strconv.Itoa(s.Seq), strconv.Itoa(s.N), s.Algo, strconv.FormatInt(s.Bytes, 10), pl,
			strconv.Itoa(s.Cycle), strconv.Itoa(len(s.Times)), strconv.FormatInt(s.Wrong, 10), strconv.FormatFloat(med, 'f', 1, 64), strings.Join(ts, " ")})
	}
	cw.Flush()
	return cw.Error()
}

func readSweepCSV(r io.Reader) ([]sweepSample, error) {
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 || strings.Join(rows[0], ",") != strings.Join(sweepCSVHeader, ",") {
		return nil, errors.New("raw.csv: unexpected header")
	}
	var out []sweepSample
	for i, row := range rows[1:] {
		var s sweepSample
		var e [6]error
		s.Run, s.Algo, s.InPlace = row[0], row[3], row[5] == "in"
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

// sweepGroup is the statistics of one (run, N, algorithm, size, placement).
type sweepGroup struct {
	Run          string
	Seq          int
	N            int
	Algo         string
	Bytes        int64
	InPlace      bool
	Cycles       int
	Iters        int
	CycleMedians []float64
	Median       float64 // over every iteration of every cycle
	P95          float64
	CV           float64 // of the cycle medians
	Wrong        int64
}

func sweepGroups(ss []sweepSample) []sweepGroup {
	type key struct {
		run     string
		seq, n  int
		algo    string
		bytes   int64
		inPlace bool
	}
	idx := map[key]int{}
	var gs []sweepGroup
	var all [][]float64
	for _, s := range ss {
		k := key{s.Run, s.Seq, s.N, s.Algo, s.Bytes, s.InPlace}
		i, ok := idx[k]
		if !ok {
			i = len(gs)
			idx[k] = i
			gs = append(gs, sweepGroup{Run: s.Run, Seq: s.Seq, N: s.N, Algo: s.Algo, Bytes: s.Bytes, InPlace: s.InPlace, Iters: len(s.Times)})
			all = append(all, nil)
		}
		g := &gs[i]
		med, _, _ := stats(s.Times)
		g.CycleMedians = append(g.CycleMedians, med)
		g.Cycles++
		if s.Wrong > 0 {
			g.Wrong += s.Wrong
		}
		all[i] = append(all[i], s.Times...)
	}
	for i := range gs {
		gs[i].Median, gs[i].P95, _ = stats(all[i])
		_, _, gs[i].CV = stats(gs[i].CycleMedians)
	}
	return gs
}

// sweepPoint is the pooled result of one (N, algorithm, size): the median
// of the cycle medians of every run (mirrored passes and re-measurements).
type sweepPoint struct {
	Median float64
	MaxCV  float64
	Runs   int
}

// sweepAutoFunc returns the algorithm auto picks for N local ranks and a size.
type sweepAutoFunc func(n int, bytes int64) string

// sweepAuto is the choice pg makes for local ranks under cfg: the same
// graph (one node, cfg's channels) and the same cost model.
func sweepAuto(cfg pg.Config) sweepAutoFunc {
	tu := cfg.Tuning
	if tu == nil {
		tu = algorithms.DefaultTuning()
	}
	return func(n int, bytes int64) string {
		g, err := algorithms.BuildGraph(algorithms.UniformLayout(1, n, max(1, cfg.MaxChannels/2), algorithms.BalancedTree))
		if err != nil {
			return "?"
		}
		algos, err := algorithms.ParseAlgoSpec(cfg.Algo, algorithms.AllReduce)
		if err != nil {
			return "?"
		}
		pr, err := tu.Choose(algorithms.AllReduce, algorithms.TopoOfGraph(g, algorithms.Shm, algorithms.TCP), bytes,
			algorithms.Constraints{Algos: algos, Protos: 1 << algorithms.Simple, MinChannels: cfg.MinChannels, MaxChannels: cfg.MaxChannels})
		if err != nil {
			return "?"
		}
		return pr.Algo.String()
	}
}

// sweepReport is everything the outputs show.
type sweepReport struct {
	groups  []sweepGroup
	ns      []int
	algos   []string
	sizes   map[int][]int64
	points  map[int]map[string]map[int64]sweepPoint // N -> algo -> bytes
	auto    sweepAutoFunc
	wrong   int64
	cmdline string
	when    string
	machine string
}

func analyseSweep(ss []sweepSample, auto sweepAutoFunc) *sweepReport {
	r := &sweepReport{groups: sweepGroups(ss), sizes: map[int][]int64{}, points: map[int]map[string]map[int64]sweepPoint{}, auto: auto}
	pool := map[int]map[string]map[int64][]float64{}
	cvs := map[int]map[string]map[int64]float64{}
	runs := map[int]map[string]map[int64]int{}
	seenN, seenA := map[int]bool{}, map[string]bool{}
	for _, g := range r.groups {
		r.wrong += g.Wrong
		if g.InPlace {
			continue
		}
		if !seenN[g.N] {
			seenN[g.N] = true
			r.ns = append(r.ns, g.N)
			pool[g.N], cvs[g.N], runs[g.N] = map[string]map[int64][]float64{}, map[string]map[int64]float64{}, map[string]map[int64]int{}
		}
		if !seenA[g.Algo] {
			seenA[g.Algo] = true
			r.algos = append(r.algos, g.Algo)
		}
		if pool[g.N][g.Algo] == nil {
			pool[g.N][g.Algo], cvs[g.N][g.Algo], runs[g.N][g.Algo] = map[int64][]float64{}, map[int64]float64{}, map[int64]int{}
		}
		pool[g.N][g.Algo][g.Bytes] = append(pool[g.N][g.Algo][g.Bytes], g.CycleMedians...)
		cvs[g.N][g.Algo][g.Bytes] = max(cvs[g.N][g.Algo][g.Bytes], g.CV)
		runs[g.N][g.Algo][g.Bytes]++
	}
	sort.Ints(r.ns)
	sort.Strings(r.algos)
	for n, byAlgo := range pool {
		r.points[n] = map[string]map[int64]sweepPoint{}
		seen := map[int64]bool{}
		for a, bySize := range byAlgo {
			r.points[n][a] = map[int64]sweepPoint{}
			for b, meds := range bySize {
				m, _, _ := stats(meds)
				r.points[n][a][b] = sweepPoint{Median: m, MaxCV: cvs[n][a][b], Runs: runs[n][a][b]}
				if !seen[b] {
					seen[b] = true
					r.sizes[n] = append(r.sizes[n], b)
				}
			}
		}
		sort.Slice(r.sizes[n], func(i, j int) bool { return r.sizes[n][i] < r.sizes[n][j] })
	}
	return r
}

// forced lists the forced algorithms (not "auto") measured for N.
func (r *sweepReport) forced(n int) []string {
	var out []string
	for _, a := range r.algos {
		if a != "auto" && r.points[n][a] != nil {
			out = append(out, a)
		}
	}
	return out
}

// verdict compares the forced algorithms at one size: the winner (or
// "tie"), the best time and the margin loser/winner - 1.
func (r *sweepReport) verdict(n int, b int64) (winner string, best, margin float64, ok bool) {
	type at struct {
		a string
		t float64
	}
	var xs []at
	for _, a := range r.forced(n) {
		if p, ok := r.points[n][a][b]; ok {
			xs = append(xs, at{a, p.Median})
		}
	}
	if len(xs) < 2 {
		return "", 0, 0, false
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i].t < xs[j].t || xs[i].t == xs[j].t && xs[i].a < xs[j].a })
	margin = xs[1].t/xs[0].t - 1
	winner = xs[0].a
	if margin < sweepTie {
		winner = "tie"
	}
	return winner, xs[0].t, margin, true
}

// sweepInterval is a run of consecutive sizes with one verdict.
type sweepInterval struct {
	N                    int
	Winner               string
	From, To             int64
	Points               int
	MedMargin, MaxMargin float64
}

func (r *sweepReport) intervals() []sweepInterval {
	var out []sweepInterval
	for _, n := range r.ns {
		var cur *sweepInterval
		var margins []float64
		flush := func() {
			if cur != nil {
				cur.MedMargin, _, _ = stats(margins)
				out = append(out, *cur)
			}
		}
		for _, b := range r.sizes[n] {
			w, _, m, ok := r.verdict(n, b)
			if !ok {
				continue
			}
			if cur == nil || cur.Winner != w {
				flush()
				cur = &sweepInterval{N: n, Winner: w, From: b}
				margins = nil
			}
			cur.To = b
			cur.Points++
			cur.MaxMargin = max(cur.MaxMargin, m)
			margins = append(margins, m)
		}
		flush()
	}
	return out
}

// autoRow is the auto check at one size.
type autoRow struct {
	N      int
	Bytes  int64
	Choice string
	Best   string
	Excess float64 // auto/best - 1
	Pass   bool
}

func (r *sweepReport) autoRows() []autoRow {
	var out []autoRow
	for _, n := range r.ns {
		for _, b := range r.sizes[n] {
			_, best, _, ok := r.verdict(n, b)
			if !ok {
				continue
			}
			row := autoRow{N: n, Bytes: b, Choice: r.auto(n, b)}
			for _, a := range r.forced(n) {
				if p, ok := r.points[n][a][b]; ok && p.Median == best {
					row.Best = a
				}
			}
			p, ok := r.points[n][row.Choice][b]
			if m, measured := r.points[n]["auto"][b]; measured {
				p, ok = m, true // auto measured directly
			}
			if !ok {
				continue
			}
			row.Excess = p.Median/best - 1
			row.Pass = row.Excess <= sweepAutoTol
			out = append(out, row)
		}
	}
	return out
}

func fmtBytes(b int64) string {
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%dG", b>>30)
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%dM", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%dK", b>>10)
	}
	return strconv.FormatInt(b, 10)
}

func (r *sweepReport) writeIntervals(w io.Writer) {
	fmt.Fprintf(w, "# crossover intervals (tie: |loser/winner - 1| < %.0f%%)\n", 100*sweepTie)
	fmt.Fprintf(w, "| N | winner | interval | points | median margin | max margin |\n|---|---|---|---|---|---|\n")
	for _, iv := range r.intervals() {
		fmt.Fprintf(w, "| %d | %s | %s – %s | %d | %.1f%% | %.1f%% |\n", iv.N, iv.Winner, fmtBytes(iv.From), fmtBytes(iv.To), iv.Points, 100*iv.MedMargin, 100*iv.MaxMargin)
	}
}

func (r *sweepReport) writeAutoCheck(w io.Writer) {
	rows := r.autoRows()
	fails := 0
	worst := map[int]autoRow{}
	for _, a := range rows {
		if !a.Pass {
			fails++
		}
		if cur, ok := worst[a.N]; !ok || a.Excess > cur.Excess {
			worst[a.N] = a
		}
	}
	fmt.Fprintf(w, "\n# auto check: auto within %.0f%% of the best forced algorithm at %d of %d sizes\n", 100*sweepAutoTol, len(rows)-fails, len(rows))
	fmt.Fprintf(w, "| N | sizes | failures | worst size | auto | best | auto slower by |\n|---|---|---|---|---|---|---|\n")
	for _, n := range r.ns {
		k, f := 0, 0
		for _, a := range rows {
			if a.N == n {
				k++
				if !a.Pass {
					f++
				}
			}
		}
		if x, ok := worst[n]; ok {
			fmt.Fprintf(w, "| %d | %d | %d | %s | %s | %s | %.1f%% |\n", n, k, f, fmtBytes(x.Bytes), x.Choice, x.Best, 100*x.Excess)
		}
	}
	if fails > 0 {
		fmt.Fprintf(w, "\nFailures (N, size, auto, best, excess):\n")
		for _, a := range rows {
			if !a.Pass {
				fmt.Fprintf(w, "- N=%d %s: auto %s, best %s, %.1f%% slower\n", a.N, fmtBytes(a.Bytes), a.Choice, a.Best, 100*a.Excess)
			}
		}
	}
}

func (r *sweepReport) writeGroupsCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"run", "seq", "nranks", "algo", "bytes", "placement", "cycles", "iters", "median_us", "p95_us", "cv", "busbw_gbps", "wrong"})
	for _, g := range r.groups {
		pl := "out"
		if g.InPlace {
			pl = "in"
		}
		bus := float64(g.Bytes) / (g.Median * 1e3) * busFactor(algorithms.AllReduce, g.N)
		cw.Write([]string{g.Run, strconv.Itoa(g.Seq), strconv.Itoa(g.N), g.Algo, strconv.FormatInt(g.Bytes, 10), pl,
			strconv.Itoa(g.Cycles), strconv.Itoa(g.Iters), fmt.Sprintf("%.1f", g.Median), fmt.Sprintf("%.1f", g.P95),
			fmt.Sprintf("%.4f", g.CV), fmt.Sprintf("%.4f", bus), strconv.FormatInt(g.Wrong, 10)})
	}
	cw.Flush()
	return cw.Error()
}

func (r *sweepReport) writeMarkdown(w io.Writer) error {
	fmt.Fprintf(w, "# Ring vs tree allreduce crossover (measured)\n\n")
	fmt.Fprintf(w, "- command: `%s`\n- when: %s\n- machine: %s\n", r.cmdline, r.when, r.machine)
	nRe, nNoisy := 0, 0
	for _, g := range r.groups {
		if strings.HasPrefix(g.Run, "R") && !g.InPlace {
			nRe++
		}
		if !g.InPlace && g.CV > sweepMaxCV {
			nNoisy++
		}
	}
	fmt.Fprintf(w, "- groups with CV > %.0f%%: %d (out-of-place); re-measured groups: %d (kept next to the first measurement)\n", 100*sweepMaxCV, nNoisy, nRe)
	fmt.Fprintf(w, "- #wrong over every checked row: %d\n\n", r.wrong)
	fmt.Fprintf(w, "Times are out-of-place medians of cycle medians pooled over both mirrored passes and any re-measurement; ")
	fmt.Fprintf(w, "the auto column is the algorithm the cost model (the tuning in use) picks for that size.\n\n")
	r.writeIntervals(w)
	r.writeAutoCheck(w)
	fmt.Fprintf(w, "\n# per size\n| N | size | ")
	for _, a := range r.algos {
		fmt.Fprintf(w, "%s µs (max CV) | ", a)
	}
	fmt.Fprintf(w, "winner | margin | auto |\n|---|---|")
	for range r.algos {
		fmt.Fprintf(w, "---|")
	}
	fmt.Fprintf(w, "---|---|---|\n")
	for _, n := range r.ns {
		for _, b := range r.sizes[n] {
			fmt.Fprintf(w, "| %d | %s | ", n, fmtBytes(b))
			for _, a := range r.algos {
				if p, ok := r.points[n][a][b]; ok {
					fmt.Fprintf(w, "%.1f (%.0f%%) | ", p.Median, 100*p.MaxCV)
				} else {
					fmt.Fprintf(w, "– | ")
				}
			}
			win, _, m, _ := r.verdict(n, b)
			fmt.Fprintf(w, "%s | %.1f%% | %s |\n", win, 100*m, r.auto(n, b))
		}
	}
	return nil
}

// busbw of a point in GB/s.
func sweepBusBW(n int, b int64, us float64) float64 {
	if us <= 0 {
		return 0
	}
	return float64(b) / (us * 1e3) * busFactor(algorithms.AllReduce, n)
}

var _ = math.Inf
