package algorithms

import (
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
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

// FuzzParseTuning: a tuning file (GOTREE_TUNING_FILE) is user input. Any
// bytes must parse or be refused with an error; what parses must write
// back (MarshalTuning) to a file that parses to the same tuning, and the
// cost model must choose from it an allreduce algorithm with a finite,
// non-negative predicted time or say why it cannot.
func FuzzParseTuning(f *testing.F) {
	def, err := MarshalTuning(DefaultTuning(), nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(def)
	f.Add([]byte(`{"version": 1, "source": "x", "cores": 2, "transports": {"tcp": {"base_us": {"ring": {"Simple": 1}}, "hop_us": {"ring": {"Simple": 20}}, "bus_gbps": {"ring": {"Simple": 0}}}}}`))
	f.Add([]byte(`{"version": 1, "cores": 4, "local": [{"transport": "shm", "ranks_per_node": 3, "bus_gbps": {"tree": {"Simple": 1e300}}, "correction": {"ring": {"Simple": {"7": 0.5}}}}]}`))
	f.Add([]byte(`{"version": 1, "transports": {"shm": {"in_place": {"hd": {"LL": {"23": 2}}}}}}`))
	f.Add([]byte(`{"version": 2}`))
	topos := []CostTopo{
		{NRanks: 4, NNodes: 1, RanksPerNode: 4, Intra: Shm, Inter: TCP, Channels: 2},
		{NRanks: 3, NNodes: 3, RanksPerNode: 1, Intra: Shm, Inter: TCP, Channels: 2},
		{NRanks: 16, NNodes: 2, RanksPerNode: 8, Intra: NVLink, Inter: Net, Channels: 4},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tu, err := ParseTuning(data)
		if err != nil {
			return
		}
		out, err := MarshalTuning(tu, nil, nil)
		if err != nil {
			t.Fatalf("a parsed tuning does not marshal: %v", err)
		}
		again, err := ParseTuning(out)
		if err != nil {
			t.Fatalf("a marshalled tuning does not parse: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(tu, again) {
			t.Fatalf("tuning does not round-trip:\n%+v\n%+v", tu, again)
		}
		for _, topo := range topos {
			for _, bytes := range []int64{4, 1 << 20, 1 << 30} {
				for _, inPlace := range []bool{false, true} {
					p, err := tu.Choose(AllReduce, topo, bytes, Constraints{InPlace: inPlace})
					if err != nil {
						continue
					}
					if !(p.TimeUs >= 0) || math.IsInf(p.TimeUs, 0) {
						t.Fatalf("%+v, %d bytes, in place %v: predicted %v", topo, bytes, inPlace, p)
					}
				}
			}
		}
	})
}

// FuzzAlgoSpec: GOTREE_ALGO and GOTREE_PROTO values in NCCL's syntax. Any
// value must parse or be refused with an error that names the variable;
// what parses allows at least one algorithm (protocol) and none that
// gotree lacks, and CheckSpecs agrees with parsing for every collective.
func FuzzAlgoSpec(f *testing.F) {
	for _, s := range []string{"ring", "^tree", "allreduce:tree;allgather:ring", "Ring, HD", "auto", "", "nvls", "allreduce:^ring,tree,hd,direct,shared,oneshot", ";;:", "LL128", "^simple,ll"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, algo, proto string) {
		ok := true
		// check: what one collective's parse of env=spec gave (set over all).
		check := func(env, spec string, c Collective, set, all uint64, err error) {
			switch {
			case err != nil:
				ok = false
				if !strings.HasPrefix(err.Error(), "gotree: "+env+"=") {
					t.Fatalf("%s=%q: the error does not name the variable: %v", env, spec, err)
				}
			case set == 0 || set&^all != 0:
				t.Fatalf("%s=%q, %v: set %b", env, spec, c, set)
			}
		}
		for c := AllReduce; c <= SendRecv; c++ {
			as, err := ParseAlgoSpec(algo, c)
			check("GOTREE_ALGO", algo, c, uint64(as), uint64(AllAlgos), err)
			ps, err := ParseProtoSpec(proto, c)
			check("GOTREE_PROTO", proto, c, uint64(ps), uint64(AllProtos), err)
		}
		if err := CheckSpecs(algo, proto); (err == nil) != ok {
			t.Fatalf("CheckSpecs(%q, %q) = %v, parsing ok = %v", algo, proto, err, ok)
		}
	})
}
