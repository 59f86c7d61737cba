package algorithms

import "fmt"

func ExampleDtree() {
	for r := 0; r < 4; r++ {
		t0, t1 := Dtree(4, r)
		fmt.Printf("rank %d: tree0 up %2d down %2d %2d | tree1 up %2d down %2d %2d\n", r, t0.Up, t0.Down0, t0.Down1, t1.Up, t1.Down0, t1.Down1)
	}
	// Output:
	// rank 0: tree0 up -1 down -1  2 | tree1 up  1 down -1 -1
	// rank 1: tree0 up  2 down -1 -1 | tree1 up  3 down  2  0
	// rank 2: tree0 up  0 down  1  3 | tree1 up  1 down -1 -1
	// rank 3: tree0 up  2 down -1 -1 | tree1 up -1 down -1  1
}

func ExampleBuildPlan() {
	g, err := BuildGraph(UniformLayout(1, 2, 1, TreePattern))
	if err != nil {
		panic(err)
	}
	p, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Algo: Ring, Proto: Simple, Count: 8, DType: Int32, Op: Sum, ChunkBytes: 16})
	if err != nil {
		panic(err)
	}
	fmt.Print(p)
	// Output:
	// plan allreduce ring nranks=2 count=8 dtype=int32 op=sum root=0 proto=Simple channels=1
	// rank 0
	//   channel 0
	//     stream 0
	//       Send               to 1 src in[4] n=4
	//       RecvReduceCopySend from 1 to 1 src in[0] dst out[0] n=4
	//       Recv               from 1 dst out[4] n=4
	// rank 1
	//   channel 0
	//     stream 0
	//       Send               to 0 src in[0] n=4
	//       RecvReduceCopySend from 0 to 0 src in[4] dst out[4] n=4
	//       Recv               from 0 dst out[0] n=4
}
