package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gotree/gotree/algorithms"
)

// The show output of a small layout, checked line by line: 2 nodes of 2
// ranks, balanced pattern. tree0 over 2 nodes has node 0 as root with node
// 1 as its second child (joined at rank 0, intra[0], for child1 in the
// balanced pattern); tree1 mirrors it.
const dgShow2x2 = `graph: 2 nodes x 2 ranks = 4 ranks, pattern balanced_tree, 2 channels (1 found by the search, each used twice)
  channel c carries tree0 of the double binary tree over nodes, channel c+1 tree1; both have the same ring

channel 0 (search channel 0, tree0)
  ring: 0 -> 1 -> 2 -> 3 -> 0
  tree: root 0, height 2 (* marks an edge between nodes)
    rank  node     up  down             depth  role
       0     0     -1  1/2/-1               0  root
       1     0      0  -1/-1/-1             1  leaf
       2     1      0  3/-1/-1              1  internal
       3     1      2  -1/-1/-1             2  leaf
  0 (root)
  |-- 1
  ` + "`" + `-- 2 *
      ` + "`" + `-- 3

channel 1 (search channel 0, tree1)
  ring: 0 -> 1 -> 2 -> 3 -> 0
  tree: root 2, height 2 (* marks an edge between nodes)
    rank  node     up  down             depth  role
       0     0      2  1/-1/-1              1  internal
       1     0      0  -1/-1/-1             2  leaf
       2     1     -1  3/0/-1               0  root
       3     1      2  -1/-1/-1             1  leaf
  2 (root)
  |-- 3
  ` + "`" + `-- 0 *
      ` + "`" + `-- 1
`

func TestGraphShowGolden(t *testing.T) {
	code, out, errOut := dgRun(t, "graph", "show", "--nodes", "2", "--ranks-per-node", "2")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d stderr %q", code, errOut)
	}
	if out != dgShow2x2 {
		t.Errorf("got:\n%s\nwant:\n%s", out, dgShow2x2)
	}
}

func TestGraphShowLayouts(t *testing.T) {
	for _, c := range []struct {
		nodes, perNode, channels int
		pattern                  string
	}{
		{1, 1, 1, "balanced"}, {1, 4, 2, "split"}, {4, 1, 1, "tree"}, {3, 3, 2, "split"},
		{5, 2, 1, "balanced_tree"}, {8, 8, 4, "tree"}, {2, 3, 1, "ring"},
	} {
		args := []string{"graph", "show", "--nodes", fmt.Sprint(c.nodes), "--ranks-per-node", fmt.Sprint(c.perNode),
			"--channels", fmt.Sprint(c.channels), "--pattern", c.pattern}
		code, out, errOut := dgRun(t, args...)
		if code != 0 || errOut != "" {
			t.Fatalf("%v: exit %d stderr %q", args, code, errOut)
		}
		n := c.nodes * c.perNode
		if got := strings.Count(out, "\nchannel "); got != 2*c.channels {
			t.Errorf("%v: %d channel sections, want %d", args, got, 2*c.channels)
		}
		// Every rank appears once per channel in the table, with one root.
		rows := regexp.MustCompile(`(?m)^ +\d+ +\d+ +-?\d+  \S+ +\d+  (root|internal|leaf)$`).FindAllStringSubmatch(out, -1)
		if len(rows) != n*2*c.channels {
			t.Errorf("%v: %d table rows, want %d", args, len(rows), n*2*c.channels)
		}
		roots := 0
		for _, r := range rows {
			if r[1] == "root" {
				roots++
			}
		}
		if roots != 2*c.channels {
			t.Errorf("%v: %d roots, want one per channel", args, roots)
		}
	}
}

func TestGraphShowErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"graph"}, 2, "usage: gotree graph show"},
		{[]string{"graph", "draw"}, 2, `unknown subcommand "draw"`},
		{[]string{"graph", "show", "--nodes", "2"}, 2, "--ranks-per-node 0"},
		{[]string{"graph", "show", "--nodes", "2", "--ranks-per-node", "2", "--pattern", "star"}, 2, `unknown tree pattern "star"`},
		{[]string{"graph", "show", "--nodes", "2", "--ranks-per-node", "2", "--channels", "0"}, 2, "channels 0"},
		{[]string{"graph", "show", "--nodes", "2", "--ranks-per-node", "2", "x"}, 2, `unexpected argument "x"`},
		{[]string{"graph", "show", "-h"}, 0, "usage: gotree graph show"},
		{[]string{"graph", "validate"}, 2, "need exactly one FILE"},
		{[]string{"graph", "validate", "/nonexistent/log"}, 2, "no such file"},
	} {
		code, _, errOut := dgRun(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.err) {
			t.Errorf("%v: exit %d stderr %q, want %d and %q", c.args, code, errOut, c.code, c.err)
		}
	}
}

// TestGraphShowLogValidates feeds "graph show --log" to "graph validate".
func TestGraphShowLogValidates(t *testing.T) {
	dir := t.TempDir()
	for _, c := range [][]string{
		{"--nodes", "2", "--ranks-per-node", "4"},
		{"--nodes", "3", "--ranks-per-node", "1", "--pattern", "tree", "--channels", "3"},
		{"--nodes", "5", "--ranks-per-node", "3", "--pattern", "split", "--channels", "2"},
	} {
		code, out, _ := dgRun(t, append([]string{"graph", "show", "--log"}, c...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d", c, code)
		}
		log := out[strings.Index(out, "\nTree 0 : ")+1:]
		path := filepath.Join(dir, "show.log")
		if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
			t.Fatal(err)
		}
		code, vout, verr := dgRun(t, "graph", "validate", "--strict", path)
		if code != 0 || verr != "" {
			t.Errorf("%v: validate exit %d stderr %q\n%s", c, code, verr, vout)
		}
		if strings.Contains(vout, "FAIL") || !strings.Contains(vout, "channel 0: OK\n") {
			t.Errorf("%v: %s", c, vout)
		}
	}
}

const dgFixtures = "../../algorithms/testdata/graphlog"

func TestGraphValidateGoodLogs(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(dgFixtures, "good-*.log"))
	if len(files) == 0 {
		t.Fatalf("no good logs in %s", dgFixtures)
	}
	for _, f := range files {
		code, out, errOut := dgRun(t, "graph", "validate", "--strict", f)
		if code != 0 || errOut != "" {
			t.Errorf("%s: exit %d stderr %q\n%s", f, code, errOut, out)
			continue
		}
		g, _, err := algorithms.ParseGraphLog(dgOpen(t, f))
		if err != nil {
			t.Fatal(err)
		}
		var want strings.Builder
		fmt.Fprintf(&want, "graph: %d ranks on %d nodes, %d channels\n", g.NRanks, g.NNodes, g.Channels)
		for c := 0; c < g.Channels; c++ {
			fmt.Fprintf(&want, "channel %d: OK\n", c)
		}
		if out != want.String() {
			t.Errorf("%s:\n got:\n%s\nwant:\n%s", f, out, want.String())
		}
	}
}

func dgOpen(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestGraphValidateBadLogs: each corrupted log must fail, naming on stdout
// the channel and the rank that break the rule, and on stderr the first
// problem with its channel and rank.
func TestGraphValidateBadLogs(t *testing.T) {
	for _, c := range []struct {
		file          string
		channel, rank int
		msg, stderr   string
	}{
		{"bad-cycle.log", 0, 1, "tree has a cycle of up links 1 -> 3 -> 2 -> 1", "channel 0 rank 1: tree has a cycle"},
		{"bad-two-roots.log", 0, 4, "tree has a second root (4 ranks reach root 0, 4 reach this one)", "channel 0 rank 4: tree has a second root"},
		{"bad-parent-child.log", 1, 6, "tree up is 4 but rank 4's down is 5/0/-1", "channel 1 rank 5: tree lists child 6 but rank 6's up is 4"},
		{"bad-broken-ring.log", 1, 5, "ring next is 7 but rank 6 says its prev is 5", "channel 1 rank 5: ring next is 7"},
	} {
		f := filepath.Join(dgFixtures, c.file)
		code, out, errOut := dgRun(t, "graph", "validate", f)
		if code != 1 {
			t.Errorf("%s: exit %d, want 1\n%s", c.file, code, out)
		}
		section := fmt.Sprintf("channel %d: FAIL\n", c.channel)
		i := strings.Index(out, section)
		if i < 0 {
			t.Errorf("%s: no %q in\n%s", c.file, section, out)
			continue
		}
		body := out[i+len(section):]
		if j := strings.Index(body, "\nchannel "); j >= 0 {
			body = body[:j+1]
		}
		if line := fmt.Sprintf("  rank %d: %s\n", c.rank, c.msg); !strings.Contains(body, line) {
			t.Errorf("%s: no %q under %q in\n%s", c.file, line, section, out)
		}
		if !strings.Contains(errOut, c.stderr) || !strings.Contains(errOut, f) {
			t.Errorf("%s: stderr %q, want %q", c.file, errOut, c.stderr)
		}
		other := 1 - c.channel
		if !strings.Contains(out, fmt.Sprintf("channel %d: OK\n", other)) {
			t.Errorf("%s: channel %d should be OK\n%s", c.file, other, out)
		}
	}
}

// TestGraphValidateEditedLogs corrupts a good NCCL-style log by editing its
// text, as a broken run would show it.
func TestGraphValidateEditedLogs(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(dgFixtures, "good-2x4-balanced.log"))
	if err != nil {
		t.Fatal(err)
	}
	good := string(data)
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		edit func(string) string
		want []string // lines that must appear on stdout
		code int
	}{
		{"rank 3 missing", func(s string) string {
			var kept []string
			for _, l := range strings.Split(s, "\n") {
				if !strings.Contains(l, ":1003:2003 ") {
					kept = append(kept, l)
				}
			}
			return strings.Join(kept, "\n")
		}, []string{"channel 0: FAIL\n", "  rank 2: tree lists child 3 but rank 3's up is -1\n",
			"  rank 3: tree has a second root (7 ranks reach root 0, 1 reach this one)\n",
			"  rank 3: tree has a second root (7 ranks reach root 4, 1 reach this one)\n"}, 1},
		{"ring swapped in every copy", func(s string) string {
			s = strings.ReplaceAll(s, "Ring 01 : 1 -> 2 -> 3", "Ring 01 : 1 -> 2 -> 4")
			return strings.ReplaceAll(s, "Ring 01 : 3 -> 4 -> 5", "Ring 01 : 2 -> 4 -> 5")
		}, []string{"channel 0: OK\n", "channel 1: FAIL\n", "  rank 2: ring next is 4 but rank 3 says its prev is 2\n"}, 1},
		{"noise only", func(s string) string {
			return "nothing here\nhost:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
		}, nil, 2},
	} {
		path := filepath.Join(dir, "edited.log")
		if err := os.WriteFile(path, []byte(c.edit(good)), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := dgRun(t, "graph", "validate", path)
		if code != c.code {
			t.Errorf("%s: exit %d, want %d\n%s\n%s", c.name, code, c.code, out, errOut)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: no %q in\n%s", c.name, w, out)
			}
		}
		if c.name == "rank 3 missing" {
			// Its ring comes from rank 0's Channel line, its tree is missing.
			for _, w := range []string{"warning: channel 0: no Ring line for rank 3; taken from the Channel line",
				"warning: channel 1: no Tree or Trees entry for rank 3"} {
				if !strings.Contains(errOut, w) {
					t.Errorf("%s: no %q in stderr\n%s", c.name, w, errOut)
				}
			}
		}
	}
}

func TestGraphValidateWarningsStrict(t *testing.T) {
	// A duplicate that disagrees with the first copy: a warning, and with
	// --strict a failure, though the graph kept is sound.
	log := "Ring 00 : 1 -> 0 -> 1\nRing 00 : 0 -> 1 -> 0\nTrees [0] 1/-1/-1->0->-1\nTrees [0] -1/-1/-1->1->0\nTrees [0] -1/-1/-1->1->-1\n"
	path := filepath.Join(t.TempDir(), "dup.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := dgRun(t, "graph", "validate", path)
	if code != 0 || !strings.Contains(errOut, "warning: line 5: channel 0 rank 1: Trees entry disagrees with line 4") {
		t.Errorf("exit %d stderr %q\n%s", code, errOut, out)
	}
	if code, _, errOut = dgRun(t, "graph", "validate", "--strict", path); code != 1 || !strings.Contains(errOut, "1 warnings (--strict)") {
		t.Errorf("--strict: exit %d stderr %q", code, errOut)
	}
}
