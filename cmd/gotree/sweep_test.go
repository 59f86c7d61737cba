package main

import (
	"bytes"
	"image/png"
	"strings"
	"testing"
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
	r := analyseSweep(ss, auto)
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
	bad := analyseSweep(ss, func(int, int64) string { return "tree" })
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
	r := analyseSweep(ss, func(int, int64) string { return "ring" })
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
