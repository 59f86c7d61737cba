package main

import (
	"bytes"
	"fmt"
	"image/png"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// synthSamples makes out-of-place and in-place cycles of constant times.
func synthSamples(run string, n int, algo string, times map[int64]float64, cycles int) []sweepSample {
	var out []sweepSample
	for b, t := range times {
		for c := 0; c < cycles; c++ {
			for _, in := range []bool{false, true} {
				out = append(out, sweepSample{Run: run, Seq: 1, N: n, Algo: algo, Bytes: b, Cycle: c, InPlace: in, Wrong: 0, Times: []float64{t, t, t}})
			}
		}
	}
	return out
}

func TestSweepRunsMirrored(t *testing.T) {
	var got []string
	for _, r := range sweepRuns([]int{2, 3, 4}, []string{"ring", "tree"}) {
		got = append(got, r.pass+":"+string(rune('0'+r.n))+r.algo)
	}
	want := "A:2ring A:2tree A:3ring A:3tree A:4ring A:4tree B:4tree B:4ring B:3tree B:3ring B:2tree B:2ring"
	if strings.Join(got, " ") != want {
		t.Errorf("order\n got %s\nwant %s", strings.Join(got, " "), want)
	}
}

func TestSweepIntervalsAndAuto(t *testing.T) {
	// N=2: ring wins 4..16 by 20%, 32 is a tie (3%), tree wins 64 by 10%.
	ring := map[int64]float64{4: 10, 8: 10, 16: 10, 32: 10, 64: 22}
	tree := map[int64]float64{4: 12, 8: 12, 16: 12, 32: 10.3, 64: 20}
	ss := append(synthSamples("A", 2, "ring", ring, 2), synthSamples("A", 2, "tree", tree, 2)...)
	auto := func(n int, b int64) string {
		if b >= 32 {
			return "tree"
		}
		return "ring"
	}
	r := analyseSweep(ss, auto, false)
	iv := r.intervals()
	if len(iv) != 3 {
		t.Fatalf("intervals %+v", iv)
	}
	for i, want := range []sweepInterval{
		{N: 2, Winner: "ring", From: 4, To: 16, Points: 3, MedMargin: 0.2, MaxMargin: 0.2},
		{N: 2, Winner: "tie", From: 32, To: 32, Points: 1, MedMargin: 0.03, MaxMargin: 0.03},
		{N: 2, Winner: "tree", From: 64, To: 64, Points: 1, MedMargin: 0.1, MaxMargin: 0.1},
	} {
		g := iv[i]
		if g.N != want.N || g.Winner != want.Winner || g.From != want.From || g.To != want.To || g.Points != want.Points ||
			!approx(g.MedMargin, want.MedMargin) || !approx(g.MaxMargin, want.MaxMargin) {
			t.Errorf("interval %d: %+v, want %+v", i, g, want)
		}
	}
	rows := r.autoRows()
	if len(rows) != 5 {
		t.Fatalf("auto rows %+v", rows)
	}
	for _, a := range rows {
		// auto picks tree at 32 (a 3% loss: passes) and 64 (the winner).
		if !a.Pass {
			t.Errorf("auto fails at %d: %+v", a.Bytes, a)
		}
	}
	bad := analyseSweep(ss, func(int, int64) string { return "tree" }, false)
	fails := 0
	for _, a := range bad.autoRows() {
		if !a.Pass {
			fails++
		}
	}
	if fails != 3 {
		t.Errorf("always-tree auto: %d failures, want 3 (sizes 4, 8, 16)", fails)
	}
	var md bytes.Buffer
	if err := r.writeMarkdown(&md); err != nil || !strings.Contains(md.String(), "| 2 | tie | 32 – 32 | 1 | 3.0% | 3.0% |") {
		t.Errorf("markdown:\n%s", md.String())
	}
}

// With auto timed directly, a slow auto run of the right plan and a wrong
// choice are told apart by the forced runs.
func TestSweepAutoMeasuredChoice(t *testing.T) {
	ring := map[int64]float64{4: 10, 8: 10, 16: 20}
	tree := map[int64]float64{4: 12, 8: 12, 16: 10}
	// auto: at 4 it runs the ring's plan in 10.2 (within 5%); at 8 the
	// ring's plan again but timed at 11 (10% slower: noise, the choice is
	// right); at 16 it picks the ring (twice the tree's time: wrong).
	autoT := map[int64]float64{4: 10.2, 8: 11, 16: 20}
	ss := append(synthSamples("A", 3, "ring", ring, 2), synthSamples("A", 3, "tree", tree, 2)...)
	ss = append(ss, synthSamples("A", 3, "auto", autoT, 2)...)
	r := analyseSweep(ss, func(int, int64) string { return "ring" }, false)
	type want struct {
		pass, choicePass bool
		excess, choice   float64
	}
	wants := map[int64]want{4: {true, true, 0.02, 0}, 8: {false, true, 0.1, 0}, 16: {false, false, 1, 1}}
	rows := r.autoRows()
	if len(rows) != 3 {
		t.Fatalf("auto rows %+v", rows)
	}
	for _, a := range rows {
		w := wants[a.Bytes]
		if !a.Measured || !a.ChoiceTimed || a.Pass != w.pass || a.ChoicePass != w.choicePass ||
			!approx(a.Excess, w.excess) || !approx(a.ChoiceExcess, w.choice) {
			t.Errorf("%d bytes: %+v, want %+v", a.Bytes, a, w)
		}
	}
	var out bytes.Buffer
	r.writeAutoCheck(&out)
	for _, s := range []string{
		"at 1 of 3 sizes",
		"within 5% at 2 of 3 sizes",
		"- wrong choice at N=3 16: ring, 100.0% slower than tree",
		"- N=3 8: auto ring, best ring, 10.0% slower; choice ok (forced ring +0.0%)",
		"- N=3 16: auto ring, best tree, 100.0% slower; choice wrong (forced ring +100.0%)",
	} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("auto check lacks %q:\n%s", s, out.String())
		}
	}
}

func TestReadSweepCSVsPools(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for i, n := range []int{2, 3} {
		var buf bytes.Buffer
		if err := writeSweepCSV(&buf, synthSamples("A", n, "ring", map[int64]float64{64: float64(10 * (i + 1))}, 2)); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, fmt.Sprintf("raw%d.csv", i))
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	one, err := readSweepCSVs(paths[:1])
	if err != nil || len(one) != 4 || one[0].Run != "A" {
		t.Fatalf("one file: %d samples, err %v, %+v", len(one), err, one)
	}
	both, err := readSweepCSVs(paths)
	if err != nil || len(both) != 8 {
		t.Fatalf("two files: %d samples, err %v", len(both), err)
	}
	runs := map[string]int{}
	for _, s := range both {
		runs[fmt.Sprintf("%s/%d", s.Run, s.N)]++
	}
	if runs["1:A/2"] != 4 || runs["2:A/3"] != 4 {
		t.Errorf("runs %v, want 1:A (N=2) and 2:A (N=3), 4 samples each", runs)
	}
	if _, err := readSweepCSVs([]string{paths[0], filepath.Join(dir, "missing.csv")}); err == nil {
		t.Error("a missing file: no error")
	}
}

func approx(a, b float64) bool { d := a - b; return d < 1e-9 && d > -1e-9 }

func TestSweepCSVRoundTrip(t *testing.T) {
	ss := synthSamples("B", 3, "tree", map[int64]float64{1024: 12.5}, 2)
	ss[0].Wrong = -1
	var buf bytes.Buffer
	if err := writeSweepCSV(&buf, ss); err != nil {
		t.Fatal(err)
	}
	got, err := readSweepCSV(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ss) || got[0].Run != "B" || got[0].N != 3 || got[0].Wrong != -1 || got[1].InPlace != ss[1].InPlace || got[0].Times[2] != 12.5 {
		t.Errorf("round trip: %+v", got)
	}
	if _, err := readSweepCSV(strings.NewReader("a,b\n")); err == nil {
		t.Error("bad header accepted")
	}
}

func TestSweepGroupsCV(t *testing.T) {
	ss := []sweepSample{
		{Run: "A", Seq: 1, N: 2, Algo: "ring", Bytes: 8, Cycle: 0, Times: []float64{10, 10, 10}},
		{Run: "A", Seq: 1, N: 2, Algo: "ring", Bytes: 8, Cycle: 1, Times: []float64{30, 30, 30}},
	}
	g := sweepGroups(ss)
	if len(g) != 1 || g[0].Cycles != 2 || !approx(g[0].CV, 0.5) || g[0].Median != 20 {
		t.Errorf("groups %+v (want CV 0.5: cycle medians 10 and 30)", g)
	}
}

func TestSweepPNG(t *testing.T) {
	ss := append(synthSamples("A", 2, "ring", map[int64]float64{4: 10, 64: 11, 1024: 20}, 1),
		synthSamples("A", 2, "tree", map[int64]float64{4: 12, 64: 11, 1024: 18}, 1)...)
	r := analyseSweep(ss, func(int, int64) string { return "ring" }, false)
	var buf bytes.Buffer
	if err := r.writePNG(&buf); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != plotW || b.Dy() < plotPanelH {
		t.Errorf("image %v", b)
	}
}

func TestFmtBytes(t *testing.T) {
	for b, want := range map[int64]string{4: "4", 1024: "1K", 1536: "1536", 64 << 20: "64M", 1 << 30: "1G"} {
		if got := fmtBytes(b); got != want {
			t.Errorf("fmtBytes(%d) = %q, want %q", b, got, want)
		}
	}
}

// Each placement is judged on its own rows: here the direct allreduce
// loses out of place and wins in place, and the markdown shows both.
func TestSweepJudgesEachPlacement(t *testing.T) {
	var ss []sweepSample
	for _, x := range []struct {
		algo    string
		inPlace bool
		us      float64
	}{{"ring", false, 10}, {"direct", false, 20}, {"ring", true, 9}, {"direct", true, 4}} {
		for c := 0; c < 3; c++ {
			ss = append(ss, sweepSample{Run: "A", Seq: 1, N: 3, Algo: x.algo, Bytes: 1 << 20, Cycle: c, InPlace: x.inPlace, Times: []float64{x.us, x.us, x.us}})
		}
	}
	ss[0].Wrong = 2 // out of place; both reports count it
	auto := func(inPlace bool) sweepAutoFunc {
		return func(int, int64) string { return map[bool]string{false: "ring", true: "direct"}[inPlace] }
	}
	out, in := analyseSweep(ss, auto(false), false), analyseSweep(ss, auto(true), true)
	for _, c := range []struct {
		r      *sweepReport
		winner string
		best   float64
	}{{out, "ring", 10}, {in, "direct", 4}} {
		w, best, _, ok := c.r.verdict(3, 1<<20)
		require.True(t, ok)
		require.Equal(t, c.winner, w, c.r.placement())
		require.Equal(t, c.best, best, c.r.placement())
		rows := c.r.autoRows()
		require.Len(t, rows, 1)
		require.True(t, rows[0].Pass, c.r.placement())
		require.Equal(t, int64(2), c.r.wrong)
	}
	out.placed = in
	var md bytes.Buffer
	require.NoError(t, out.writeMarkdown(&md))
	for _, s := range []string{
		"# crossover intervals, out of place", "| 3 | ring | 1M – 1M | 1 | 100.0% | 100.0% |",
		"# crossover intervals, in place", "| 3 | direct | 1M – 1M | 1 | 125.0% | 125.0% |",
		"# auto check, in place: auto within 5% of the best forced algorithm at 1 of 1 sizes",
	} {
		require.Contains(t, md.String(), s)
	}
}

// Auto rows carry the algorithm autotuning ran; it survives raw.csv,
// files without the column still read, and the report's auto choice is
// the recorded one (most frequent), the model's where none is recorded.
func TestSweepMeasuredChoice(t *testing.T) {
	ss := synthSamples("A", 3, "auto", map[int64]float64{64: 10, 128: 12}, 3)
	for i := range ss {
		switch {
		case ss[i].Bytes == 64 && ss[i].InPlace:
			ss[i].Chose = "ring"
		case ss[i].Bytes == 64:
			ss[i].Chose = []string{"hd", "hd", "ring"}[ss[i].Cycle]
		}
	}
	var buf bytes.Buffer
	if err := writeSweepCSV(&buf, ss); err != nil {
		t.Fatal(err)
	}
	back, err := readSweepCSV(bytes.NewReader(buf.Bytes()))
	if err != nil || len(back) != len(ss) {
		t.Fatalf("read back %d samples, err %v", len(back), err)
	}
	for i := range ss {
		if back[i].Chose != ss[i].Chose {
			t.Fatalf("sample %d: chose %q, want %q", i, back[i].Chose, ss[i].Chose)
		}
	}
	model := func(int, int64) string { return "direct" }
	for _, tc := range []struct {
		inPlace bool
		bytes   int64
		want    string
	}{{false, 64, "hd"}, {true, 64, "ring"}, {false, 128, "direct"}, {true, 128, "direct"}} {
		if got := measuredChoice(back, tc.inPlace, model)(3, tc.bytes); got != tc.want {
			t.Errorf("in place %v, %d B: %q, want %q", tc.inPlace, tc.bytes, got, tc.want)
		}
	}
	// Files written before the probe's columns (chose kept) and before
	// the chose column as well.
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	for drop := 2; drop <= 3; drop++ {
		var old []string
		for _, l := range lines {
			f := strings.Split(l, ",")
			old = append(old, strings.Join(f[:len(f)-drop], ","))
		}
		prev, err := readSweepCSV(strings.NewReader(strings.Join(old, "\n") + "\n"))
		require.NoError(t, err, "%d columns dropped", drop)
		require.Len(t, prev, len(ss))
		for i := range prev {
			require.Equal(t, [2]float64{}, prev[i].Handoff)
			if drop == 3 {
				require.Empty(t, prev[i].Chose)
			} else {
				require.Equal(t, ss[i].Chose, prev[i].Chose)
			}
		}
	}
}

// Cycles carry their probes through raw.csv; the report classes each
// group by its probes against the fastest (over 2×: the slow state),
// marks the auto rows whose runs met both states, counts the rest, and
// judges the fast state's cycles alone.
func TestSweepMachineStates(t *testing.T) {
	at := func(ss []sweepSample, before, after float64) []sweepSample {
		for i := range ss {
			ss[i].Handoff = [2]float64{before, after}
		}
		return ss
	}
	// 64 B: ring (fast runs) 10, tree (slow runs) 20: auto's ring is
	// right, but the comparison crosses states. 128 B: ring 10, tree 12,
	// all fast, auto's tree is 20% slower: a wrong choice in one state.
	// 256 B: the tree's run changed state (fast before, slow after).
	// 512 B: auto's tree (a slow run) is 3× the ring (fast): a failure
	// across states.
	ring := at(synthSamples("A", 3, "ring", map[int64]float64{64: 10, 128: 10, 256: 10, 512: 10}, 2), 80, 90)
	tree := at(synthSamples("A", 3, "tree", map[int64]float64{64: 20}, 2), 250, 260)
	tree = append(tree, at(synthSamples("A", 3, "tree", map[int64]float64{512: 30}, 2), 240, 250)...)
	tree = append(tree, at(synthSamples("A", 3, "tree", map[int64]float64{128: 12}, 2), 85, 95)...)
	tree = append(tree, at(synthSamples("A", 3, "tree", map[int64]float64{256: 11}, 2), 100, 270)...)
	for i := range tree {
		tree[i].Seq = 2 + int(tree[i].Bytes)/128 // four runs: seq 2, 3, 4, 6
	}
	ss := append(ring, tree...)
	var buf bytes.Buffer
	require.NoError(t, writeSweepCSV(&buf, ss))
	back, err := readSweepCSV(&buf)
	require.NoError(t, err)
	for i := range ss {
		require.Equal(t, ss[i].Handoff, back[i].Handoff, "sample %d", i)
	}
	choice := map[int64]string{64: "ring", 128: "tree", 256: "ring", 512: "tree"}
	r := analyseSweepStates(back, func(_ int, b int64) string { return choice[b] }, false)
	require.Equal(t, 80.0, r.fastestProbe)
	require.Equal(t, stateFast, r.points[3]["ring"][64].States)
	require.Equal(t, stateSlow, r.points[3]["tree"][64].States)
	require.Equal(t, stateFast|stateSlow, r.points[3]["tree"][256].States)
	crossed := map[int64]bool{}
	for _, a := range r.autoRows() {
		crossed[a.Bytes] = a.Crossed
	}
	require.Equal(t, map[int64]bool{64: true, 128: false, 256: true, 512: true}, crossed)
	var out bytes.Buffer
	r.writeAutoCheck(&out)
	for _, s := range []string{
		"auto within 5% of the best forced algorithm at 2 of 4 sizes",
		"- N=3 128: auto tree, best ring, 20.0% slower\n",
		"- N=3 512: auto tree, best ring, 200.0% slower (runs in both machine states)\n",
		"Machine state (`gotree handoff`'s probe before and after each size of each run: 512 KiB from one CPU to another): 80–270 µs; of 8 groups, 2 met only the slow state (a probe over 2× the fastest) and 1 changed state.",
		"Sizes whose runs all met one state: 1 of 4; auto within 5% at 0 of them.\n",
		// The fast state's cycles alone: the tree was measured fast at
		// 128 B only.
		"The fast state alone (the cycles whose probes both found it): auto within 5% at 0 of 1 sizes.\n",
		"- fast state, N=3 128: auto tree, best ring, 20.0% slower\n",
	} {
		require.Contains(t, out.String(), s)
	}
	var groups bytes.Buffer
	require.NoError(t, r.writeGroupsCSV(&groups))
	require.Contains(t, groups.String(), "A,2,3,tree,64,out,2,3,20.0,20.0,0.0000,")
	require.Contains(t, groups.String(), ",0,slow\n")
	require.Contains(t, groups.String(), ",0,both\n")
	// Without probes (older files) nothing is said.
	out.Reset()
	analyseSweep(synthSamples("A", 3, "ring", map[int64]float64{64: 10}, 2), func(int, int64) string { return "ring" }, false).writeAutoCheck(&out)
	require.NotContains(t, out.String(), "Machine state")
}

// Autotuning decides in the state its exploration meets: a choice that
// is right in the slow state (the tree, where the ring slows 4×) fails
// against forced runs pooled over both states, and each state's cycles
// judged alone say so.
func TestSweepStateAlone(t *testing.T) {
	at := func(ss []sweepSample, seq int, before, after float64) []sweepSample {
		for i := range ss {
			ss[i].Seq, ss[i].Handoff = seq, [2]float64{before, after}
		}
		return ss
	}
	times := func(us float64) map[int64]float64 { return map[int64]float64{1024: us} }
	var ss []sweepSample
	ss = append(ss, at(synthSamples("A", 3, "ring", times(10), 2), 1, 80, 90)...)
	ss = append(ss, at(synthSamples("A", 3, "ring", times(40), 2), 2, 250, 260)...)
	ss = append(ss, at(synthSamples("A", 3, "tree", times(15), 2), 3, 85, 80)...)
	ss = append(ss, at(synthSamples("A", 3, "tree", times(25), 2), 4, 240, 250)...)
	ss = append(ss, at(synthSamples("A", 3, "auto", times(25), 2), 5, 255, 250)...)
	r := analyseSweepStates(ss, func(int, int64) string { return "tree" }, false)
	require.NotNil(t, r.fast)
	require.NotNil(t, r.slow)
	var out bytes.Buffer
	r.writeAutoCheck(&out)
	for _, want := range []string{
		// pooled: ring 10,10,40,40 → 25; tree 15,15,25,25 → 20; auto 25
		"auto within 5% of the best forced algorithm at 0 of 1 sizes",
		"The fast state alone (the cycles whose probes both found it): auto within 5% at 0 of 1 sizes.\n", // auto never ran fast: its forced tree judged
		"- fast state, N=3 1K: auto tree, best ring, 50.0% slower\n",
		"The slow state alone (the cycles whose probes both found it): auto within 5% at 1 of 1 sizes, the choice alone at 1 of 1.\n",
	} {
		require.Contains(t, out.String(), want)
	}
	require.NotContains(t, out.String(), "- slow state")
}

// TestMain lets this test binary serve as the sweep's rank processes:
// benchLaunch starts os.Executable() with the spec in the environment.
func TestMain(m *testing.M) {
	if os.Getenv(envBenchSpec) != "" {
		os.Exit(benchChild(os.Stdout, os.Stderr))
	}
	if args := strings.Fields(os.Getenv(envTestCLIArgs)); len(args) > 0 {
		os.Exit(commands[args[0]].run(args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// envTestCLIArgs has TestMain run a gotree command ("sweep -join ...")
// instead of the tests: the ranks of TestSweepJoin and TestPerfJoin.
const envTestCLIArgs = "GOTREE_TEST_CLI_ARGS"

// joinRanks starts ranks of a gotree command as a launcher would start
// them (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT on a free port of this
// host), each with a host id of its own so that they talk over TCP, as
// across namespaces. cli[r] is rank r's command line ("sweep -join ...");
// outs[r] gets its output.
func joinRanks(t *testing.T, cli []string, outs []bytes.Buffer) []*exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	cmds := make([]*exec.Cmd, len(cli))
	for r := range cmds {
		c := exec.Command(self)
		c.Env = append(os.Environ(), envTestCLIArgs+"="+cli[r], fmt.Sprintf("RANK=%d", r), fmt.Sprintf("WORLD_SIZE=%d", len(cli)),
			"MASTER_ADDR=127.0.0.1", fmt.Sprintf("MASTER_PORT=%d", port), fmt.Sprintf("GOTREE_HOST_ID=join-%d", r))
		c.Stdout, c.Stderr = &outs[r], &outs[r]
		require.NoError(t, c.Start())
		cmds[r] = c
		t.Cleanup(func() {
			_ = c.Process.Kill()
			_ = c.Wait()
		})
	}
	return cmds
}

// -join: three ranks; rank 0 writes the paired report of both passes. A
// rank started with other flags than rank 0's fails at once, naming both.
func TestSweepJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	dir := t.TempDir()
	const n = 3
	args := "sweep -join -b 1K -e 16K -algos ring,tree,auto -cycles 2 -iters 2 -w 1 -timeout 60s -out " + dir
	outs := make([]bytes.Buffer, n)
	for r, c := range joinRanks(t, []string{args, args, args}, outs) {
		require.NoError(t, c.Wait(), "rank %d:\n%s", r, outs[r].String())
	}
	require.Contains(t, outs[0].String(), "# run A  N=3 ring+tree+auto")
	require.Contains(t, outs[0].String(), "# run B  N=3 auto+tree+ring")
	require.NotContains(t, outs[1].String(), "# run")
	f, err := os.Open(filepath.Join(dir, "raw.csv"))
	require.NoError(t, err)
	defer f.Close()
	ss, err := readSweepCSV(f)
	require.NoError(t, err)
	require.Len(t, ss, 2*3*5*2*2) // 2 passes × 3 algorithms × 5 sizes × 2 cycles × 2 placements
	runs := map[string]int{}
	for _, s := range ss {
		runs[s.Run]++
		require.Equal(t, n, s.N)
		require.True(t, s.Cycle != 0 || s.Wrong == 0, "%+v", s)
		require.Equal(t, s.Algo == "auto", s.Chose != "", "%+v", s)
	}
	require.Equal(t, map[string]int{"A": 60, "B": 60}, runs)
	md, err := os.ReadFile(filepath.Join(dir, "crossover.md"))
	require.NoError(t, err)
	require.Contains(t, string(md), "Paired sign test")

	outs = make([]bytes.Buffer, 2)
	cmds := joinRanks(t, []string{args, strings.Replace(args, "-cycles 2", "-cycles 3", 1)}, outs)
	require.Error(t, cmds[1].Wait())
	for _, want := range []string{"rank 1 was started for a different run than rank 0", "-cycles 2", "-cycles 3"} {
		require.Contains(t, outs[1].String(), want)
	}

	// Without the launcher's variables it says which are missing.
	for _, v := range []string{"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"} {
		t.Setenv(v, "")
	}
	var out, errb bytes.Buffer
	require.Equal(t, 1, runSweep([]string{"-join", "-out", t.TempDir()}, &out, &errb))
	require.Contains(t, errb.String(), "RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT must all be set")
}

// perf's join: two ranks with the same flags run and agree; a rank with
// other iterations fails at once instead of waiting for calls that never
// come.
func TestPerfJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	args := "perf -b 1K -e 4K -f 2 -n 3 -w 1 --timeout 60s"
	outs := make([]bytes.Buffer, 2)
	for r, c := range joinRanks(t, []string{args, args}, outs) {
		require.NoError(t, c.Wait(), "rank %d:\n%s", r, outs[r].String())
	}
	require.Contains(t, outs[0].String(), "# Out of bounds values : 0 OK")

	outs = make([]bytes.Buffer, 2)
	cmds := joinRanks(t, []string{args, strings.Replace(args, "-n 3", "-n 4", 1)}, outs)
	require.Error(t, cmds[1].Wait())
	for _, want := range []string{"rank 1 was started for a different run than rank 0", "-n 3", "-n 4"} {
		require.Contains(t, outs[1].String(), want)
	}
}

// A small sweep end to end: real ranks in child processes, mirrored runs,
// every row checked, the probes recorded (where this machine has two
// CPUs) and reported: around each size from sweepProbeFrom, around the
// smaller ones together.
func TestSweepEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := runSweep([]string{"-n", "2,3", "-b", "4", "-e", "512K", "-algos", "ring,auto", "-cycles", "2", "-iters", "3", "-w", "1", "-remeasure", "0", "-timeout", "60s", "-out", dir}, &out, &errb)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	f, err := os.Open(filepath.Join(dir, "raw.csv"))
	require.NoError(t, err)
	defer f.Close()
	ss, err := readSweepCSV(f)
	require.NoError(t, err)
	// 2 world sizes × 2 algorithms × 2 passes × 18 sizes × 2 cycles × 2 placements.
	require.Len(t, ss, 2*2*2*18*2*2)
	var set unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &set))
	probed := set.Count() >= 2
	for _, s := range ss {
		if s.Cycle == 0 {
			require.Equal(t, int64(0), s.Wrong, "%+v", s)
		}
		if s.Algo == "auto" {
			require.NotEmpty(t, s.Chose, "%+v", s)
		}
		require.Equal(t, probed, s.Handoff[0] > 0 && s.Handoff[1] > 0, "%+v", s)
	}
	// Below sweepProbeFrom the sizes of a run share their probes; from
	// it on, a size's before-probe is the previous size's after-probe.
	for i := 1; i < len(ss); i++ {
		a, b := ss[i-1], ss[i]
		switch {
		case a.Seq != b.Seq || a.Bytes == b.Bytes:
		case b.Bytes < sweepProbeFrom:
			require.Equal(t, a.Handoff, b.Handoff, "%d and %d bytes", a.Bytes, b.Bytes)
		default:
			require.Equal(t, a.Handoff[1], b.Handoff[0], "%d and %d bytes", a.Bytes, b.Bytes)
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "crossover.md"))
	require.NoError(t, err)
	require.Contains(t, string(md), "# auto check, out of place")
	require.Equal(t, probed, strings.Contains(string(md), "Machine state (`gotree handoff`'s probe"))

	// Paired: ring and auto in the same processes (auto on two
	// communicators, one per placement); the report runs the sign test.
	dir = t.TempDir()
	out.Reset()
	errb.Reset()
	code = runSweep([]string{"-paired", "-n", "3", "-b", "1K", "-e", "64K", "-algos", "ring,auto", "-cycles", "2", "-iters", "2", "-w", "1", "-remeasure", "0", "-timeout", "60s", "-out", dir}, &out, &errb)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	f2, err := os.Open(filepath.Join(dir, "raw.csv"))
	require.NoError(t, err)
	defer f2.Close()
	ss, err = readSweepCSV(f2)
	require.NoError(t, err)
	require.Len(t, ss, 2*7*2*2*2) // 2 algorithms × 7 sizes × 2 passes × 2 cycles × 2 placements
	for _, s := range ss {
		require.True(t, s.Cycle != 0 || s.Wrong == 0, "%+v", s)
		require.Equal(t, s.Algo == "auto", s.Chose != "", "%+v", s)
	}
	md, err = os.ReadFile(filepath.Join(dir, "crossover.md"))
	require.NoError(t, err)
	require.Contains(t, string(md), "Paired sign test")
}

func TestBinomialTail(t *testing.T) {
	for _, tc := range []struct {
		n, k int
		want float64
	}{{20, 20, math.Pow(2, -20)}, {20, 0, 1}, {4, 3, 5.0 / 16}, {4, 5, 0}, {1, 1, 0.5}, {30, 15, 0.5 + 0.5*155117520/math.Pow(2, 30)}} {
		require.InDelta(t, tc.want, binomialTail(tc.n, tc.k), 1e-12, "n=%d k=%d", tc.n, tc.k)
	}
}

// The paired sign test pairs auto's cycles with the best forced
// algorithm's where the same processes timed both: a choice 10% slower
// in every cycle is significant; a median 6% slower from 12 of 20 cycles
// is not (p = 0.25), though it fails the plain 5% rule; cycles from
// different process sets are not paired.
func TestSweepPairedSignTest(t *testing.T) {
	const cycles = 20
	mk := func(algo string, seq int, bytes int64, time func(c int) float64) []sweepSample {
		var out []sweepSample
		for c := range cycles {
			x := time(c)
			out = append(out, sweepSample{Run: "A", Seq: seq, N: 2, Algo: algo, Bytes: bytes, Cycle: c, Wrong: 0, Times: []float64{x, x, x}})
		}
		return out
	}
	hd := func(c int) float64 { return 100 + float64(c%3) } // the best, with some noise
	var ss []sweepSample
	for _, b := range []int64{64, 128, 256} {
		ss = append(ss, mk("hd", 1, b, hd)...)
		ss = append(ss, mk("ring", 1, b, func(c int) float64 { return 2 * hd(c) })...)
	}
	ss = append(ss, mk("auto", 1, 64, func(c int) float64 { return 1.10 * hd(c) })...)
	ss = append(ss, mk("auto", 1, 128, func(c int) float64 {
		if c%5 < 3 { // 12 of 20
			return 1.07 * hd(c)
		}
		return hd(c)
	})...)
	ss = append(ss, mk("auto", 2, 256, func(c int) float64 { return 1.10 * hd(c) })...) // another process set
	r := analyseSweep(ss, func(int, int64) string { return "hd" }, false)
	rows := map[int64]autoRow{}
	for _, a := range r.autoRows() {
		rows[a.Bytes] = a
	}
	require.Len(t, rows, 3)
	a := rows[64]
	require.True(t, a.Tested)
	require.Equal(t, [2]int{20, 20}, [2]int{a.Slower, a.Pairs})
	require.InDelta(t, math.Pow(2, -20), a.SignP, 1e-15)
	require.True(t, a.Significant())
	a = rows[128]
	require.False(t, a.Pass, "median 7%% over: fails the plain rule")
	require.Equal(t, [2]int{12, 20}, [2]int{a.Slower, a.Pairs})
	require.InDelta(t, 0.2517, a.SignP, 1e-4)
	require.False(t, a.Significant())
	require.False(t, rows[256].Tested, "one process set per algorithm: nothing to pair")
	var buf bytes.Buffer
	r.writeAutoCheck(&buf)
	out := buf.String()
	require.Contains(t, out, "more than 5% slower at p < 0.01 at 1 of 2 sizes tested; within 5%, or not shown slower, at 1 of 3 sizes")
	require.Contains(t, out, "- N=2 64: auto hd, best hd: 20 of 20 pairs more than 5% slower (p = 9.5e-07); medians 10.0% apart")
}

// The settings in front of a report's command line read back in a shell
// as they were set: plain values as they are, the others quoted.
func TestEnvWords(t *testing.T) {
	env := map[string]string{
		"GOTREE_ALGO":        "allreduce:tree;allgather:ring",
		"GOTREE_TUNING_FILE": "/tmp/it's here.json",
		"GOTREE_BUFFSIZE":    "262144",
		"GOTREE_PERF_RANK":   "1",
	}
	got := envWords(func(k string) string { return env[k] })
	require.Equal(t, `GOTREE_ALGO='allreduce:tree;allgather:ring' GOTREE_BUFFSIZE=262144 GOTREE_TUNING_FILE='/tmp/it'\''s here.json' `, got)
	require.Empty(t, envWords(func(string) string { return "" }))
}

// A size whose forced runs began 2.5× slower for most algorithms in their
// first two cycles is reported as decided in a slow stretch; one slow
// first cycle alone, or one algorithm alone, is not.
func TestSweepStartStretch(t *testing.T) {
	const cycles = 12
	mk := func(algo string, bytes int64, time func(c int) float64) []sweepSample {
		var out []sweepSample
		for c := range cycles {
			x := time(c)
			out = append(out, sweepSample{Run: "A", Seq: 1, N: 3, Algo: algo, Bytes: bytes, Cycle: c, Times: []float64{x, x, x}})
		}
		return out
	}
	slowFirst := func(k int, base float64) func(c int) float64 {
		return func(c int) float64 {
			if c < k {
				return 2.5 * base
			}
			return base + float64(c%2)
		}
	}
	var ss []sweepSample
	// 64 B: ring and tree slow for two cycles, direct not: flagged (median
	// of 2.5, 2.5, 1); auto kept direct, slower than the ring even then.
	ss = append(ss, mk("ring", 64, slowFirst(2, 100))...)
	ss = append(ss, mk("tree", 64, slowFirst(2, 150))...)
	ss = append(ss, mk("direct", 64, slowFirst(0, 300))...)
	ss = append(ss, mk("auto", 64, slowFirst(0, 300))...) // kept direct
	// 128 B: only the first cycle slow: not flagged.
	ss = append(ss, mk("ring", 128, slowFirst(1, 100))...)
	ss = append(ss, mk("tree", 128, slowFirst(1, 150))...)
	ss = append(ss, mk("direct", 128, slowFirst(0, 300))...)
	ss = append(ss, mk("auto", 128, slowFirst(0, 300))...)
	// 256 B: one algorithm of three slow for two cycles: not flagged.
	ss = append(ss, mk("ring", 256, slowFirst(2, 100))...)
	ss = append(ss, mk("tree", 256, slowFirst(0, 150))...)
	ss = append(ss, mk("direct", 256, slowFirst(0, 300))...)
	ss = append(ss, mk("auto", 256, slowFirst(0, 300))...)
	r := analyseSweep(ss, func(int, int64) string { return "direct" }, false)
	run, f := r.startStretch(3, 64)
	require.Equal(t, "A", run)
	require.InDelta(t, 250.0/101, f, 1e-9, "ring 250/101, tree 375/151, direct 300/300.5: the median")
	_, f = r.startStretch(3, 128)
	require.Less(t, f, sweepStretchFactor)
	_, f = r.startStretch(3, 256)
	require.Less(t, f, sweepStretchFactor)
	var buf bytes.Buffer
	r.writeAutoCheck(&buf)
	out := buf.String()
	require.Contains(t, out, "- N=3 64: auto direct, best ring: 12 of 12 pairs more than 5% slower")
	require.Contains(t, out, "apart; run A began in a slow stretch (the forced algorithms' first cycles 2.5× their medians), where auto decided\n")
	require.Equal(t, 3, strings.Count(out, "slow stretch"), "the sign test, the wrong choice and the failure of 64 B only:\n%s", out)
}
