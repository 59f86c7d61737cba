package pg

import (
	"testing"

	"github.com/gotree/gotree/algorithms"
)

// TestOpTagDistinguishes: calls that differ in any one field the ranks
// must agree on get different tags, over neighbouring values of each
// field (where a weak mix would collide first), and the tag is a pure
// function of its arguments.
func TestOpTagDistinguishes(t *testing.T) {
	type call struct {
		coll  algorithms.Collective
		seq   uint64
		count int64
		dt    algorithms.DType
		op    algorithms.Op
		root  int
	}
	tag := func(c call) uint32 { return opTag(c.coll, c.seq, c.count, c.dt, c.op, c.root) }
	seen := map[uint32]call{}
	add := func(c call) {
		g := tag(c)
		if g != tag(c) {
			t.Fatalf("%+v: tag not deterministic", c)
		}
		if prev, ok := seen[g]; ok && prev != c {
			t.Fatalf("%+v and %+v share tag %#x", prev, c, g)
		}
		seen[g] = c
	}
	base := call{algorithms.AllReduce, 7, 1000, algorithms.Float32, algorithms.Sum, 0}
	for d := int64(-50); d <= 50; d++ {
		c := base
		c.seq = uint64(int64(c.seq) + d + 50)
		add(c)
		c = base
		c.count += d
		add(c)
		c = base
		c.root = int(d + 50)
		add(c)
	}
	for _, coll := range []algorithms.Collective{algorithms.AllReduce, algorithms.Broadcast, algorithms.Reduce, algorithms.AllGather, algorithms.ReduceScatter} {
		for dt := algorithms.DType(0); dt < 8; dt++ {
			for op := algorithms.Op(0); op < 4; op++ {
				add(call{coll, 9, 1 << 20, dt, op, 1})
			}
		}
	}
}
