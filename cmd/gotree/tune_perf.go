package main

// gotree tune -from-perf calibrates the network between nodes from
// `gotree perf --json` runs across them (one rank per node, the ring and
// the tree forced), and gotree tune -cluster makes those runs itself on
// every node under a launcher: loopback inside one host says little about a real
// link, and the crossover between ring and tree depends on the number of
// nodes. Each node count measured gets its own TCP entry (a local entry
// with "nodes" set), fitted like tune's own runs; the main TCP entry takes
// the fit of the largest node count, for node counts not measured.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/gotree/gotree/algorithms"
)

// perfFile is what -from-perf reads of a `gotree perf --json` output.
type perfFile struct {
	Collective string    `json:"collective"`
	NRanks     int       `json:"nranks"`
	Nodes      int       `json:"nodes"`
	Algo       string    `json:"algo"`
	Rows       []perfRow `json:"rows"`
}

// readPerfRuns reads perf JSON files and pools them (poolPerfRuns).
func readPerfRuns(paths []string) (map[int]map[algorithms.Algorithm]tuneRun, error) {
	var docs []namedPerf
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var f perfFile
		if err := json.Unmarshal(data, &f); err != nil {
			return nil, fmt.Errorf("%s: not a gotree perf --json output: %v", p, err)
		}
		docs = append(docs, namedPerf{p, f})
	}
	return poolPerfRuns(docs)
}

// namedPerf is one perf run and the name its errors carry.
type namedPerf struct {
	name string
	perfFile
}

// poolPerfRuns pools perf runs per node count and algorithm: at each size
// the median over the runs of perf's out-of-place median. Every run must
// be an allreduce with a forced ring or tree that ran that algorithm at
// every size (plan_algo), one rank per node, and no wrong element.
func poolPerfRuns(docs []namedPerf) (map[int]map[algorithms.Algorithm]tuneRun, error) {
	meds := map[int]map[algorithms.Algorithm]map[int64][]float64{}
	for _, f := range docs {
		p := f.name
		a, err := algorithms.ParseAlgorithm(f.Algo)
		switch {
		case f.Collective != algorithms.AllReduce.String():
			return nil, fmt.Errorf("%s: %s, want allreduce", p, f.Collective)
		case err != nil || (a != algorithms.Ring && a != algorithms.Tree):
			return nil, fmt.Errorf("%s: algo %q, want a run with ring or tree forced (--algo)", p, f.Algo)
		case f.Nodes == 0:
			return nil, fmt.Errorf("%s: no node count (written by a gotree perf older than -from-perf)", p)
		case f.Nodes < 2 || f.NRanks != f.Nodes:
			return nil, fmt.Errorf("%s: %s on %s, want one rank on each of at least 2 nodes", p, plural(f.NRanks, "rank", "ranks"), plural(f.Nodes, "node", "nodes"))
		case len(f.Rows) == 0:
			return nil, fmt.Errorf("%s: no rows", p)
		}
		for _, r := range f.Rows {
			if r.OutWrong != 0 || r.InWrong != 0 {
				return nil, fmt.Errorf("%s: %d B: %d wrong elements", p, r.Bytes, r.OutWrong+r.InWrong)
			}
			if r.PlanAlgo != "" && r.PlanAlgo != f.Algo {
				return nil, fmt.Errorf("%s: %d B: ran %s although %s was forced", p, r.Bytes, r.PlanAlgo, f.Algo)
			}
			if meds[f.Nodes] == nil {
				meds[f.Nodes] = map[algorithms.Algorithm]map[int64][]float64{}
			}
			if meds[f.Nodes][a] == nil {
				meds[f.Nodes][a] = map[int64][]float64{}
			}
			meds[f.Nodes][a][r.Bytes] = append(meds[f.Nodes][a][r.Bytes], r.Median)
		}
	}
	out := map[int]map[algorithms.Algorithm]tuneRun{}
	for n, byAlgo := range meds {
		out[n] = map[algorithms.Algorithm]tuneRun{}
		for a, bySize := range byAlgo {
			run := tuneRun{Transport: "tcp", NRanks: n, Algo: a.String()}
			for b := range bySize {
				run.Bytes = append(run.Bytes, b)
			}
			sort.Slice(run.Bytes, func(i, j int) bool { return run.Bytes[i] < run.Bytes[j] })
			for _, b := range run.Bytes {
				m, _, _ := stats(bySize[b])
				run.MedianUs = append(run.MedianUs, m)
			}
			out[n][a] = run
		}
	}
	return out, nil
}

// fitNodes fits the TCP entries of tu from runs (node count -> algorithm
// -> pooled run): one local entry per node count, each needing both the
// ring and the tree, replacing any earlier TCP entry for that count (so
// that runs on different node counts can be fitted one after another into
// one file); the main TCP entry becomes the largest count's. The base of a
// call is the starting main TCP entry's.
func fitNodes(tu *algorithms.Tuning, runs map[int]map[algorithms.Algorithm]tuneRun) ([]tuneFit, error) {
	var ns []int
	for n := range runs {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	if len(ns) == 0 {
		return nil, fmt.Errorf("no runs")
	}
	base := tu.Transports[algorithms.TCP].BaseUs[algorithms.Ring][algorithms.Simple]
	var fits []tuneFit
	for _, n := range ns {
		topo := nodesTopo(n, algorithms.TCP)
		entry := algorithms.LocalCost{Transport: algorithms.TCP, RanksPerNode: 1, Nodes: n}
		tc := algorithms.TransportCost{SharesCPU: true}
		for _, a := range tuneAlgos("tcp") {
			run, ok := runs[n][a]
			if !ok {
				return nil, fmt.Errorf("%d nodes: no %v run (give both the ring and the tree)", n, a)
			}
			f := fitRun(run, base, a, topo)
			if f.BusGBps <= 0 {
				return nil, fmt.Errorf("%d nodes, %v: no size of 1 MiB or more slower than the latency: cannot fit a bandwidth", n, a)
			}
			f.Transport = "tcp"
			fits = append(fits, f)
			tc.BaseUs[a][algorithms.Simple] = round3(f.BaseUs)
			tc.HopUs[a][algorithms.Simple] = round3(f.HopUs)
			tc.BusGBps[a][algorithms.Simple] = round3(f.BusGBps)
		}
		fitCorrections(&tc, tu.Cores, entry, topo, runs[n])
		var keep []algorithms.LocalCost
		for _, l := range tu.Local {
			if l.Transport != algorithms.TCP || l.Nodes != n {
				keep = append(keep, l)
			}
		}
		entry.Cost = tc
		tu.Local = append(keep, entry)
	}
	// The main entry: the largest node count calibrated, in this run or
	// an earlier one kept from the starting file.
	largest := 0
	for _, l := range tu.Local {
		if l.Transport == algorithms.TCP && l.RanksPerNode == 1 && l.Nodes > largest {
			largest, tu.Transports[algorithms.TCP] = l.Nodes, l.Cost
		}
	}
	return fits, nil
}

// tuneFromPerf is `gotree tune -from-perf FILES [-tuning START] -out OUT`.
func tuneFromPerf(paths []string, start, out string, stdout, stderr io.Writer) int {
	runs, err := readPerfRuns(paths)
	if err != nil {
		fmt.Fprintf(stderr, "gotree tune: -from-perf: %v\n", err)
		return 1
	}
	return writeNodeTuning(runs, fmt.Sprintf("%d perf runs", len(paths)), map[string]any{"files": paths}, start, out, stdout, stderr)
}

// tuneCluster is `gotree tune -cluster`, run on every node under a
// launcher (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, one process per
// node): perf's allreduce from 4 B to maxB (×4) with the ring forced, then
// with the tree, each in its own communicator; rank 0 fits them as
// -from-perf does and writes out.
func tuneCluster(maxB int64, iters int, timeout time.Duration, start, out string, stdout, stderr io.Writer) int {
	var docs []namedPerf
	for _, algo := range []string{"ring", "tree"} {
		o := perfOpts{minBytes: 4, maxBytes: maxB, factor: 4, iters: iters, warmup: 5, check: 1,
			dtype: algorithms.Float32, op: algorithms.Sum, algo: algo, coll: algorithms.AllReduce, asJSON: true, timeout: timeout}
		var buf bytes.Buffer
		if rc := perfJoinEnv(o, &buf, stderr); rc != 0 {
			fmt.Fprintf(stderr, "gotree tune: -cluster: the %s run failed\n", algo)
			return rc
		}
		if buf.Len() == 0 {
			continue // not rank 0: perf prints on rank 0 only
		}
		var f perfFile
		if err := json.Unmarshal(buf.Bytes(), &f); err != nil {
			fmt.Fprintf(stderr, "gotree tune: -cluster: the %s run: %v\n", algo, err)
			return 1
		}
		docs = append(docs, namedPerf{"tune -cluster, " + algo, f})
	}
	if len(docs) == 0 {
		return 0
	}
	runs, err := poolPerfRuns(docs)
	if err != nil {
		fmt.Fprintf(stderr, "gotree tune: -cluster: %v\n", err)
		return 1
	}
	for _, d := range docs {
		fmt.Fprintf(stdout, "# measured %s over %d nodes\n", d.Algo, d.Nodes)
	}
	return writeNodeTuning(runs, fmt.Sprintf("a run across %d nodes (tune -cluster)", docs[0].Nodes), map[string]any{"perf": docs}, start, out, stdout, stderr)
}

// writeNodeTuning fits runs (fitNodes) into the tuning file start (or the
// built-in values), writes it to out and prints the fits.
func writeNodeTuning(runs map[int]map[algorithms.Algorithm]tuneRun, from string, raw map[string]any, start, out string, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "gotree tune: %v\n", err)
		return 1
	}
	tu, err := loadTuning(start)
	if err != nil {
		return fail(err)
	}
	fits, err := fitNodes(tu, runs)
	if err != nil {
		return fail(err)
	}
	was := tu.Source
	if was == "" {
		was = "built-in values"
	}
	host, _ := os.Hostname()
	tu.Source = fmt.Sprintf("gotree tune on %s, %s: tcp per node count from %s; the rest from %s", host, time.Now().UTC().Format("2006-01-02 15:04 MST"), from, was)
	var measured []tuneRun
	for _, byAlgo := range runs {
		for _, r := range byAlgo {
			measured = append(measured, r)
		}
	}
	sort.Slice(measured, func(i, j int) bool {
		if measured[i].NRanks != measured[j].NRanks {
			return measured[i].NRanks < measured[j].NRanks
		}
		return measured[i].Algo < measured[j].Algo
	})
	raw["fits"], raw["runs"] = fits, measured
	data, err := algorithms.MarshalTuning(tu, []algorithms.Transport{algorithms.Shm, algorithms.TCP}, raw)
	if err == nil {
		err = os.WriteFile(out, data, 0o644)
	}
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(stdout, "%-4s %5s %-5s %12s %10s %10s %10s\n", "link", "nodes", "algo", "latency(us)", "base(us)", "hop(us)", "bus(GB/s)")
	for _, f := range fits {
		fmt.Fprintf(stdout, "%-4s %5d %-5s %12.1f %10.1f %10.1f %10.3f\n", f.Transport, f.Ranks, f.Algo, f.LatencyUs, f.BaseUs, f.HopUs, f.BusGBps)
	}
	fmt.Fprintf(stdout, "# wrote %s; use it with GOTREE_TUNING_FILE=%s\n", out, out)
	return 0
}
