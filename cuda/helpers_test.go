package cuda

import (
	"bytes"
	"testing"

	"github.com/gotree/gotree/algorithms"
)

// The GPU tests' helpers, checked without a GPU.

func TestFastExpectMatchesOracle(t *testing.T) {
	for _, op := range []algorithms.Op{algorithms.Sum, algorithms.Avg} {
		for _, algo := range []algorithms.Algorithm{algorithms.Ring, algorithms.Tree} {
			n := 4
			g, err := algorithms.BuildGraph(algorithms.UniformLayout(1, n, 2, algorithms.BalancedTree))
			if err != nil {
				t.Fatal(err)
			}
			p, err := algorithms.BuildPlan(g, algorithms.PlanRequest{Coll: algorithms.AllReduce, Algo: algo,
				Proto: algorithms.Simple, Count: 100003, DType: algorithms.Float32, Op: op})
			if err != nil {
				t.Fatal(err)
			}
			inputs := make([][]byte, n)
			for r := range inputs {
				inputs[r] = make([]byte, 4*p.Count)
				smallInts(uint64(r+1), inputs[r])
			}
			want, err := algorithms.RunOracle(p, inputs, false)
			if err != nil {
				t.Fatal(err)
			}
			got := fastExpect(inputs, op)
			for r := range want {
				if !bytes.Equal(got, want[r]) {
					t.Fatalf("%v %v: fastExpect differs from the oracle on rank %d", algo, op, r)
				}
			}
		}
	}
}

func TestPlanTrafficAndSizes(t *testing.T) {
	g, err := algorithms.BuildGraph(algorithms.UniformLayout(1, 4, 1, algorithms.BalancedTree))
	if err != nil {
		t.Fatal(err)
	}
	p, err := algorithms.BuildPlan(g, algorithms.PlanRequest{Coll: algorithms.AllReduce, Algo: algorithms.Ring,
		Proto: algorithms.Simple, Count: 1 << 20, DType: algorithms.Float32})
	if err != nil {
		t.Fatal(err)
	}
	// Ring allreduce per rank of S bytes: read the input once, write the
	// output once, and send/receive 2(n-1)/n S each way: (2 + 4(n-1)/n) S.
	s := int64(4 << 20)
	want := 4 * (2*s + 4*3*s/4)
	if got := planTraffic(p); got != want {
		t.Errorf("planTraffic = %d, want %d", got, want)
	}
	if got := sweepSizes(1 << 30); len(got) != 15 || got[0] != 4 || got[len(got)-1] != 1<<30 {
		t.Errorf("sweepSizes = %v", got)
	}
	if sizeString(1<<30) != "1G" || sizeString(4096) != "4K" || sizeString(4) != "4B" {
		t.Error("sizeString")
	}
}
