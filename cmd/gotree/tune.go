package main

// gotree tune calibrates the cost model's CPU transports on this machine
// with the real communicator: ranks in child processes (as perf and sweep
// start them) time ring, tree and (over shm) halving-doubling allreduce
// over sizes 4 B .. -e (factor
// 2), and a fit turns the times into the tuning file the library loads
// through GOTREE_TUNING_FILE.
//
// Method:
//
//   - base: a 1-rank communicator's allreduce (a plan of one local copy)
//     times the fixed cost of a call: enqueue, plan lookup, worker wake-up.
//   - shm: k = 2 .. --local ranks on this host; tcp: 2 ranks given
//     different GOTREE_HOST_IDs, so that they connect over TCP loopback.
//   - per (transport, k, algorithm): the latency a is the smallest median
//     among sizes up to 1 KiB; the hops on the critical path and the ratio
//     algbw/busbw are algorithms.ShapeOf's (2(k-1) hops for both the ring
//     and the one-node chain, 2 for tcp's two nodes, 2·log2(k) for
//     halving-doubling, +2 when k is not a power of two), so
//     hop = (a - base) / hops; for sizes of at least 1 MiB
//     busbw = size / (t - a) / ratio, and the median is kept.
//   - corrections: at every measured size, measured / (α-β prediction)
//     becomes the size bucket's correction factor, NCCL's per-size factor
//     idea; the model then reproduces the measured curve at these rank
//     counts and extrapolates with α-β (and oversubscription) elsewhere.
//
// k = 2 (tcp: 2 nodes of 1) fills the transport's main entry; other k go
// to "local" entries used for exactly that many ranks per node.

import (
	"flag"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend"
	"github.com/gotree/gotree/pg"
)

func init() {
	register("tune", "measure shm and tcp latency and bandwidth here; write a GOTREE_TUNING_FILE", runTune)
}

// tuneRun is one measured curve.
type tuneRun struct {
	Transport string    `json:"transport"`
	NRanks    int       `json:"nranks"`
	Algo      string    `json:"algo"`
	Bytes     []int64   `json:"bytes"`
	MedianUs  []float64 `json:"median_us"`
	// InPlaceUs is the in-place median per size, 0 where not measured.
	InPlaceUs []float64 `json:"inplace_median_us,omitempty"`
	Wrong     int64     `json:"wrong"`
}

// tuneFit is what the fit found for one transport and algorithm.
type tuneFit struct {
	Transport string  `json:"transport"`
	Algo      string  `json:"algo"`
	Ranks     int     `json:"ranks"`
	LatencyUs float64 `json:"latency_us"` // small-message time
	BaseUs    float64 `json:"base_us"`
	HopUs     float64 `json:"hop_us"`
	BusGBps   float64 `json:"bus_gbps"`
}

func runTune(args []string, stdout, stderr io.Writer) int {
	if os.Getenv(envBenchSpec) != "" {
		return benchChild(stdout, stderr)
	}
	fs := flag.NewFlagSet("tune", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "gotree-tuning.json", "tuning file to write")
	maxS := fs.String("e", "64M", "largest size measured")
	cycles := fs.Int("cycles", 5, "cycles per size")
	iters := fs.Int("iters", 20, "iterations per cycle (fewer for large sizes)")
	local := fs.Int("local", 4, "calibrate shm for 2 .. this many local ranks")
	skipTCP := fs.Bool("no-tcp", false, "skip the tcp transport")
	builtin := fs.String("builtin", "", "also write the local entries as the Go source of gotree's built-in calibration (algorithms/builtin_tuning.go)")
	builtinAlgos := fs.String("builtin-algos", "ring,tree,hd", "with -builtin: the algorithms the built-in local entries calibrate (the others keep the main shm entry)")
	timeout := fs.Duration("timeout", 2*time.Minute, "communicator timeout")
	from := fs.String("from", "", "fit shm from sweeps' raw.csv files (comma-separated) instead of measuring (pooled medians of every run)")
	fromPerf := fs.String("from-perf", "", "fit tcp per node count from the files of gotree perf --json runs across nodes (comma-separated; one rank per node, ring and tree forced) instead of measuring")
	cluster := fs.Bool("cluster", false, "run on every node under a launcher (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; one process per node): measure ring and tree across the nodes and fit tcp for this node count (rank 0 writes -out)")
	start := fs.String("tuning", os.Getenv("GOTREE_TUNING_FILE"), "with -from, -from-perf or -cluster: the tuning file that gives everything not refitted")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if n := btoi(*from != "") + btoi(*fromPerf != "") + btoi(*cluster); n > 1 {
		fmt.Fprintln(stderr, "gotree tune: give at most one of -from, -from-perf and -cluster")
		return 2
	}
	if *fromPerf != "" {
		return tuneFromPerf(strings.Split(*fromPerf, ","), *start, *out, stdout, stderr)
	}
	maxB, err := pg.ParseSize(*maxS)
	if err != nil || maxB < 1<<20 || *cycles < 1 || *iters < 1 {
		fmt.Fprintln(stderr, "gotree tune: need -e >= 1M, -cycles >= 1, -iters >= 1")
		return 2
	}
	if *cluster {
		return tuneCluster(maxB, *iters, *timeout, *start, *out, stdout, stderr)
	}
	var sizes []int64
	for b := int64(4); b <= maxB; b *= 2 {
		sizes = append(sizes, b)
	}
	so := sweepOpts{iters: *iters, budget: 150 * time.Millisecond}
	measure := func(tr string, n int, algo string) (tuneRun, error) {
		spec := benchSpec{NRanks: n, Algo: algo, Sizes: sizes, Cycles: *cycles, Warmup: 2, DType: "float32", Timeout: *timeout}
		for _, s := range sizes {
			spec.Iters = append(spec.Iters, sweepIters(so, algorithms.DefaultTuning(), n, s))
		}
		if tr == "tcp" {
			for r := 0; r < n; r++ {
				spec.HostIDs = append(spec.HostIDs, fmt.Sprintf("gotree-tune-host-%d", r))
			}
		}
		t0 := time.Now()
		res, err := benchLaunch(spec, stderr)
		if err != nil {
			return tuneRun{}, fmt.Errorf("%s N=%d %s: %w", tr, n, algo, err)
		}
		run := tuneRun{Transport: tr, NRanks: n, Algo: algo}
		meds := map[bool]map[int64][]float64{false: {}, true: {}}
		for _, c := range res.Cycles {
			m, _, _ := stats(c.Times)
			meds[c.InPlace][c.Bytes] = append(meds[c.InPlace][c.Bytes], m)
			if c.Wrong > 0 {
				run.Wrong += c.Wrong
			}
		}
		for _, s := range sizes {
			m, _, _ := stats(meds[false][s])
			in, _, _ := stats(meds[true][s])
			run.Bytes = append(run.Bytes, s)
			run.MedianUs = append(run.MedianUs, m)
			run.InPlaceUs = append(run.InPlaceUs, in)
		}
		fmt.Fprintf(stdout, "# measured %s N=%d %s in %.1f s\n", tr, n, algo, time.Since(t0).Seconds())
		return run, nil
	}
	var runs []tuneRun
	fail := func(err error) int {
		fmt.Fprintf(stderr, "gotree tune: %v\n", err)
		return 1
	}
	type job struct {
		tr string
		k  int
	}
	var jobs []job
	var base float64
	tu := algorithms.DefaultTuning()
	tu.Local = nil // the file carries this machine's calibrations, not the built-in ones
	host, _ := os.Hostname()
	var fromRuns map[string]tuneRun // "k/algo" -> the sweep's pooled medians
	var written []algorithms.Transport
	var fitted2 []algorithms.Transport // transports fitted here on 2 ranks
	if *from != "" {
		// Fit shm from a sweep's raw.csv; everything else (base, tcp) comes
		// from the starting tuning file.
		if *start != "" {
			if tu, err = loadTuning(*start); err != nil {
				return fail(err)
			}
		}
		samples, err := readSweepCSVs(strings.Split(*from, ","))
		if err != nil {
			return fail(err)
		}
		rep := analyseSweep(samples, func(int, int64) string { return "" }, false)
		in := analyseSweep(samples, func(int, int64) string { return "" }, true)
		fromRuns = map[string]tuneRun{}
		for _, n := range rep.ns {
			for _, a := range rep.forced(n) {
				run := tuneRun{Transport: "shm", NRanks: n, Algo: a}
				for _, b := range rep.sizes[n] {
					if p, ok := rep.points[n][a][b]; ok {
						run.Bytes = append(run.Bytes, b)
						run.MedianUs = append(run.MedianUs, p.Median)
						run.InPlaceUs = append(run.InPlaceUs, in.points[n][a][b].Median) // 0 where not measured
					}
				}
				fromRuns[fmt.Sprintf("%d/%s", n, a)] = run
			}
			if n >= 2 {
				jobs = append(jobs, job{"shm", n})
			}
		}
		base = tu.Transports[algorithms.Shm].BaseUs[algorithms.Ring][algorithms.Simple]
		var keep []algorithms.LocalCost
		for _, l := range tu.Local {
			if _, refit := fromRuns[fmt.Sprintf("%d/ring", l.RanksPerNode)]; l.Transport != algorithms.Shm || !refit {
				keep = append(keep, l)
			}
		}
		tu.Local = keep
		tu.Source = fmt.Sprintf("gotree tune -from %s on %s (shm refitted from the sweep; base and tcp from %q), %s", *from, host, *start, time.Now().UTC().Format("2006-01-02 15:04 MST"))
		written = []algorithms.Transport{algorithms.TCP}
	} else {
		baseRun, err := measure("shm", 1, "ring")
		if err != nil {
			return fail(err)
		}
		runs = append(runs, baseRun)
		base = smallLatency(baseRun)
		tu.Cores = runtime.NumCPU()
		tu.Source = fmt.Sprintf("gotree tune on %s (%d CPUs), %s", host, tu.Cores, time.Now().UTC().Format("2006-01-02 15:04 MST"))
		for k := 2; k <= max(2, *local); k++ {
			jobs = append(jobs, job{"shm", k})
		}
		if !*skipTCP {
			jobs = append(jobs, job{"tcp", 2})
		}
	}
	var fits []tuneFit
	for _, jb := range jobs {
		t, _ := algorithms.ParseTransport(jb.tr)
		tc := algorithms.TransportCost{SharesCPU: true}
		measured := map[algorithms.Algorithm]tuneRun{}
		topo, entry := localTopo(jb.k, t), algorithms.LocalCost{Transport: t, RanksPerNode: jb.k}
		if jb.tr == "tcp" {
			topo, entry = nodesTopo(jb.k, t), algorithms.LocalCost{Transport: t, RanksPerNode: 1}
		}
		algos := tuneAlgos(jb.tr)
		if _, ok := fromRuns[fmt.Sprintf("%d/%v", jb.k, algorithms.OneShot)]; ok {
			algos = append(algos, algorithms.OneShot) // fitted only from a sweep that has it
		}
		for _, a := range algos {
			var run tuneRun
			var err error
			if fromRuns != nil {
				var ok bool
				if run, ok = fromRuns[fmt.Sprintf("%d/%v", jb.k, a)]; !ok && (a == algorithms.HalvingDoubling || a == algorithms.Direct) {
					// A sweep without hd or direct (-algos ring,tree, or one from before them): keep the built-in values.
					keepBuiltin(&tc, t, a)
					continue
				} else if !ok {
					return fail(fmt.Errorf("%s has no %v run on %d ranks", *from, a, jb.k))
				}
			} else if run, err = measure(jb.tr, jb.k, a.String()); err != nil {
				return fail(err)
			}
			runs = append(runs, run)
			measured[a] = run
			f := fitRun(run, base, a, topo)
			f.Transport = jb.tr
			fits = append(fits, f)
			tc.BaseUs[a][algorithms.Simple] = round3(f.BaseUs)
			tc.HopUs[a][algorithms.Simple] = round3(f.HopUs)
			tc.BusGBps[a][algorithms.Simple] = round3(f.BusGBps)
		}
		// Corrections: measured over the α-β prediction of this fit, and
		// in place over out of place.
		fitCorrections(&tc, tu.Cores, entry, topo, measured)
		fitInPlace(&tc, measured)
		if jb.k == 2 {
			if _, ok := measured[algorithms.OneShot]; !ok {
				// The main entry keeps the built-in one-shot values (a
				// local entry without them falls back to the main one).
				keepBuiltin(&tc, t, algorithms.OneShot)
			}
			tu.Transports[t] = tc
			written = append([]algorithms.Transport{t}, written...)
			fitted2 = append(fitted2, t)
		} else {
			tu.Local = append(tu.Local, algorithms.LocalCost{Transport: t, RanksPerNode: jb.k, Cost: tc})
		}
	}
	data, err := algorithms.MarshalTuning(tu, written, map[string]any{"base_us": base, "fits": fits, "runs": runs})
	if err != nil {
		return fail(err)
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		return fail(err)
	}
	if *builtin != "" {
		keep, err := algorithms.ParseAlgoSpec(*builtinAlgos, algorithms.AllReduce)
		if err != nil {
			return fail(err)
		}
		// The 2-rank fit, the file's main entry, is built in as a local
		// entry like 3 and 4 ranks: it holds only where the cores are
		// this machine's count, not for 2 ranks anywhere.
		bt := *tu
		bt.Local = slices.Clone(tu.Local)
		for _, t := range fitted2 {
			bt.Local = append([]algorithms.LocalCost{{Transport: t, RanksPerNode: 2, Cost: tu.Transports[t]}}, bt.Local...)
		}
		src, err := algorithms.BuiltinTuningSource(&bt, keep)
		if err == nil {
			err = os.WriteFile(*builtin, src, 0o644)
		}
		if err != nil {
			return fail(err)
		}
	}
	fmt.Fprintf(stdout, "# base (1 rank): %.1f us\n", base)
	fmt.Fprintf(stdout, "%-4s %2s %-5s %12s %10s %10s %10s\n", "link", "k", "algo", "latency(us)", "base(us)", "hop(us)", "bus(GB/s)")
	for _, f := range fits {
		fmt.Fprintf(stdout, "%-4s %2d %-5s %12.1f %10.1f %10.1f %10.3f\n", f.Transport, f.Ranks, f.Algo, f.LatencyUs, f.BaseUs, f.HopUs, f.BusGBps)
	}
	fmt.Fprintf(stdout, "# wrote %s; use it with GOTREE_TUNING_FILE=%s\n", *out, *out)
	for _, r := range runs {
		if r.Wrong != 0 {
			fmt.Fprintf(stderr, "gotree tune: %s N=%d %s: %d wrong elements\n", r.Transport, r.NRanks, r.Algo, r.Wrong)
			return 1
		}
	}
	return 0
}

// loadTuning reads the tuning file at path, or gives the built-in values
// when path is empty.
func loadTuning(path string) (*algorithms.Tuning, error) {
	if path == "" {
		return algorithms.DefaultTuning(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return algorithms.ParseTuning(data)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// smallLatency is the median of the medians of sizes up to 1 KiB (robust
// against one lucky or unlucky size).
func smallLatency(r tuneRun) float64 {
	var xs []float64
	for i, b := range r.Bytes {
		if b <= 1<<10 && r.MedianUs[i] > 0 {
			xs = append(xs, r.MedianUs[i])
		}
	}
	if len(xs) == 0 {
		return 0
	}
	m, _, _ := stats(xs)
	return m
}

// round3 keeps 3 significant digits (readable tuning files).
func round3(v float64) float64 {
	if v == 0 {
		return 0
	}
	p := math.Pow(10, 2-math.Floor(math.Log10(math.Abs(v))))
	return math.Round(v*p) / p
}

// smoothCorrections replaces every bucket by the median of itself and
// its measured neighbours, so that one noisy size does not flip a choice.
func smoothCorrections(c *[algorithms.CorrectionBuckets]float64) {
	orig := *c
	for k, v := range orig {
		if v == 0 {
			continue
		}
		xs := []float64{v}
		for _, d := range []int{-1, 1} {
			if j := k + d; j >= 0 && j < len(orig) && orig[j] > 0 {
				xs = append(xs, orig[j])
			}
		}
		m, _, _ := stats(xs)
		c[k] = round3(m)
	}
}

// keepBuiltin gives tc the built-in base, hop and bandwidth of algorithm a
// over transport t (an algorithm the fit has no run of).
func keepBuiltin(tc *algorithms.TransportCost, t algorithms.Transport, a algorithms.Algorithm) {
	def := algorithms.DefaultTuning().Transports[t]
	tc.BaseUs[a], tc.HopUs[a], tc.BusGBps[a] = def.BaseUs[a], def.HopUs[a], def.BusGBps[a]
}

// tuneAlgos are the algorithms measured over a transport: halving-doubling
// and direct run only within a node, direct only where ranks may read each
// other's memory. One-shot is not among them: it runs only messages up to
// algorithms.OneShotMaxBytes, too small for tune's bandwidth fit, so tune
// fits it only from a sweep that has it (-from), and otherwise leaves it
// to the built-in shm entry.
func tuneAlgos(tr string) []algorithms.Algorithm {
	if tr == "shm" {
		as := []algorithms.Algorithm{algorithms.Ring, algorithms.Tree, algorithms.HalvingDoubling}
		if ok, _ := backend.CMAUsable(); ok {
			as = append(as, algorithms.Direct)
		}
		return as
	}
	return []algorithms.Algorithm{algorithms.Ring, algorithms.Tree}
}

// fitRun fits a run of algorithm a on topo (see the file comment): the
// hops of the latency are those on the critical path within and across
// nodes.
func fitRun(r tuneRun, base float64, a algorithms.Algorithm, topo algorithms.CostTopo) tuneFit {
	f := tuneFit{Algo: a.String(), Ranks: topo.NRanks, LatencyUs: smallLatency(r)}
	f.BaseUs = min(base, f.LatencyUs)
	sh := algorithms.ShapeOf(algorithms.AllReduce, a, topo)
	f.HopUs = max(0, (f.LatencyUs-f.BaseUs)/max(1, sh.IntraHops+sh.InterHops))
	ratio := sh.Ratio
	var bws []float64
	from := int64(1 << 20)
	if a == algorithms.OneShot {
		from = algorithms.OneShotMaxBytes / 4 // its largest sizes
	}
	for i, b := range r.Bytes {
		if b >= from && r.MedianUs[i] > f.LatencyUs {
			bws = append(bws, float64(b)/((r.MedianUs[i]-f.LatencyUs)*1e3)/ratio)
		}
	}
	sort.Float64s(bws)
	if len(bws) > 0 {
		f.BusGBps, _, _ = stats(bws)
	}
	return f
}

// localTopo is the topology of k ranks on one host.
func localTopo(k int, tr algorithms.Transport) algorithms.CostTopo {
	k = max(k, 2)
	return algorithms.CostTopo{NRanks: k, NNodes: 1, RanksPerNode: k, Intra: tr, Inter: tr, Channels: 2}
}

// nodesTopo is the topology of n nodes of one rank each, joined by tr.
func nodesTopo(n int, tr algorithms.Transport) algorithms.CostTopo {
	return algorithms.CostTopo{NRanks: n, NNodes: n, RanksPerNode: 1, Intra: algorithms.Shm, Inter: tr, Channels: 2}
}

// inPlaceMinBytes is the smallest size whose in-place factor tune fits.
// Below it a call's buffers stay in the caches and its placement does not
// change what it costs; the ratios measured there (0.87–1.05 in the
// 2-core sweeps, for every algorithm alike) are noise, which would only
// flip choices, so those buckets get 1.
const inPlaceMinBytes = 256 << 10

// fitInPlace sets tc's in-place factors for the algorithms of measured:
// from inPlaceMinBytes up, the in-place median over the out-of-place one
// per size bucket, smoothed like the corrections; 1 below.
func fitInPlace(tc *algorithms.TransportCost, measured map[algorithms.Algorithm]tuneRun) {
	for a, run := range measured {
		tab := &tc.InPlace[a][algorithms.Simple]
		fitted := false
		for i, b := range run.Bytes {
			if b >= inPlaceMinBytes && i < len(run.InPlaceUs) && run.InPlaceUs[i] > 0 && run.MedianUs[i] > 0 {
				tab[bits.Len64(uint64(b))-1] = run.InPlaceUs[i] / run.MedianUs[i]
				fitted = true
			}
		}
		if !fitted {
			continue
		}
		smoothCorrections(tab)
		for k := 0; k < bits.Len64(inPlaceMinBytes)-1; k++ {
			tab[k] = 1
		}
	}
}

// fitCorrections sets tc's per-size corrections for the algorithms of
// measured (runs on topo): measured time over the α-β prediction of tc,
// smoothed. entry is where tc sits in the tuning (its transport, ranks
// per node and nodes).
func fitCorrections(tc *algorithms.TransportCost, cores int, entry algorithms.LocalCost, topo algorithms.CostTopo, measured map[algorithms.Algorithm]tuneRun) {
	probe := algorithms.DefaultTuning()
	probe.Cores = cores
	probe.Transports[entry.Transport] = *tc
	entry.Cost = *tc
	probe.Local = []algorithms.LocalCost{entry}
	for a, run := range measured {
		for i, b := range run.Bytes {
			p, err := probe.Predict(algorithms.AllReduce, a, algorithms.Simple, topo, b, 0)
			if err != nil || p.TimeUs <= 0 || run.MedianUs[i] <= 0 {
				continue
			}
			k := bits.Len64(uint64(b)) - 1
			tc.Correction[a][algorithms.Simple][k] = run.MedianUs[i] / p.TimeUs
		}
		smoothCorrections(&tc.Correction[a][algorithms.Simple])
	}
}
