package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/topology"
	"github.com/gotree/gotree/topology/discover"
)

func TestExplainOneNode(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := runExplain([]string{"--nranks", "4", "--channels", "1", "-e", "1M", "--tuning", ""}, &out, &errb); rc != 0 {
		t.Fatalf("rc %d: %s", rc, errb.String())
	}
	s := out.String()
	for _, want := range []string{
		"4 ranks on 1 node",
		"Channel 00/02 :    0   1   2   3",
		"0 -> 1 -> 2 -> 3, so its depth is 3",
		"Channel 0 (tree 0): root 0, depth 3, largest fan-out 1; 2 internal ranks, 1 leaf.",
		"2(n-1) = 6 steps",
		"Predicted choice by size",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q in:\n%s", want, s)
		}
	}
}

// With the CPU links one node also shows halving-doubling (its steps
// counted with the fold for 6 ranks); across nodes it is not offered.
func TestExplainHalvingDoubling(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, runExplain([]string{"--nranks", "6", "--links", "cpu", "-e", "1M", "--tuning", ""}, &out, &errb), errb.String())
	s := out.String()
	for _, want := range []string{"halving-doubling", "2 x log2(4) = 4 exchanges", "6 is not a power of two: 2 of the ranks", "That is 6 steps against the ring's 10", "hd (best protocol)"} {
		assert.Contains(t, s, want)
	}
	out.Reset()
	require.Equal(t, 0, runExplain([]string{"--nranks", "8", "--nodes", "2", "--links", "cpu", "-e", "1M", "--tuning", ""}, &out, &errb), errb.String())
	assert.NotContains(t, out.String(), "halving-doubling")
	assert.NotContains(t, out.String(), "hd (best protocol)")
}

// Allgather and reduce-scatter: hd's binomial trees on a power of two
// ranks of one node, chosen by the model (one step fewer than the ring at
// 4 ranks: hd at every size); elsewhere the ring, and why.
func TestExplainGatherScatter(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, runExplain([]string{"--nranks", "4", "--links", "cpu", "-e", "1M", "--tuning", ""}, &out, &errb), errb.String())
	s := out.String()
	assert.Contains(t, s, "== Allgather and reduce-scatter")
	assert.Contains(t, s, "log2(4) = 2 steps")
	assert.Regexp(t, `(?m)^ +4K +[0-9.]+ us +[0-9.]+ us +hd$`, s)
	// 6 ranks: Bruck's order, 3 steps against the ring's 5; 3 ranks: 2
	// steps either way, a tie that the ring keeps.
	for _, n := range []string{"6", "3"} {
		out.Reset()
		require.Equal(t, 0, runExplain([]string{"--nranks", n, "--links", "cpu", "-e", "4M", "--tuning", ""}, &out, &errb), errb.String())
		assert.Contains(t, out.String(), "Bruck's order", n)
		if n == "6" {
			assert.Contains(t, out.String(), "ceil(log2(6)) = 3 steps")
			assert.Regexp(t, `(?m)^ +6K +[0-9.]+ us +[0-9.]+ us +hd$`, out.String())
			// Above BruckAutoMaxBytes the ring, though the model's hd is faster.
			m := regexp.MustCompile(`(?m)^ +1536K +([0-9.]+) us +([0-9.]+) us +(\w+)$`).FindStringSubmatch(out.String())
			require.NotNil(t, m, out.String())
			assert.Equal(t, "ring", m[3])
			ringUs, err1 := strconv.ParseFloat(m[1], 64)
			hdUs, err2 := strconv.ParseFloat(m[2], 64)
			require.NoError(t, errors.Join(err1, err2))
			assert.Less(t, hdUs, ringUs, "the model alone would take hd")
			assert.Contains(t, out.String(), "Above 512K auto keeps the ring")
		} else {
			assert.NotRegexp(t, `(?m) hd$`, out.String(), n)
		}
	}
	out.Reset()
	args := []string{"--nranks", "8", "--nodes", "2", "--links", "cpu"}
	require.Equal(t, 0, runExplain(append(args, "-e", "1M", "--tuning", ""), &out, &errb), errb.String())
	assert.Contains(t, out.String(), "Both run the ring here", args)
	assert.NotRegexp(t, `(?m) hd$`, out.String(), args)
}

func TestExplainNodes(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := runExplain([]string{"--nranks", "32", "--nodes", "4", "--tuning", "", "--show", "1"}, &out, &errb); rc != 0 {
		t.Fatalf("rc %d: %s", rc, errb.String())
	}
	s := out.String()
	for _, want := range []string{"32 ranks on 4 nodes (8 per node)", "depth floor(log2 4) = 2", "the exact depth here is 10", "Predicted crossover: tree gives way to ring"} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q in:\n%s", want, s)
		}
	}
	if rc := runExplain([]string{"--nranks", "6", "--nodes", "4"}, &out, &errb); rc != 2 {
		t.Errorf("6 ranks on 4 nodes accepted (rc %d)", rc)
	}
}

func TestSimCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := runSim([]string{"--nodes", "2,64", "--ranks-per-node", "4", "-b", "64K", "-e", "1M", "--tuning", ""}, &out, &errb); rc != 0 {
		t.Fatalf("rc %d: %s", rc, errb.String())
	}
	s := out.String()
	if strings.Count(s, "exact plan") != 8 || !strings.Contains(s, "      64      256") {
		t.Errorf("output:\n%s", s)
	}
}

// flat joins s's words with single spaces (sentences wrap).
func flat(s string) string { return strings.Join(strings.Fields(s), " ") }

// explainRun runs gotree explain and returns its output.
func explainRun(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if rc := runExplain(args, &out, &errb); rc != 0 {
		t.Fatalf("explain %v: rc %d: %s", args, rc, errb.String())
	}
	return out.String()
}

// searchFixture runs the ring and tree searches on a fixture the way NCCL
// sizes a communicator: min of the two channel counts.
func searchFixture(t *testing.T, path string, internode bool) (*topology.System, *topology.SearchResult, *topology.SearchResult, int) {
	t.Helper()
	s, err := topology.LoadFile(path)
	require.NoError(t, err)
	ring, err := topology.Search(s, topology.SearchOptions{Pattern: topology.PatternRing, InterNode: internode})
	require.NoError(t, err)
	tree, err := topology.Search(s, topology.SearchOptions{Pattern: topology.PatternTree, InterNode: internode})
	require.NoError(t, err)
	return s, ring, tree, min(ring.Channels, tree.Channels)
}

// One node of 4 V100s (NCCL XML): the chains of the tree search, depth
// GPUs-1, and each channel's root where the search starts its chain.
func TestExplainTopoOneNodeXML(t *testing.T) {
	path := filepath.Join(fixtureDir, "v100x4-nv2.xml")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	gpus := strings.Count(string(raw), "<gpu ") // from the file itself
	require.Equal(t, 4, gpus)
	_, ring, tree, C := searchFixture(t, path, false)
	require.Equal(t, 6, C) // ring 6, tree 8 (topology/testdata/golden/v100x4-nv2.txt)

	s := explainRun(t, "--topo", path, "-e", "1M", "--show", "2", "--tuning", "")
	assert.Contains(t, s, "Topology file "+path+": 4 GPUs")
	assert.Contains(t, s, fmt.Sprintf("The communicator uses the smaller count, %d = min(%d ring, %d tree)", C, ring.Channels, tree.Channels))
	assert.Contains(t, s, fmt.Sprintf("gotree doubles\nthem to %d", 2*C))
	// Rings: the ring search's orders (GPU i is local rank i in this file),
	// repeated for the second copy of each channel.
	for c := 0; c < 2*C; c++ {
		var want strings.Builder
		fmt.Fprintf(&want, "Channel %02d/%02d : ", c, 2*C)
		for _, g := range ring.Orders[c%C] {
			fmt.Fprintf(&want, "%4d", g)
		}
		assert.Contains(t, s, want.String()+"\n")
	}
	assert.NotContains(t, s, fmt.Sprintf("Channel %02d/", 2*C))
	// One node: a chain of depth gpus-1, not log2.
	assert.Contains(t, s, fmt.Sprintf("%d = GPUs per node - 1, not floor(log2 %d) = 2", gpus-1, gpus))
	// Every channel's tree is the tree search's chain: its first GPU is the
	// root, its last the only leaf, the others internal.
	for c := 0; c < C; c++ {
		o := tree.Orders[c]
		same := -1
		for d := 0; d < c; d++ {
			if slices.Equal(o, tree.Orders[d]) {
				same = d
				break
			}
		}
		if same >= 0 {
			assert.Contains(t, s, fmt.Sprintf("Channel %d: the same tree as channel %d", c, same))
			continue
		}
		assert.Contains(t, s, fmt.Sprintf("Channel %d (tree 0): root %d, depth %d, largest fan-out 1; %d internal ranks, 1 leaf.", c, o[0], gpus-1, gpus-2))
	}
	// Channel 1's table (shown): rank o[i] has depth i; the last is the leaf.
	o := tree.Orders[1]
	assert.Equal(t, []int{1, 3, 0, 2}, o)
	assert.Contains(t, s, fmt.Sprintf("  %6d %5d %4d %5d %6d  %s\n", o[3], 0, o[3], 3, 0, "leaf"))
	assert.Contains(t, s, fmt.Sprintf("  %6d %5d %4d %5d %6d  %s\n", o[0], 0, o[0], 0, 1, "root"))
	assert.Contains(t, s, fmt.Sprintf("  %6d %5d %4d %5d %6d  %s\n", o[1], 0, o[1], 1, 1, "internal"))
	// The second copy of a channel carries tree 1, which on one node is the
	// same chain.
	assert.Contains(t, s, fmt.Sprintf("Channel %d: the same tree as channel 0", C))
	assert.Contains(t, s, "Predicted choice by size")
}

// Two nodes of a DGX-1 (gotree JSON): the inter-node searches, chains of
// 8 joined by the double binary tree through each chain's first rank.
func TestExplainTopoTwoNodesJSON(t *testing.T) {
	path := filepath.Join(fixtureDir, "dgx1-v100.json")
	sys, ring, tree, C := searchFixture(t, path, true)
	G := sys.Count(topology.GPU)
	require.Equal(t, 8, G)
	require.Equal(t, topology.PatternTree, tree.Pattern)
	s := explainRun(t, "--topo", path, "--nodes", "2", "-e", "1M", "--show", "1", "--tuning", "")
	assert.Contains(t, s, fmt.Sprintf("%d ranks on 2 nodes (%d per node)", 2*G, G))
	assert.Contains(t, s, fmt.Sprintf("The communicator uses the smaller count, %d = min(%d ring, %d tree)", C, ring.Channels, tree.Channels))
	assert.Contains(t, s, fmt.Sprintf("Channel %02d/%02d :", 2*C-1, 2*C))
	// Tree 0 of channel 0: node 0's chain head is the root; node 1's head
	// hangs below it (tree pattern: links between nodes at the chain's
	// first rank), so the deepest rank is node 1's chain end at 1 + (G-1).
	o := tree.Orders[0]
	root := o[0]
	assert.Contains(t, s, fmt.Sprintf("Channel 0 (tree 0): root %d, depth %d, largest fan-out 2; %d internal ranks, 2 leaves.", root, G, 2*G-3))
	leaf1 := G + o[G-1] // node 1's last chain rank
	assert.Contains(t, s, fmt.Sprintf("  %6d %5d %4d %5d %6d  %s\n", leaf1, 1, o[G-1], G, 0, "leaf"))
	assert.Contains(t, s, fmt.Sprintf("  %6d %5d %4d %5d %6d  %s\n", G+o[0], 1, o[0], 1, 1, "internal"))
	// Tree 1 (channel C) has its root on the other node.
	_, t1 := algorithms.Dtree(2, 1)
	rootNode := 0
	if t1.Up == -1 {
		rootNode = 1
	}
	assert.Contains(t, s, fmt.Sprintf("Channel %d (tree 1): root %d, depth %d", C, rootNode*G+o[0], G))
}

func TestExplainSources(t *testing.T) {
	t.Setenv("GOTREE_TOPO_FILE", "")
	// No topology and no --nranks/--nodes: this machine.
	sys, err := topology.LoadSystem(topology.LoadOptions{Discoverer: discover.New(discover.Options{})})
	require.NoError(t, err)
	s := flat(explainRun(t, "-e", "1K", "--tuning", ""))
	assert.Contains(t, s, "This machine, discovered")
	if sys.Count(topology.GPU) == 0 {
		assert.Contains(t, s, "Not used for the layout: it has no GPU")
		assert.Contains(t, s, "4 ranks on 1 node")
		assert.Contains(t, s, "shm inside nodes, tcp between")
	}
	// --nranks alone: the uniform layout, said so.
	s = explainRun(t, "--nranks", "8", "--nodes", "2", "-e", "1K", "--tuning", "")
	assert.Contains(t, s, "Uniform layout from --nranks 8 and --nodes 2 (no topology)")
	// $GOTREE_TOPO_FILE stands for --topo.
	path := filepath.Join(fixtureDir, "pcie-8gpu.xml")
	t.Setenv("GOTREE_TOPO_FILE", path)
	s = explainRun(t, "-e", "1K", "--tuning", "")
	assert.Contains(t, s, "Topology file "+path+": 8 GPUs")
	assert.Contains(t, s, "pci inside nodes") // SYS paths between GPUs: PCI costs
	// ... with --nodes as copies of that machine; --nranks means uniform.
	s = flat(explainRun(t, "--nodes", "2", "-e", "1K", "--tuning", ""))
	assert.Contains(t, s, "Topology file "+path+": 8 GPUs")
	assert.Contains(t, s, "16 ranks on 2 nodes (8 per node)")
	s = flat(explainRun(t, "--nranks", "4", "-e", "1K", "--tuning", ""))
	assert.Contains(t, s, "Uniform layout from --nranks 4 and --nodes 1")
	// A GPU-less file falls back to the uniform layout with CPU links.
	s = flat(explainRun(t, "--topo", filepath.Join(fixtureDir, "cpu-2s.xml"), "-e", "1K", "--tuning", ""))
	assert.Contains(t, s, "0 GPUs, 2 CPUs")
	assert.Contains(t, s, "Not used for the layout")
	// --nranks must match the topology.
	var out, errb bytes.Buffer
	assert.Equal(t, 2, runExplain([]string{"--topo", path, "--nranks", "4"}, &out, &errb))
	assert.Contains(t, errb.String(), "8 GPUs × 1 nodes = 8 ranks")
}

// The cost section names the calibration it uses: a tuning file's entry
// for exactly this many nodes, else the main entry (and the built-in
// entry for 4 ranks per node on a 2-core node, here without its tree, which
// leaves the tree to the main entry).
func TestExplainCalibrationUsed(t *testing.T) {
	tu := algorithms.DefaultTuning()
	tu.Source = "test"
	for i, l := range tu.Local {
		if l.Transport == algorithms.Shm && l.RanksPerNode == 4 {
			tu.Local[i].Cost.BusGBps[algorithms.Tree] = [algorithms.NumProtocols]float64{}
		}
	}
	entry := tu.Transports[algorithms.TCP]
	tu.Local = append(tu.Local, algorithms.LocalCost{Transport: algorithms.TCP, RanksPerNode: 1, Nodes: 3, Cost: entry})
	data, err := algorithms.MarshalTuning(tu, []algorithms.Transport{algorithms.TCP}, nil)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "tuning.json")
	require.NoError(t, os.WriteFile(file, data, 0o644))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nranks", "3", "--nodes", "3"}, "Calibration used for 3 nodes of 1 rank: tcp: the entry calibrated for exactly 3 nodes of 1 rank."},
		{[]string{"--nranks", "4", "--nodes", "4"}, "Calibration used for 4 nodes of 1 rank: tcp: the main entry."},
		{[]string{"--nranks", "8", "--nodes", "2"}, "Calibration used for 2 nodes of 4 ranks: shm: the entry calibrated for 4 ranks per node on 2 cores for ring, hd and direct, the main entry for tree, oneshot and shared; tcp: the main entry."},
	} {
		var out, errb bytes.Buffer
		require.Equal(t, 0, runExplain(append(tc.args, "--links", "cpu", "-e", "1M", "--tuning", file), &out, &errb), errb.String())
		assert.Contains(t, out.String(), tc.want, tc.args)
	}
}

// With the CPU transports and no --channels, explain shows the channels
// the CPU executor runs (pg.DefaultChannels of the tuning's cores): one
// for 4 ranks on 2 cores, two for one rank per node; --channels overrides.
func TestExplainCPUChannels(t *testing.T) {
	run := func(args ...string) string {
		var out, errb bytes.Buffer
		require.Equal(t, 0, runExplain(append(args, "--links", "cpu", "-e", "16M", "--tuning", ""), &out, &errb), errb.String())
		return out.String()
	}
	rows := func(s string) []string { // the auto column's channel counts
		var chs []string
		for _, l := range strings.Split(s, "\n") {
			for _, f := range strings.Fields(l) {
				if strings.HasPrefix(f, "ch=") {
					chs = append(chs, f)
				}
			}
		}
		return chs
	}
	s := run("--nranks", "4", "--nodes", "1")
	assert.Contains(t, s, "The CPU executor runs at most 1 channel here")
	assert.NotEmpty(t, rows(s))
	for _, ch := range rows(s) {
		assert.Equal(t, "ch=1", ch)
	}
	s = run("--nranks", "3", "--nodes", "3")
	assert.Contains(t, s, "The CPU executor runs at most 2 channels here")
	assert.Contains(t, rows(s), "ch=2")
	assert.NotContains(t, rows(s), "ch=4")
	s = run("--nranks", "3", "--nodes", "3", "--channels", "2")
	assert.NotContains(t, s, "The CPU executor runs at most")
	assert.Contains(t, rows(s), "ch=4")
}

// A calibration whose in-place factors change the choice makes explain
// list the in-place choice as well; without them it says nothing more.
func TestExplainInPlace(t *testing.T) {
	tu := algorithms.DefaultTuning()
	tu.Local = nil
	path := filepath.Join(t.TempDir(), "tuning.json")
	write := func() {
		data, err := algorithms.MarshalTuning(tu, nil, nil)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, data, 0o644))
	}
	run := func() string {
		var out, errb bytes.Buffer
		require.Equal(t, 0, runExplain([]string{"--nranks", "4", "--links", "cpu", "-e", "1M", "--tuning", path}, &out, &errb), errb.String())
		return out.String()
	}
	write()
	require.NotContains(t, run(), "In place")
	for k := range algorithms.CorrectionBuckets {
		tu.Transports[algorithms.Shm].InPlace[algorithms.Tree][algorithms.Simple][k] = 0.001
	}
	write()
	s := run()
	require.Contains(t, s, "In place (output = input, as in every allreduce torch issues)")
	require.Contains(t, s, "         4 .. 1M       tree/Simple")
}
