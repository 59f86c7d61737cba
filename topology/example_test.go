package topology_test

import (
	"fmt"
	"os"

	"github.com/gotree/gotree/topology"
)

// Search a 4×V100 box whose GPUs are all joined by two NVLinks for tree
// channels: chains over all four GPUs in several different orders.
func ExampleSearch() {
	s, err := topology.LoadFile("testdata/v100x4-nv2.xml")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	r, err := topology.Search(s, topology.SearchOptions{Pattern: topology.PatternTree})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	fmt.Printf("%d channels of %g GB/s over %s\n", r.Channels, r.SpeedIntra, r.TypeIntra)
	for c, o := range r.Orders[:4] {
		fmt.Println(c, o)
	}
	// Output:
	// 8 channels of 20 GB/s over NVL
	// 0 [0 1 2 3]
	// 1 [1 3 0 2]
	// 2 [2 0 3 1]
	// 3 [3 2 1 0]
}

// The path between two GPUs, the way NCCL classifies it.
func ExampleComputePaths() {
	s, _ := topology.LoadFile("testdata/dgx1-v100.json")
	ps := topology.ComputePaths(s)
	g := s.GPUs()
	for _, pair := range [][2]int{{0, 1}, {0, 3}, {0, 5}} {
		p := ps.Get(g[pair[0]], g[pair[1]])
		fmt.Printf("GPU%d-GPU%d %s %g GB/s\n", pair[0], pair[1], p.Type, p.BW)
	}
	// Output:
	// GPU0-GPU1 NVL 20 GB/s
	// GPU0-GPU3 NVL 40 GB/s
	// GPU0-GPU5 NVB 20 GB/s
}
