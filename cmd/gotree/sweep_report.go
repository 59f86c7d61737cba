package main

// The analysis of a sweep: per-group statistics, pooled points, the
// interval table with the tie rule, the auto check, and the reports
// (groups.csv, crossover.md; the plot is in sweep_plot.go).

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend"
	"github.com/gotree/gotree/pg"
)

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
	Handoff      [2]float64 // the machine-state probe before and after its cycles (sweepSample.Handoff)
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
			gs = append(gs, sweepGroup{Run: s.Run, Seq: s.Seq, N: s.N, Algo: s.Algo, Bytes: s.Bytes, InPlace: s.InPlace, Iters: len(s.Times), Handoff: s.Handoff})
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
	States machineStates // the machine states its runs met
}

// Machine states. The development VM passes through stretches of seconds
// to minutes in which memory written on one CPU reaches the other 3×
// slower (the hand-off probe: 240–370 µs for 512 KiB against 70–110), and
// every shared-memory algorithm slows with it, so two runs compare two machines
// when one of them met the slow state and the other did not. A run met the
// slow state where a probe around it took more than sweepSlowProbe times
// the sweep's fastest probe.
type machineStates uint8

const (
	stateFast machineStates = 1 << iota
	stateSlow

	sweepSlowProbe = 2.0
)

func (s machineStates) String() string {
	return [...]string{"", "fast", "slow", "both"}[s&(stateFast|stateSlow)]
}

// crossed reports whether the runs behind s met both states.
func (s machineStates) crossed() bool { return s == stateFast|stateSlow }

// probeStates classifies each group's run by its probes against the
// fastest probe of all groups (0 where no group was probed).
func probeStates(gs []sweepGroup) (fastest float64, states []machineStates) {
	for _, g := range gs {
		for _, us := range g.Handoff {
			if us > 0 && (fastest == 0 || us < fastest) {
				fastest = us
			}
		}
	}
	states = make([]machineStates, len(gs))
	for i, g := range gs {
		states[i] = stateOf(g.Handoff, fastest)
	}
	return fastest, states
}

// stateOf is the states a pair of probes found (none for a missing one),
// against the fastest probe of the sweep.
func stateOf(probes [2]float64, fastest float64) machineStates {
	var s machineStates
	for _, us := range probes {
		switch {
		case us <= 0:
		case us > sweepSlowProbe*fastest:
			s |= stateSlow
		default:
			s |= stateFast
		}
	}
	return s
}

// sweepAutoFunc returns the algorithm auto picks for N local ranks and a size.
type sweepAutoFunc func(n int, bytes int64) string

// sweepAuto is the choice pg makes for local ranks under cfg, in place or
// not: the same graph (one node, cfg's channels) and the same cost model.
func sweepAuto(cfg pg.Config, inPlace bool) sweepAutoFunc {
	tu := cfg.TuningFor(runtime.NumCPU()) // as pg.Init on this host
	return func(n int, bytes int64) string {
		maxCh, minCh := cfg.MaxChannels, cfg.MinChannels
		if maxCh <= 0 { // as pg.Init resolves an unset GOTREE_MAX_NCHANNELS
			maxCh = pg.DefaultChannels(runtime.NumCPU(), n)
			minCh = min(minCh, maxCh)
		}
		g, err := algorithms.BuildGraph(algorithms.UniformLayout(1, n, max(1, maxCh/2), algorithms.BalancedTree))
		if err != nil {
			return "?"
		}
		algos, err := algorithms.ParseAlgoSpec(cfg.Algo, algorithms.AllReduce)
		if err != nil {
			return "?"
		}
		pr, err := tu.Choose(algorithms.AllReduce, algorithms.TopoOfGraph(g, algorithms.Shm, algorithms.TCP), bytes,
			algorithms.Constraints{Algos: algos, Protos: 1 << algorithms.Simple, MinChannels: minCh, MaxChannels: maxCh, InPlace: inPlace})
		if err != nil {
			return "?"
		}
		return pr.Algo.String()
	}
}

// measuredChoice is the algorithm auto ran for N ranks and a size in
// one placement, as its samples recorded it (autotuning decides at run
// time; the most frequent over cycles and runs, ties to the first seen),
// else model's.
func measuredChoice(ss []sweepSample, inPlace bool, model sweepAutoFunc) sweepAutoFunc {
	type key struct {
		n     int
		bytes int64
	}
	counts := map[key]map[string]int{}
	var order []string
	for _, s := range ss {
		if s.Algo != "auto" || s.Chose == "" || s.InPlace != inPlace {
			continue
		}
		k := key{s.N, s.Bytes}
		if counts[k] == nil {
			counts[k] = map[string]int{}
		}
		if !slices.Contains(order, s.Chose) {
			order = append(order, s.Chose)
		}
		counts[k][s.Chose]++
	}
	return func(n int, bytes int64) string {
		c := counts[key{n, bytes}]
		best := ""
		for _, a := range order {
			if c[a] > c[best] {
				best = a
			}
		}
		if best == "" {
			return model(n, bytes)
		}
		return best
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
	inPlace bool         // the report judges the in-place rows (else the out-of-place ones)
	placed  *sweepReport // the in-place report that writeMarkdown appends, if any
	wrong   int64
	cmdline string
	when    string
	machine string
	// fastestProbe is the fastest machine-state probe of any run, µs (0:
	// none probed); groupStates the states each group met (probeStates),
	// points the states their runs met.
	fastestProbe float64
	groupStates  []machineStates
	fast         *sweepReport // the same samples' fast-state cycles alone (analyseSweepStates), if any were slow
	slow         *sweepReport // and their slow-state cycles alone, if any were fast
}

// analyseSweep judges the samples of one placement (in place or out of
// place); #wrong counts both.
func analyseSweep(ss []sweepSample, auto sweepAutoFunc, inPlace bool) *sweepReport {
	r := &sweepReport{groups: sweepGroups(ss), sizes: map[int][]int64{}, points: map[int]map[string]map[int64]sweepPoint{}, auto: auto, inPlace: inPlace}
	pool := map[int]map[string]map[int64][]float64{}
	cvs := map[int]map[string]map[int64]float64{}
	runs := map[int]map[string]map[int64]int{}
	states := map[int]map[string]map[int64]machineStates{}
	r.fastestProbe, r.groupStates = probeStates(r.groups)
	seenN, seenA := map[int]bool{}, map[string]bool{}
	for gi, g := range r.groups {
		r.wrong += g.Wrong
		if g.InPlace != inPlace {
			continue
		}
		if !seenN[g.N] {
			seenN[g.N] = true
			r.ns = append(r.ns, g.N)
			pool[g.N], cvs[g.N], runs[g.N], states[g.N] = map[string]map[int64][]float64{}, map[string]map[int64]float64{}, map[string]map[int64]int{}, map[string]map[int64]machineStates{}
		}
		if !seenA[g.Algo] {
			seenA[g.Algo] = true
			r.algos = append(r.algos, g.Algo)
		}
		if pool[g.N][g.Algo] == nil {
			pool[g.N][g.Algo], cvs[g.N][g.Algo], runs[g.N][g.Algo], states[g.N][g.Algo] = map[int64][]float64{}, map[int64]float64{}, map[int64]int{}, map[int64]machineStates{}
		}
		states[g.N][g.Algo][g.Bytes] |= r.groupStates[gi]
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
				r.points[n][a][b] = sweepPoint{Median: m, MaxCV: cvs[n][a][b], Runs: runs[n][a][b], States: states[n][a][b]}
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

type algoTime struct {
	a string
	t float64
}

// ranked is the forced algorithms measured at one size, fastest first
// (ties by name).
func (r *sweepReport) ranked(n int, b int64) []algoTime {
	var xs []algoTime
	for _, a := range r.forced(n) {
		if p, ok := r.points[n][a][b]; ok {
			xs = append(xs, algoTime{a, p.Median})
		}
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i].t < xs[j].t || xs[i].t == xs[j].t && xs[i].a < xs[j].a })
	return xs
}

// best is the fastest forced algorithm at one size and its time, where
// at least two were measured there — or the only one the sweep forces
// (the A/A check: one forced algorithm and auto forced to it).
func (r *sweepReport) best(n int, b int64) (algo string, t float64, ok bool) {
	xs := r.ranked(n, b)
	if len(xs) == 0 || len(xs) == 1 && len(r.forced(n)) > 1 {
		return "", 0, false
	}
	return xs[0].a, xs[0].t, true
}

// verdict compares the forced algorithms at one size: the winner (or
// "tie"), the best time and the margin loser/winner - 1.
func (r *sweepReport) verdict(n int, b int64) (winner string, best, margin float64, ok bool) {
	xs := r.ranked(n, b)
	if len(xs) < 2 {
		return "", 0, 0, false
	}
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
	// With auto measured directly: auto over the forced run of the
	// algorithm it chose, minus 1 — the same plan twice, so the noise floor.
	Measured bool
	SameAlgo float64
	// The choice judged on the forced runs alone: the forced run of the
	// algorithm auto chose over the best forced run, minus 1. Auto runs
	// that very plan, so this separates a wrong choice from the noise of
	// timing one plan twice.
	ChoiceTimed  bool
	ChoiceExcess float64
	ChoicePass   bool
	// Crossed: the size's runs (every algorithm's, auto's too) met both
	// machine states, so its verdict compares two machines.
	Crossed bool
	// The paired sign test of auto (measured directly, else its choice's
	// forced run) against the best forced algorithm (pairedExcess): Slower
	// of Pairs cycle pairs had auto more than sweepAutoTol slower, with
	// chance SignP under a true excess of at most sweepAutoTol. Tested is
	// false where no cycles pair up (one process set per algorithm) or
	// auto ran the best algorithm's plan without being measured itself.
	Tested        bool
	Slower, Pairs int
	SignP         float64
	// Stretch: in run StretchRun the forced algorithms' first cycles ran
	// Stretch times their medians (startStretch), the most of any process
	// set; from sweepStretchFactor on, auto, which decides in its first
	// calls, decided in a slow stretch there.
	StretchRun string
	Stretch    float64
}

// Significant: the sign test puts auto more than sweepAutoTol slower than
// the best forced algorithm at level sweepSignAlpha.
func (a autoRow) Significant() bool { return a.Tested && a.SignP < sweepSignAlpha }

// sweepProc is one process set of a sweep: a run and its sequence
// number. A paired sweep times every algorithm in each.
type sweepProc struct {
	run string
	seq int
}

// pairedExcess is a one-sided sign test of "a is more than tol slower than
// b" over the cycles that timed both in the same processes (a paired
// sweep's run and seq, cycles alternating ABBA): slower counts the pairs,
// cycle by cycle, in which a's cycle median exceeds (1+tol) times b's, and
// p is the chance of at least that many if a's true excess were at most
// tol (each pair then at most even odds). A per-size median over 30 cycles
// moves by several percent between runs of the same plan on this VM; the
// test separates that from a choice that is slower cycle after cycle.
func (r *sweepReport) pairedExcess(n int, bytes int64, a, b string, tol float64) (slower, pairs int, p float64, ok bool) {
	meds := map[sweepProc]*[2][]float64{}
	for _, g := range r.groups {
		if g.InPlace != r.inPlace || g.N != n || g.Bytes != bytes || (g.Algo != a && g.Algo != b) {
			continue
		}
		k := sweepProc{g.Run, g.Seq}
		if meds[k] == nil {
			meds[k] = &[2][]float64{}
		}
		i := 0
		if g.Algo == b {
			i = 1
		}
		meds[k][i] = append(meds[k][i], g.CycleMedians...)
	}
	for _, m := range meds { // counts: the order does not matter
		for i := range min(len(m[0]), len(m[1])) {
			pairs++
			if m[0][i] > (1+tol)*m[1][i] {
				slower++
			}
		}
	}
	if pairs == 0 {
		return 0, 0, 1, false
	}
	return slower, pairs, binomialTail(pairs, slower), true
}

// sweepStretchFactor is the startStretch factor from which a size's
// first cycles count as a slow stretch.
const sweepStretchFactor = 1.5

// startStretch finds where a size's forced runs began in a slow stretch:
// for each process set that timed two or more forced algorithms at (n,
// bytes) in r's placement (a paired sweep's run), the median over those
// algorithms of the faster of their first two cycle medians divided by
// the median of all their cycle medians; it returns the largest, with its
// run. Autotuning decides a size in its first calls, which a paired
// sweep runs beside those cycles, so a factor well over 1 says the
// decision was taken in a stretch the rest of the run did not see (this
// VM's slow states: 2 ranks, 8 MiB, in place, the ring's first three
// cycles 974–1722 µs and then 334–381, while direct kept 772–1309; the
// size's probes, before and after, both found the fast state). 0 where no
// process set timed two forced algorithms over three or more cycles.
func (r *sweepReport) startStretch(n int, bytes int64) (run string, factor float64) {
	ratios := map[sweepProc][]float64{}
	for _, g := range r.groups {
		if g.InPlace != r.inPlace || g.N != n || g.Bytes != bytes || g.Algo == "auto" || len(g.CycleMedians) < 3 {
			continue
		}
		if med, _, _ := stats(g.CycleMedians); med > 0 {
			k := sweepProc{g.Run, g.Seq}
			ratios[k] = append(ratios[k], min(g.CycleMedians[0], g.CycleMedians[1])/med)
		}
	}
	keys := make([]sweepProc, 0, len(ratios))
	for k := range ratios {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b sweepProc) int {
		if c := strings.Compare(a.run, b.run); c != 0 {
			return c
		}
		return a.seq - b.seq
	})
	for _, k := range keys {
		if v := ratios[k]; len(v) >= 2 {
			if f, _, _ := stats(v); f > factor {
				run, factor = k.run, f
			}
		}
	}
	return run, factor
}

// binomialTail is P(X >= k) for X ~ Binomial(n, 1/2).
func binomialTail(n, k int) float64 {
	if k <= 0 {
		return 1
	}
	sum, c := 0.0, 1.0 // c = C(n, i)
	for i := 0; i <= n; i++ {
		if i >= k {
			sum += c
		}
		c = c * float64(n-i) / float64(i+1)
	}
	return sum / math.Pow(2, float64(n))
}

func (r *sweepReport) autoRows() []autoRow {
	var out []autoRow
	for _, n := range r.ns {
		for _, b := range r.sizes[n] {
			bestAlgo, best, ok := r.best(n, b)
			if !ok {
				continue
			}
			row := autoRow{N: n, Bytes: b, Choice: r.auto(n, b), Best: bestAlgo}
			var met machineStates
			for _, a := range r.algos {
				met |= r.points[n][a][b].States
			}
			row.Crossed = met.crossed()
			row.StretchRun, row.Stretch = r.startStretch(n, b)
			p, ok := r.points[n][row.Choice][b]
			if ok && p.Median > 0 {
				row.ChoiceTimed = true
				row.ChoiceExcess = p.Median/best - 1
				row.ChoicePass = row.ChoiceExcess <= sweepAutoTol
			}
			if m, measured := r.points[n]["auto"][b]; measured {
				if ok && p.Median > 0 {
					row.SameAlgo = m.Median/p.Median - 1
				}
				p, ok, row.Measured = m, true, true // auto measured directly
			}
			if !ok {
				continue
			}
			row.Excess = p.Median/best - 1
			row.Pass = row.Excess <= sweepAutoTol
			ran := row.Choice
			if row.Measured {
				ran = "auto"
			}
			if ran != row.Best {
				row.Slower, row.Pairs, row.SignP, row.Tested = r.pairedExcess(n, b, ran, row.Best, sweepAutoTol)
			}
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

// placement names the calls the report judges.
func (r *sweepReport) placement() string {
	if r.inPlace {
		return "in place"
	}
	return "out of place"
}

func (r *sweepReport) writeIntervals(w io.Writer) {
	fmt.Fprintf(w, "# crossover intervals, %s (tie: |loser/winner - 1| < %.0f%%)\n", r.placement(), 100*sweepTie)
	fmt.Fprintf(w, "| N | winner | interval | points | median margin | max margin |\n|---|---|---|---|---|---|\n")
	for _, iv := range r.intervals() {
		fmt.Fprintf(w, "| %d | %s | %s – %s | %d | %.1f%% | %.1f%% |\n", iv.N, iv.Winner, fmtBytes(iv.From), fmtBytes(iv.To), iv.Points, 100*iv.MedMargin, 100*iv.MaxMargin)
	}
}

func (r *sweepReport) writeAutoCheck(w io.Writer) {
	rows := r.autoRows()
	fails, timed, good := 0, 0, 0
	worst := map[int]autoRow{}
	for _, a := range rows {
		if !a.Pass {
			fails++
		}
		if a.ChoiceTimed {
			timed++
			if a.ChoicePass {
				good++
			}
		}
		if cur, ok := worst[a.N]; !ok || a.Excess > cur.Excess {
			worst[a.N] = a
		}
	}
	fmt.Fprintf(w, "\n# auto check, %s: auto within %.0f%% of the best forced algorithm at %d of %d sizes\n", r.placement(), 100*sweepAutoTol, len(rows)-fails, len(rows))
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
	r.writeSignTest(w, rows)
	var same []float64
	for _, a := range rows {
		if a.Measured {
			same = append(same, math.Abs(a.SameAlgo))
		}
	}
	if len(same) > 0 {
		med, p95, _ := stats(same)
		sort.Float64s(same)
		fmt.Fprintf(w, "\nAuto was measured directly. Noise floor: auto against the forced run of the algorithm it chose (the same plan)\n")
		fmt.Fprintf(w, "differs by a median of %.1f%%, P95 %.1f%%, at most %.1f%% over %d sizes.\n", 100*med, 100*p95, 100*same[len(same)-1], len(same))
		fmt.Fprintf(w, "The choice alone (the forced run of the algorithm auto chose, against the best forced run): within %.0f%% at %d of %d sizes.\n", 100*sweepAutoTol, good, timed)
		for _, a := range rows {
			if a.ChoiceTimed && !a.ChoicePass {
				fmt.Fprintf(w, "- wrong choice at N=%d %s: %s, %.1f%% slower than %s%s\n", a.N, fmtBytes(a.Bytes), a.Choice, 100*a.ChoiceExcess, a.Best, a.stateNote())
			}
		}
	}
	r.writeStates(w, rows)
	if fails > 0 {
		fmt.Fprintf(w, "\nFailures (N, size, auto, best, excess; \"choice ok\": the chosen algorithm's forced run is within the tolerance, so auto timed the same plan slower):\n")
		for _, a := range rows {
			if !a.Pass {
				note := ""
				if a.Measured && a.ChoiceTimed {
					verdict := "wrong"
					if a.ChoicePass {
						verdict = "ok"
					}
					note = fmt.Sprintf("; choice %s (forced %s %+.1f%%)", verdict, a.Choice, 100*a.ChoiceExcess)
				}
				fmt.Fprintf(w, "- N=%d %s: auto %s, best %s, %.1f%% slower%s%s\n", a.N, fmtBytes(a.Bytes), a.Choice, a.Best, 100*a.Excess, note, a.stateNote())
			}
		}
	}
}

// writeSignTest reports the paired sign test (autoRow.Significant): the
// sizes where auto is slower than the best forced algorithm by more than
// the tolerance cycle after cycle, apart from those where its median is
// merely past the tolerance.
func (r *sweepReport) writeSignTest(w io.Writer, rows []autoRow) {
	tested, sig, held := 0, 0, 0
	for _, a := range rows {
		if a.Tested {
			tested++
		}
		if a.Significant() {
			sig++
		}
		if a.Pass || (a.Tested && !a.Significant()) {
			held++
		}
	}
	if tested == 0 {
		return
	}
	fmt.Fprintf(w, "\nPaired sign test (the cycles of auto and of the best forced algorithm timed in the same processes, alternating; a pair counts against auto where its cycle median is more than %.0f%% above the other's): ", 100*sweepAutoTol)
	fmt.Fprintf(w, "auto more than %.0f%% slower at p < %g at %d of %d sizes tested; within %.0f%%, or not shown slower, at %d of %d sizes.\n", 100*sweepAutoTol, sweepSignAlpha, sig, tested, 100*sweepAutoTol, held, len(rows))
	for _, a := range rows {
		if a.Significant() {
			fmt.Fprintf(w, "- N=%d %s: auto %s, best %s: %d of %d pairs more than %.0f%% slower (p = %.2g); medians %.1f%% apart%s\n", a.N, fmtBytes(a.Bytes), a.Choice, a.Best, a.Slower, a.Pairs, 100*sweepAutoTol, a.SignP, 100*a.Excess, a.stateNote())
		}
	}
}

func (a autoRow) stateNote() string {
	note := ""
	if a.Crossed {
		note = " (runs in both machine states)"
	}
	if a.Stretch >= sweepStretchFactor {
		note += fmt.Sprintf("; run %s began in a slow stretch (the forced algorithms' first cycles %.1f× their medians), where auto decided", a.StretchRun, a.Stretch)
	}
	return note
}

// writeStates says how the groups' machine states split, what the auto
// check gives on the sizes whose runs all met one state, and what it gives
// on the cycles of each state alone (r.fast, r.slow): autotuning decides in
// the state its exploration meets, so a choice right for one state can look
// wrong against forced runs pooled over both.
func (r *sweepReport) writeStates(w io.Writer, rows []autoRow) {
	if r.fastestProbe <= 0 {
		return
	}
	slowest, nGroups, nSlow, nMixed := 0.0, 0, 0, 0
	for i, g := range r.groups {
		if g.InPlace != r.inPlace || r.groupStates[i] == 0 {
			continue
		}
		nGroups++
		slowest = max(slowest, g.Handoff[0], g.Handoff[1])
		switch r.groupStates[i] {
		case stateSlow:
			nSlow++
		case stateFast | stateSlow:
			nMixed++
		}
	}
	fmt.Fprintf(w, "\nMachine state (`gotree handoff`'s probe before and after each size of each run: %d KiB from one CPU to another): %.0f–%.0f µs; ", backend.HandoffBytes>>10, r.fastestProbe, slowest)
	fmt.Fprintf(w, "of %d groups, %d met only the slow state (a probe over %.0f× the fastest) and %d changed state.\n", nGroups, nSlow, sweepSlowProbe, nMixed)
	one, pass := 0, 0
	for _, a := range rows {
		if !a.Crossed {
			one++
			if a.Pass {
				pass++
			}
		}
	}
	fmt.Fprintf(w, "Sizes whose runs all met one state: %d of %d; auto within %.0f%% at %d of them.\n", one, len(rows), 100*sweepAutoTol, pass)
	for _, st := range []struct {
		name string
		rep  *sweepReport
	}{{"fast", r.fast}, {"slow", r.slow}} {
		if st.rep == nil {
			continue
		}
		alone := st.rep.autoRows()
		pass, timed, good := 0, 0, 0
		for _, a := range alone {
			if a.Pass {
				pass++
			}
			if a.Measured && a.ChoiceTimed {
				timed++
				if a.ChoicePass {
					good++
				}
			}
		}
		fmt.Fprintf(w, "The %s state alone (the cycles whose probes both found it): auto within %.0f%% at %d of %d sizes", st.name, 100*sweepAutoTol, pass, len(alone))
		if timed > 0 {
			fmt.Fprintf(w, ", the choice alone at %d of %d", good, timed)
		}
		fmt.Fprintf(w, ".\n")
		for _, a := range alone {
			if !a.Pass {
				fmt.Fprintf(w, "- %s state, N=%d %s: auto %s, best %s, %.1f%% slower\n", st.name, a.N, fmtBytes(a.Bytes), a.Choice, a.Best, 100*a.Excess)
			}
		}
	}
}

// analyseSweepStates is analyseSweep with each machine state's cycles
// judged apart as well (sweepReport.fast, .slow), where the samples carry
// probes and met both states.
func analyseSweepStates(ss []sweepSample, auto sweepAutoFunc, inPlace bool) *sweepReport {
	r := analyseSweep(ss, auto, inPlace)
	if r.fastestProbe <= 0 {
		return r
	}
	var fast, slow []sweepSample
	for _, s := range ss {
		if s.Handoff[0] <= 0 || s.Handoff[1] <= 0 {
			continue
		}
		switch stateOf(s.Handoff, r.fastestProbe) {
		case stateFast:
			fast = append(fast, s)
		case stateSlow:
			slow = append(slow, s)
		}
	}
	if len(fast) > 0 && len(fast) < len(ss) {
		r.fast = analyseSweep(fast, auto, inPlace)
	}
	if len(slow) > 0 && len(slow) < len(ss) {
		r.slow = analyseSweep(slow, auto, inPlace)
	}
	return r
}

func (r *sweepReport) writeGroupsCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"run", "seq", "nranks", "algo", "bytes", "placement", "cycles", "iters", "median_us", "p95_us", "cv", "busbw_gbps", "wrong", "machine_state"})
	for i, g := range r.groups {
		pl := "out"
		if g.InPlace {
			pl = "in"
		}
		bus := float64(g.Bytes) / (g.Median * 1e3) * busFactor(algorithms.AllReduce, g.N)
		cw.Write([]string{g.Run, strconv.Itoa(g.Seq), strconv.Itoa(g.N), g.Algo, strconv.FormatInt(g.Bytes, 10), pl,
			strconv.Itoa(g.Cycles), strconv.Itoa(g.Iters), fmt.Sprintf("%.1f", g.Median), fmt.Sprintf("%.1f", g.P95),
			fmt.Sprintf("%.4f", g.CV), fmt.Sprintf("%.4f", bus), strconv.FormatInt(g.Wrong, 10), r.groupStates[i].String()})
	}
	cw.Flush()
	return cw.Error()
}

func (r *sweepReport) writeMarkdown(w io.Writer) error {
	fmt.Fprintf(w, "# Allreduce crossover: %s (measured)\n\n", strings.Join(r.algos, " vs "))
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
	fmt.Fprintf(w, "Times are medians of cycle medians pooled over both mirrored passes and any re-measurement (out-of-place groups only are re-measured); ")
	fmt.Fprintf(w, "the auto column is the algorithm auto ran where its runs recorded it (autotuning decides at run time), else the one the cost model (the tuning in use) picks for that size and placement. ")
	fmt.Fprintf(w, "Out of place comes first; in place (every allreduce torch issues) follows.\n\n")
	r.writeBody(w)
	if r.placed != nil {
		fmt.Fprintf(w, "\n")
		r.placed.writeBody(w)
	}
	return nil
}

// writeBody writes the intervals, the auto check and the per-size table.
func (r *sweepReport) writeBody(w io.Writer) {
	r.writeIntervals(w)
	r.writeAutoCheck(w)
	fmt.Fprintf(w, "\n# per size, %s\n| N | size | ", r.placement())
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
}

// busbw of a point in GB/s.
func sweepBusBW(n int, b int64, us float64) float64 {
	if us <= 0 {
		return 0
	}
	return float64(b) / (us * 1e3) * busFactor(algorithms.AllReduce, n)
}
