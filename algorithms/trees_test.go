package algorithms

import (
	"math/bits"
	"reflect"
	"testing"
)

// Hand-computed from NCCL's rules (not from this package's code).
func TestBtreeExplicit(t *testing.T) {
	type row struct{ up, d0, d1, pct int }
	cases := map[int][]row{
		1: {{-1, -1, -1, -1}},
		2: {{-1, -1, 1, -1}, {0, -1, -1, 1}},
		3: {{-1, -1, 2, -1}, {2, -1, -1, 0}, {0, 1, -1, 1}},
		4: {{-1, -1, 2, -1}, {2, -1, -1, 0}, {0, 1, 3, 1}, {2, -1, -1, 1}},
		6: {{-1, -1, 4, -1}, {2, -1, -1, 0}, {4, 1, 3, 0}, {2, -1, -1, 1}, {0, 2, 5, 1}, {4, -1, -1, 1}},
		7: {{-1, -1, 4, -1}, {2, -1, -1, 0}, {4, 1, 3, 0}, {2, -1, -1, 1}, {0, 2, 6, 1}, {6, -1, -1, 0}, {4, 5, -1, 1}},
	}
	for n, rows := range cases {
		for r, want := range rows {
			u, d0, d1, pct := Btree(n, r)
			if (row{u, d0, d1, pct}) != want {
				t.Errorf("Btree(%d,%d) = %d %d %d %d, want %v", n, r, u, d0, d1, pct, want)
			}
		}
	}
}

func TestDtreeFourNodes(t *testing.T) {
	// tree0: 0 -> 2 -> {1,3}; tree1: 3 -> 1 -> {2,0}.
	want0 := []TreeNode{{-1, -1, 2, -1}, {2, -1, -1, 0}, {0, 1, 3, 1}, {2, -1, -1, 1}}
	want1 := []TreeNode{{1, -1, -1, 1}, {3, 2, 0, 1}, {1, -1, -1, 0}, {-1, -1, 1, -1}}
	for r := 0; r < 4; r++ {
		t0, t1 := Dtree(4, r)
		if t0 != want0[r] || t1 != want1[r] {
			t.Errorf("Dtree(4,%d) = %+v %+v, want %+v %+v", r, t0, t1, want0[r], want1[r])
		}
	}
	// Odd: shift. n=3: tree1 is 1 -> 0 -> 2.
	want3 := []TreeNode{{1, 2, -1, 1}, {-1, -1, 0, -1}, {0, -1, -1, 0}}
	for r := 0; r < 3; r++ {
		if _, t1 := Dtree(3, r); t1 != want3[r] {
			t.Errorf("Dtree(3,%d).t1 = %+v, want %+v", r, t1, want3[r])
		}
	}
}

type treeFacts struct {
	root, height int
	interior     map[int]bool
}

// checkBinTree verifies a binary tree given per position and returns facts.
func checkBinTree(t *testing.T, n int, nodes []TreeNode, name string) treeFacts {
	t.Helper()
	f := treeFacts{root: -1, interior: map[int]bool{}}
	edges := 0
	for r, x := range nodes {
		if x.Up == -1 {
			if f.root != -1 {
				t.Fatalf("%s n=%d: two roots %d and %d", name, n, f.root, r)
			}
			f.root = r
			if x.ParentChildType != -1 {
				t.Fatalf("%s n=%d: root %d has parentChildType %d", name, n, r, x.ParentChildType)
			}
			if x.Down0 != -1 {
				t.Fatalf("%s n=%d: root's child is not in the second slot: %+v", name, n, x)
			}
		} else {
			p := nodes[x.Up]
			slot := -1
			if p.Down0 == r {
				slot = 0
			}
			if p.Down1 == r {
				slot = 1
			}
			if slot != x.ParentChildType {
				t.Fatalf("%s n=%d: rank %d says child slot %d of %d, parent has %+v", name, n, r, x.ParentChildType, x.Up, p)
			}
		}
		for _, d := range []int{x.Down0, x.Down1} {
			if d == -1 {
				continue
			}
			if d < 0 || d >= n || nodes[d].Up != r {
				t.Fatalf("%s n=%d: rank %d child %d does not agree", name, n, r, d)
			}
			edges++
			f.interior[r] = true
		}
		depth := 0
		for y := r; nodes[y].Up != -1; y = nodes[y].Up {
			depth++
			if depth > n {
				t.Fatalf("%s n=%d: cycle from %d", name, n, r)
			}
		}
		f.height = max(f.height, depth)
	}
	if edges != n-1 || f.root == -1 {
		t.Fatalf("%s n=%d: %d edges, root %d", name, n, edges, f.root)
	}
	return f
}

func TestDtreeAllSizes(t *testing.T) {
	maxN := 4096
	if testing.Short() {
		maxN = 600
	}
	for n := 1; n <= maxN; n++ {
		t0s, t1s := make([]TreeNode, n), make([]TreeNode, n)
		for r := 0; r < n; r++ {
			t0s[r], t1s[r] = Dtree(n, r)
			if b := BtreeNode(n, r); b != t0s[r] {
				t.Fatalf("tree0 differs from Btree at n=%d r=%d", n, r)
			}
		}
		f0 := checkBinTree(t, n, t0s, "tree0")
		f1 := checkBinTree(t, n, t1s, "tree1")
		r0, r1 := DtreeRoots(n)
		if f0.root != r0 || f1.root != r1 {
			t.Fatalf("n=%d: roots %d/%d, DtreeRoots says %d/%d", n, f0.root, f1.root, r0, r1)
		}
		wantH := 0
		if n > 1 {
			wantH = bits.Len(uint(n - 1)) // ceil(log2 n)
		}
		if f0.height != wantH || f1.height != wantH {
			t.Fatalf("n=%d: heights %d/%d, want %d", n, f0.height, f1.height, wantH)
		}
		for r := range f0.interior {
			if f1.interior[r] {
				if n%2 == 0 {
					t.Fatalf("n=%d even: rank %d interior in both trees", n, r)
				}
			}
		}
		if n%2 == 1 && n > 1 && !(f0.interior[0] && f1.interior[0]) {
			t.Fatalf("n=%d odd: rank 0 not interior in both trees", n)
		}
	}
}

// The seed table.
func TestDtreeSeedTable(t *testing.T) {
	cases := []struct {
		n            int
		construction string
		root0, root1 int
		depth        int
		overlap      []int
	}{
		{1, "trivial", 0, 0, 0, nil},
		{2, "mirror", 0, 1, 1, nil},
		{3, "shift", 0, 1, 2, []int{0}},
		{4, "mirror", 0, 3, 2, nil},
		{5, "shift", 0, 1, 3, []int{0}},
		{8, "mirror", 0, 7, 3, nil},
		{16, "mirror", 0, 15, 4, nil},
	}
	for _, c := range cases {
		t0s, t1s := make([]TreeNode, c.n), make([]TreeNode, c.n)
		for r := 0; r < c.n; r++ {
			t0s[r], t1s[r] = Dtree(c.n, r)
		}
		// Construction: tree1 is the mirror / shift of tree0.
		constr := "trivial"
		if c.n > 1 {
			mirror, shift := true, true
			mapLink := func(x int, f func(int) int) int {
				if x == -1 {
					return -1
				}
				return f(x)
			}
			for r := 0; r < c.n; r++ {
				m := func(x int) int { return c.n - 1 - x }
				s := func(x int) int { return (x + 1) % c.n }
				a, b := t0s[r], t1s[m(r)]
				if b.Up != mapLink(a.Up, m) || b.Down0 != mapLink(a.Down0, m) || b.Down1 != mapLink(a.Down1, m) {
					mirror = false
				}
				b = t1s[s(r)]
				if b.Up != mapLink(a.Up, s) || b.Down0 != mapLink(a.Down0, s) || b.Down1 != mapLink(a.Down1, s) {
					shift = false
				}
			}
			// For n = 2 the mirror and the shift coincide; call it a mirror.
			switch {
			case mirror:
				constr = "mirror"
			case shift:
				constr = "shift"
			default:
				constr = "neither"
			}
		}
		f0 := checkBinTree(t, c.n, t0s, "tree0")
		f1 := checkBinTree(t, c.n, t1s, "tree1")
		var overlap []int
		for r := 0; r < c.n; r++ {
			if f0.interior[r] && f1.interior[r] {
				overlap = append(overlap, r)
			}
		}
		got := []any{constr, f0.root, f1.root, max(f0.height, f1.height), overlap}
		want := []any{c.construction, c.root0, c.root1, c.depth, c.overlap}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("n=%d: got %v, want %v", c.n, got, want)
		}
	}
}

func TestBtreePanicsOnBadArgs(t *testing.T) {
	for _, a := range [][2]int{{0, 0}, {3, 3}, {3, -1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Btree(%d,%d) did not panic", a[0], a[1])
				}
			}()
			Btree(a[0], a[1])
		}()
	}
}
