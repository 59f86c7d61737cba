package algorithms

import (
	"math/rand/v2"
	"testing"
)

// FuzzPlan builds a graph and a plan from fuzzed parameters and checks that
// the plan passes CheckPlan and that the oracle computes the collective.
// go test ./algorithms/ -run '^$' -fuzz FuzzPlan explores further.
func FuzzPlan(f *testing.F) {
	f.Add(uint64(1), uint8(4), uint8(2), uint8(1), uint8(0), uint8(0), uint16(10), uint16(16), false)
	f.Add(uint64(2), uint8(7), uint8(3), uint8(3), uint8(0), uint8(1), uint16(97), uint16(4), true)
	f.Add(uint64(3), uint8(9), uint8(9), uint8(2), uint8(3), uint8(0), uint16(13), uint16(0), false)
	f.Add(uint64(4), uint8(5), uint8(1), uint8(4), uint8(4), uint8(0), uint16(31), uint16(40), true)
	f.Add(uint64(5), uint8(1), uint8(1), uint8(1), uint8(1), uint8(0), uint16(1), uint16(1), false)
	f.Fuzz(func(t *testing.T, seed uint64, n, nodes, channels, coll, algo uint8, count, chunk uint16, inPlace bool) {
		N := 1 + int(n)%24
		rng := rand.New(rand.NewPCG(seed, 99))
		l := randomLayout(rng, N)
		if nodes > 0 {
			l = UniformLayout(1+int(nodes)%N, 1, 1, Pattern(1+int(seed%4)))
			l.NodeOf = l.NodeOf[:0]
			for r := 0; r < N; r++ {
				l.NodeOf = append(l.NodeOf, r%(1+int(nodes)%N))
			}
		}
		l.Channels = 1 + int(channels)%8
		l.Intra = nil
		g := mustGraph(t, l)
		c := orCase{coll: Collective(int(coll) % 5), ty: orTypes[int(seed>>8)%len(orTypes)], count: int64(count % 600), inPlace: inPlace}
		c.algo = Ring
		if c.coll == AllReduce && algo%2 == 1 {
			c.algo = Tree
		}
		ops := orIntOps
		if c.ty.bits == 0 {
			ops = orFloatOps
		}
		c.op = ops[int(seed>>16)%len(ops)]
		if Supports(c.op, c.ty.dt) != nil {
			c.op = Sum
		}
		c.root = int(seed>>24) % N
		req := PlanRequest{Coll: c.coll, Algo: c.algo, Proto: Protocol(int(seed>>32) % 3), Count: c.count, DType: c.ty.dt, Op: c.op,
			Root: c.root, ChunkBytes: int64(chunk % 2048), KeepChannels: seed%2 == 0, FragmentBytes: int64(seed>>40) % 4096}
		orRun(t, rng, g, req, c)
	})
}
