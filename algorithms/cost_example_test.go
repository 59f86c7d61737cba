package algorithms_test

import (
	"fmt"

	"github.com/gotree/gotree/algorithms"
)

// The cost model with NCCL's constants: one DGX-like node of 8 GPUs and
// 256 such nodes, small and large allreduces.
func ExampleTuning_Choose() {
	tu := algorithms.DefaultTuning()
	for _, nodes := range []int{1, 256} {
		topo := algorithms.CostTopo{NRanks: 8 * nodes, NNodes: nodes, RanksPerNode: 8,
			Intra: algorithms.NVLink, Inter: algorithms.Net, Channels: 16}
		for _, bytes := range []int64{1 << 10, 1 << 30} {
			p, err := tu.Choose(algorithms.AllReduce, topo, bytes, algorithms.Constraints{})
			if err != nil {
				panic(err)
			}
			fmt.Printf("%4d nodes %10d B: %v/%v on %d channels, %.0f us\n", nodes, bytes, p.Algo, p.Proto, p.Channels, p.TimeUs)
		}
	}
	// Output:
	// 1 nodes       1024 B: ring/LL on 1 channels, 15 us
	//    1 nodes 1073741824 B: ring/Simple on 16 channels, 5757 us
	//  256 nodes       1024 B: tree/LL on 1 channels, 96 us
	//  256 nodes 1073741824 B: tree/Simple on 16 channels, 12520 us
}
