package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
)

// writePerfJSON writes a perf --json file of an allreduce on n nodes of
// one rank with algo forced, median time(bytes) at 4 B .. 16 MiB (×4).
func writePerfJSON(t *testing.T, dir, name string, n int, algo string, time func(b int64) float64, mutate func(*perfFile)) string {
	t.Helper()
	f := perfFile{Collective: "allreduce", NRanks: n, Nodes: n, Algo: algo}
	for b := int64(4); b <= 16<<20; b *= 4 {
		f.Rows = append(f.Rows, perfRow{Bytes: b, Count: b / 4, Type: "float32", Op: "sum", OutTime: time(b), Median: time(b)})
	}
	if mutate != nil {
		mutate(&f)
	}
	data, err := json.Marshal(map[string]any{"collective": f.Collective, "nranks": f.NRanks, "nodes": f.Nodes, "algo": f.Algo, "rows": f.Rows})
	require.NoError(t, err)
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, data, 0o644))
	return p
}

// TestTuneFromPerf: synthetic α-β curves on 2 and 3 nodes, each from two
// files whose medians are pooled, are fitted back exactly; every node
// count gets its own TCP entry, the largest also the main entry; and the
// tuning then predicts the measured times and picks the faster algorithm
// at every measured size.
func TestTuneFromPerf(t *testing.T) {
	dir := t.TempDir()
	const base = 2.0
	type curve struct{ lat, bus float64 } // µs at ≤ 1 KiB, GB/s bus bandwidth
	curves := map[int]map[string]curve{
		2: {"ring": {60, 0.12}, "tree": {40, 0.24}},
		3: {"ring": {150, 0.12}, "tree": {90, 0.15}},
	}
	alpha := func(n int, algo string, c curve) func(int64) float64 {
		a, _ := algorithms.ParseAlgorithm(algo)
		ratio := algorithms.ShapeOf(algorithms.AllReduce, a, nodesTopo(n, algorithms.TCP)).Ratio
		return func(b int64) float64 {
			if b <= 1<<10 {
				return c.lat
			}
			return c.lat + float64(b)/(1e3*c.bus*ratio)
		}
	}
	var files []string
	for n, byAlgo := range curves {
		for algo, c := range byAlgo {
			exact := alpha(n, algo, c)
			// Two repetitions 10% apart around the curve: the pooled median is the curve.
			files = append(files,
				writePerfJSON(t, dir, fmt.Sprintf("n%d-%s-r1.json", n, algo), n, algo, func(b int64) float64 { return exact(b) * 0.9 }, nil),
				writePerfJSON(t, dir, fmt.Sprintf("n%d-%s-r2.json", n, algo), n, algo, func(b int64) float64 { return exact(b) * 1.1 }, nil))
		}
	}
	runs, err := readPerfRuns(files)
	require.NoError(t, err)
	require.Len(t, runs, 2)
	require.InDelta(t, 60, runs[2][algorithms.Ring].MedianUs[0], 1e-9)

	tu := algorithms.DefaultTuning()
	tu.Transports[algorithms.TCP].BaseUs[algorithms.Ring][algorithms.Simple] = base
	tu.Local = append(tu.Local, algorithms.LocalCost{Transport: algorithms.TCP, RanksPerNode: 1, Nodes: 3}) // replaced
	fits, err := fitNodes(tu, runs)
	require.NoError(t, err)
	require.Len(t, fits, 4)
	for _, f := range fits {
		a, _ := algorithms.ParseAlgorithm(f.Algo)
		c := curves[f.Ranks][f.Algo]
		sh := algorithms.ShapeOf(algorithms.AllReduce, a, nodesTopo(f.Ranks, algorithms.TCP))
		require.InDelta(t, c.bus, f.BusGBps, 1e-6, "%+v", f)
		require.InDelta(t, (c.lat-base)/(sh.IntraHops+sh.InterHops), f.HopUs, 1e-6, "%+v", f)
	}
	nodes := map[int]int{}
	for _, l := range tu.Local {
		if l.Transport == algorithms.TCP {
			nodes[l.Nodes]++
			require.Equal(t, 1, l.RanksPerNode)
		}
	}
	require.Equal(t, map[int]int{2: 1, 3: 1}, nodes, "one TCP entry per node count, the old one for 3 nodes replaced")
	require.InDelta(t, 0.15, tu.Transports[algorithms.TCP].BusGBps[algorithms.Tree][algorithms.Simple], 1e-9, "main entry: the 3-node fit")

	// Round trip through the file, then predict.
	data, err := algorithms.MarshalTuning(tu, []algorithms.Transport{algorithms.Shm, algorithms.TCP}, nil)
	require.NoError(t, err)
	tu, err = algorithms.ParseTuning(data)
	require.NoError(t, err)
	for n, byAlgo := range curves {
		topo := nodesTopo(n, algorithms.TCP)
		for b := int64(4); b <= 16<<20; b *= 4 {
			best, bestT := "", 0.0
			for algo, c := range byAlgo {
				want := alpha(n, algo, c)(b)
				a, _ := algorithms.ParseAlgorithm(algo)
				p, err := tu.Predict(algorithms.AllReduce, a, algorithms.Simple, topo, b, 0)
				require.NoError(t, err)
				require.InEpsilon(t, want, p.TimeUs, 0.05, "%d nodes %s %d B", n, algo, b)
				if best == "" || want < bestT {
					best, bestT = algo, want
				}
			}
			ch, err := tu.Choose(algorithms.AllReduce, topo, b, algorithms.Constraints{})
			require.NoError(t, err)
			require.Equal(t, best, ch.Algo.String(), "%d nodes, %d B", n, b)
		}
	}

	// Fitted one node count after the other into one file: both entries
	// stay, and the main entry is the larger count's whatever the order.
	for _, order := range [][]int{{3, 2}, {2, 3}} {
		chained := algorithms.DefaultTuning()
		for _, n := range order {
			_, err := fitNodes(chained, map[int]map[algorithms.Algorithm]tuneRun{n: runs[n]})
			require.NoError(t, err)
		}
		var counts []int
		for _, l := range chained.Local {
			if l.Transport == algorithms.TCP {
				counts = append(counts, l.Nodes)
			}
		}
		require.ElementsMatch(t, []int{2, 3}, counts, "order %v", order)
		require.InDelta(t, 0.15, chained.Transports[algorithms.TCP].BusGBps[algorithms.Tree][algorithms.Simple], 1e-9, "order %v: main entry", order)
	}

	// What -from-perf refuses, each naming the file and what is wrong.
	ok := func(int64) float64 { return 100 }
	for _, tc := range []struct {
		mutate func(*perfFile)
		want   string
	}{
		{func(f *perfFile) { f.Algo = "auto" }, "want a run with ring or tree forced"},
		{func(f *perfFile) { f.Nodes = 0 }, "no node count"},
		{func(f *perfFile) { f.NRanks = 4 }, "4 ranks on 2 nodes"},
		{func(f *perfFile) { f.Collective = "allgather" }, "want allreduce"},
		{func(f *perfFile) { f.Rows[3].InWrong = 7 }, "7 wrong elements"},
		{func(f *perfFile) { f.Rows = nil }, "no rows"},
		{func(f *perfFile) { f.Rows[2].PlanAlgo = "tree" }, "64 B: ran tree although ring was forced"},
	} {
		p := writePerfJSON(t, dir, "bad.json", 2, "ring", ok, tc.mutate)
		_, err := readPerfRuns([]string{p})
		require.Error(t, err)
		require.Contains(t, err.Error(), tc.want)
		require.True(t, strings.HasPrefix(err.Error(), p), err.Error())
	}
	// A node count with only one algorithm cannot be fitted.
	only, err := readPerfRuns([]string{writePerfJSON(t, dir, "ring-only.json", 2, "ring", alpha(2, "ring", curves[2]["ring"]), nil)})
	require.NoError(t, err)
	_, err = fitNodes(algorithms.DefaultTuning(), only)
	require.ErrorContains(t, err, "2 nodes: no tree run")
}
