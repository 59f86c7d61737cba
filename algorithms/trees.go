package algorithms

import "fmt"

// This file reproduces NCCL's binary tree (ncclGetBtree) and double binary
// tree (ncclGetDtree) over n positions, exactly: the same parent, the same
// children in the same slots, the same parentChildType. gotree calls them
// with the node count and a node index (trees connect nodes; inside a node
// the ranks form a chain, see BuildGraph), but they are plain functions of
// (n, r) and are exported for the CLI and for tests.

// TreeNode is one position's links in a binary tree over n positions. -1
// means none. ParentChildType says which of the parent's two child slots
// this position occupies (0 or 1); it is -1 for the root.
type TreeNode struct {
	Up, Down0, Down1 int
	ParentChildType  int
}

// lowestBit is NCCL's scan for the lowest set bit of r below n: for r = 0
// (no bit set) it is the smallest power of two that is >= n.
func lowestBit(n, r int) int {
	bit := 1
	for bit < n {
		if bit&r != 0 {
			break
		}
		bit <<= 1
	}
	return bit
}

// Btree returns position r's links in NCCL's binary tree over n positions:
// its parent, its two children and the child slot it occupies in its
// parent (0 if r < up, else 1; -1 for the root). The root is 0 and its only
// child sits in the second slot (down1), as in NCCL. It panics if n < 1 or
// r is not in [0, n).
func Btree(n, r int) (up, down0, down1, parentChildType int) {
	if n < 1 || r < 0 || r >= n {
		panic(fmt.Sprintf("gotree/algorithms: Btree(%d, %d): need n >= 1 and 0 <= r < n", n, r))
	}
	bit := lowestBit(n, r)
	if r == 0 {
		down1 = -1
		if n > 1 {
			down1 = bit >> 1
		}
		return -1, -1, down1, -1
	}
	up = (r ^ bit) | (bit << 1)
	if up >= n {
		up = r ^ bit
	}
	parentChildType = 1
	if r < up {
		parentChildType = 0
	}
	low := bit >> 1
	down0, down1 = -1, -1
	if low != 0 {
		down0 = r - low
		down1 = r + low
	}
	// The second child must exist: retry with ever smaller offsets, exactly
	// as NCCL's loop does (the offset used is the one before halving).
	for down1 >= n {
		if low == 0 {
			down1 = -1
		} else {
			down1 = r + low
		}
		low >>= 1
	}
	return up, down0, down1, parentChildType
}

// BtreeNode is Btree as a TreeNode.
func BtreeNode(n, r int) TreeNode {
	u, d0, d1, t := Btree(n, r)
	return TreeNode{Up: u, Down0: d0, Down1: d1, ParentChildType: t}
}

// Dtree returns position r's links in NCCL's double binary tree over n
// positions. t0 is Btree. t1 is the mirror of Btree when n is even
// (computed at n-1-r, every link x mapped to n-1-x) and the shift of
// Btree when n is odd (computed at (r-1+n)%n, every link x mapped to
// (x+1)%n); its ParentChildType is the one of the mirrored or shifted
// position, as NCCL reports it. For even n no position is interior (has a
// child) in both trees; for odd n > 1 position 0 is. It panics if n < 1
// or r is not in [0, n).
func Dtree(n, r int) (t0, t1 TreeNode) {
	t0 = BtreeNode(n, r)
	if n%2 == 1 {
		s := BtreeNode(n, (r-1+n)%n)
		shift := func(x int) int {
			if x == -1 {
				return -1
			}
			return (x + 1) % n
		}
		t1 = TreeNode{Up: shift(s.Up), Down0: shift(s.Down0), Down1: shift(s.Down1), ParentChildType: s.ParentChildType}
	} else {
		m := BtreeNode(n, n-1-r)
		mirror := func(x int) int {
			if x == -1 {
				return -1
			}
			return n - 1 - x
		}
		t1 = TreeNode{Up: mirror(m.Up), Down0: mirror(m.Down0), Down1: mirror(m.Down1), ParentChildType: m.ParentChildType}
	}
	return t0, t1
}

// DtreeRoots returns the roots of Dtree's two trees over n positions: 0
// and n-1 for even n (mirror), 0 and 1 for odd n > 1 (shift), 0 and 0 for
// n = 1.
func DtreeRoots(n int) (root0, root1 int) {
	if n <= 1 {
		return 0, 0
	}
	if n%2 == 0 {
		return 0, n - 1
	}
	return 0, 1
}
