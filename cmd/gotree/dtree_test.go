package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func dgRun(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

// Worked out by hand from NCCL's rules (nccl-facts.md), not by running
// the code: Btree's root keeps its one child in the second slot, tree1 is
// the mirror for even n and the shift for odd n.
var dgJSONByHand = map[int]string{
	1: `{"nranks":1,"ranks":[{"rank":0,"tree0":[-1,-1,-1],"tree1":[-1,-1,-1]}]}`,
	2: `{"nranks":2,"ranks":[{"rank":0,"tree0":[-1,-1,1],"tree1":[1,-1,-1]},{"rank":1,"tree0":[0,-1,-1],"tree1":[-1,-1,0]}]}`,
	3: `{"nranks":3,"ranks":[{"rank":0,"tree0":[-1,-1,2],"tree1":[1,2,-1]},{"rank":1,"tree0":[2,-1,-1],"tree1":[-1,-1,0]},{"rank":2,"tree0":[0,1,-1],"tree1":[0,-1,-1]}]}`,
	// tree0 0 -> 2 -> {1,3}; tree1 3 -> 1 -> {2,0}.
	4: `{"nranks":4,"ranks":[{"rank":0,"tree0":[-1,-1,2],"tree1":[1,-1,-1]},{"rank":1,"tree0":[2,-1,-1],"tree1":[3,2,0]},{"rank":2,"tree0":[0,1,3],"tree1":[1,-1,-1]},{"rank":3,"tree0":[2,-1,-1],"tree1":[-1,-1,1]}]}`,
	// tree0 0 -> 4 -> 2 -> {1,3}; tree1 1 -> 0 -> 3 -> {2,4}.
	5: `{"nranks":5,"ranks":[{"rank":0,"tree0":[-1,-1,4],"tree1":[1,3,-1]},{"rank":1,"tree0":[2,-1,-1],"tree1":[-1,-1,0]},{"rank":2,"tree0":[4,1,3],"tree1":[3,-1,-1]},{"rank":3,"tree0":[2,-1,-1],"tree1":[0,2,4]},{"rank":4,"tree0":[0,2,-1],"tree1":[3,-1,-1]}]}`,
}

func TestDtreeJSONByHand(t *testing.T) {
	for n, want := range dgJSONByHand {
		code, out, errOut := dgRun(t, "dtree", "--nranks", dgItoa(n), "--json")
		if code != 0 || errOut != "" {
			t.Fatalf("n=%d: exit %d stderr %q", n, code, errOut)
		}
		if out != want+"\n" {
			t.Errorf("n=%d:\n got %s\nwant %s", n, out, want)
		}
	}
}

func dgItoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

type dgJSON struct {
	NRanks int `json:"nranks"`
	Ranks  []struct {
		Rank  int    `json:"rank"`
		Tree0 [3]int `json:"tree0"`
		Tree1 [3]int `json:"tree1"`
	} `json:"ranks"`
}

// TestDtreeJSONProperties checks, for n up to 130, what must hold whatever
// the code: each tree is one tree (one root, parents and children agree,
// everybody reaches the root), the root has its one child in the second
// slot, the roots are 0 and n-1 (even n) or 0 and 1 (odd n), no rank has
// children in both trees for even n while rank 0 does for odd n > 1, and
// the depth is at most log2(n)+1.
func TestDtreeJSONProperties(t *testing.T) {
	for n := 1; n <= 130; n++ {
		code, out, _ := dgRun(t, "dtree", "--json", "--nranks="+dgItoa(n))
		if code != 0 || strings.Count(out, "\n") != 1 {
			t.Fatalf("n=%d: exit %d, %d lines", n, code, strings.Count(out, "\n"))
		}
		var d dgJSON
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if d.NRanks != n || len(d.Ranks) != n {
			t.Fatalf("n=%d: nranks %d, %d entries", n, d.NRanks, len(d.Ranks))
		}
		for k := 0; k < 2; k++ {
			links := make([][3]int, n)
			for i, e := range d.Ranks {
				if e.Rank != i {
					t.Fatalf("n=%d: entry %d is rank %d", n, i, e.Rank)
				}
				links[i] = e.Tree0
				if k == 1 {
					links[i] = e.Tree1
				}
			}
			wantRoot := 0
			if k == 1 && n > 1 {
				wantRoot = n - 1
				if n%2 == 1 {
					wantRoot = 1
				}
			}
			dgCheckBinaryTree(t, n, k, links, wantRoot)
		}
		for _, e := range d.Ranks {
			both := (e.Tree0[1] != -1 || e.Tree0[2] != -1) && (e.Tree1[1] != -1 || e.Tree1[2] != -1)
			if n%2 == 0 && both {
				t.Errorf("n=%d: rank %d has children in both trees", n, e.Rank)
			}
			if n%2 == 1 && n > 1 && e.Rank == 0 && !both {
				t.Errorf("n=%d: rank 0 should have children in both trees", n)
			}
		}
	}
}

func dgCheckBinaryTree(t *testing.T, n, k int, links [][3]int, wantRoot int) {
	t.Helper()
	maxDepth := 1
	for v := n; v > 1; v >>= 1 {
		maxDepth++
	}
	for r, l := range links {
		up := l[0]
		if up == -1 {
			if r != wantRoot {
				t.Errorf("n=%d tree%d: root %d, want %d", n, k, r, wantRoot)
			}
			if l[1] != -1 || (n > 1) != (l[2] != -1) {
				t.Errorf("n=%d tree%d: root links %v, want its one child in the second slot", n, k, l)
			}
			continue
		}
		if up < 0 || up >= n || (links[up][1] != r && links[up][2] != r) {
			t.Errorf("n=%d tree%d: rank %d's up %d does not list it (%v)", n, k, r, up, links[up])
		}
		for _, ch := range l[1:] {
			if ch != -1 && (ch < 0 || ch >= n || links[ch][0] != r) {
				t.Errorf("n=%d tree%d: rank %d's child %d does not name it", n, k, r, ch)
			}
		}
		depth := 0
		for x := r; x != -1; x = links[x][0] {
			if depth > n {
				t.Fatalf("n=%d tree%d: rank %d loops", n, k, r)
			}
			depth++
		}
		if depth-1 > maxDepth {
			t.Errorf("n=%d tree%d: rank %d at depth %d > %d", n, k, r, depth-1, maxDepth)
		}
	}
}

func TestDtreeTable(t *testing.T) {
	code, out, _ := dgRun(t, "dtree", "--nranks", "4")
	want := `double binary tree over 4 ranks: tree0 root 0, tree1 root 3; tree1 is the mirror (n-1-r) of tree0, n even
  rank | tree0:  up down0 down1 role     | tree1:  up down0 down1 role
-------+---------------------------------+--------------------------------
     0 |         -1    -1     2 root     |          1    -1    -1 leaf
     1 |          2    -1    -1 leaf     |          3     2     0 internal
     2 |          0     1     3 internal |          1    -1    -1 leaf
     3 |          2    -1    -1 leaf     |         -1    -1     1 root
no rank has children in both trees
`
	if code != 0 || out != want {
		t.Errorf("exit %d\n got:\n%s\nwant:\n%s", code, out, want)
	}
	code, out, _ = dgRun(t, "dtree", "--nranks", "5")
	if code != 0 || !strings.Contains(out, "shift (r+1) of tree0, n odd") || !strings.Contains(out, "ranks with children in both trees: 0\n") {
		t.Errorf("n=5: exit %d\n%s", code, out)
	}
}

func TestDtreeErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"dtree"}, 2, "--nranks 0: need 1.."},
		{[]string{"dtree", "--nranks", "-3", "--json"}, 2, "--nranks -3"},
		{[]string{"dtree", "--nranks", "4", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"dtree", "--nranks", "x"}, 2, "invalid value"},
		{[]string{"dtree", "-h"}, 0, "usage: gotree dtree"},
	} {
		code, _, errOut := dgRun(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.err) {
			t.Errorf("%v: exit %d stderr %q, want %d and %q", c.args, code, errOut, c.code, c.err)
		}
	}
}
