package algorithms

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// The expected results here are computed independently of the plans and of
// ReduceInto: integers with int64 arithmetic truncated to the type's width,
// float64 with values whose sums and products are exact.

type orType struct {
	dt   DType
	bits uint // integer width; 0 for floats
	sign bool
}

var orTypes = []orType{{Int8, 8, true}, {Uint8, 8, false}, {Int16, 16, true}, {Int32, 32, true}, {Int64, 64, true}, {Float64, 0, true}, {Float32, 0, true}}

// orWrap truncates v to the type's width (sign-extending signed types).
func (ty orType) wrap(v int64) int64 {
	if ty.bits == 0 || ty.bits == 64 {
		return v
	}
	v &= 1<<ty.bits - 1
	if ty.sign && v >= 1<<(ty.bits-1) {
		v -= 1 << ty.bits
	}
	return v
}

func (ty orType) put(b []byte, i int64, v float64) {
	es := int64(ty.dt.Size())
	o := b[i*es:]
	switch ty.dt {
	case Float64:
		binary.LittleEndian.PutUint64(o, math.Float64bits(v))
	case Float32:
		binary.LittleEndian.PutUint32(o, math.Float32bits(float32(v)))
	case Int8, Uint8:
		o[0] = byte(int64(v))
	case Int16:
		binary.LittleEndian.PutUint16(o, uint16(int64(v)))
	case Int32:
		binary.LittleEndian.PutUint32(o, uint32(int64(v)))
	case Int64:
		binary.LittleEndian.PutUint64(o, uint64(int64(v)))
	}
}

func (ty orType) get(b []byte, i int64) float64 {
	es := int64(ty.dt.Size())
	o := b[i*es:]
	switch ty.dt {
	case Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(o))
	case Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(o)))
	case Int8:
		return float64(int8(o[0]))
	case Uint8:
		return float64(o[0])
	case Int16:
		return float64(int16(binary.LittleEndian.Uint16(o)))
	case Int32:
		return float64(int32(binary.LittleEndian.Uint32(o)))
	case Int64:
		return float64(int64(binary.LittleEndian.Uint64(o)))
	}
	return 0
}

// value draws an input element. Floats are powers of two times small signs
// for Prod (exact products), small integers otherwise (exact sums).
func (ty orType) value(rng *rand.Rand, op Op) float64 {
	if ty.bits == 0 {
		if op == Prod {
			return []float64{1, -1, 2, 0.5, -2, -0.5}[rng.IntN(6)]
		}
		return float64(rng.IntN(2001) - 1000)
	}
	if ty.bits == 64 {
		return float64(rng.Int64N(1<<40) - 1<<39) // exact in float64
	}
	v := rng.Int64N(1 << ty.bits)
	return float64(ty.wrap(v))
}

var orIntOps = []Op{Sum, Avg, Prod, Min, Max, BAnd, BOr, BXor, PremulSum}
var orFloatOps = []Op{Sum, Avg, Prod, Min, Max, PremulSum}

// reduce combines the values of every rank.
func (ty orType) reduce(vals []float64, op Op) float64 {
	n := len(vals)
	if ty.bits == 0 {
		acc := vals[0]
		for _, v := range vals[1:] {
			switch op {
			case Sum, Avg, PremulSum:
				acc += v
			case Prod:
				acc *= v
			case Min:
				acc = math.Min(acc, v)
			case Max:
				acc = math.Max(acc, v)
			}
		}
		if op == Avg {
			if ty.dt == Float32 {
				return float64(float32(acc) / float32(n))
			}
			acc /= float64(n)
		}
		return acc
	}
	acc := int64(vals[0])
	for _, fv := range vals[1:] {
		v := int64(fv)
		switch op {
		case Sum, Avg, PremulSum:
			acc += v
		case Prod:
			acc *= v
		case Min:
			acc = min(acc, v)
		case Max:
			acc = max(acc, v)
		case BAnd:
			acc &= v
		case BOr:
			acc |= v
		case BXor:
			acc ^= v
		}
		acc = ty.wrap(acc)
	}
	if op == Avg {
		acc = ty.wrap(acc) / int64(n)
	}
	return float64(ty.wrap(acc))
}

type orCase struct {
	coll    Collective
	algo    Algorithm
	ty      orType
	op      Op
	root    int
	count   int64
	inPlace bool
}

// orRun runs one plan through the oracle and compares every rank's output
// with the independently computed result.
func orRun(t *testing.T, rng *rand.Rand, g *Graph, req PlanRequest, c orCase) {
	t.Helper()
	p, err := BuildPlan(g, req)
	if err != nil {
		t.Fatalf("BuildPlan(%+v): %v", req, err)
	}
	if err := CheckPlan(p); err != nil {
		t.Fatalf("CheckPlan(%+v): %v", req, err)
	}
	n := g.NRanks
	inN, outN := BufferCounts(c.coll, c.count, n)
	es := int64(c.ty.dt.Size())
	vals := make([][]float64, n)
	inputs := make([][]byte, n)
	for r := range inputs {
		vals[r] = make([]float64, inN)
		inputs[r] = make([]byte, inN*es)
		for i := range vals[r] {
			vals[r][i] = c.ty.value(rng, c.op)
			c.ty.put(inputs[r], int64(i), vals[r][i])
		}
	}
	outs, err := RunOracle(p, inputs, c.inPlace)
	if err != nil {
		t.Fatalf("RunOracle(%+v): %v", req, err)
	}
	col := make([]float64, n)
	reduced := func(i int64) float64 {
		for r := range col {
			col[r] = vals[r][i]
		}
		return c.ty.reduce(col, c.op)
	}
	for r := 0; r < n; r++ {
		if int64(len(outs[r])) != outN*es {
			t.Fatalf("%+v rank %d: output %d bytes, want %d", c, r, len(outs[r]), outN*es)
		}
		for i := int64(0); i < outN; i++ {
			var want float64
			switch c.coll {
			case AllReduce:
				want = reduced(i)
			case Broadcast:
				want = vals[c.root][i]
			case Reduce:
				switch {
				case r == c.root:
					want = reduced(i)
				case c.inPlace:
					want = vals[r][i]
				default:
					want = 0
				}
			case AllGather:
				want = vals[i/c.count][i%c.count]
			case ReduceScatter:
				want = reduced(int64(r)*c.count + i)
			}
			got := c.ty.get(outs[r], i)
			if got != want && !(math.IsNaN(got) && math.IsNaN(want)) {
				t.Fatalf("%v %v n=%d %v %v count=%d inPlace=%v channels=%d chunk=%d: rank %d element %d = %v, want %v",
					c.coll, c.algo, n, c.ty.dt, c.op, c.count, c.inPlace, p.Channels, req.ChunkBytes, r, i, got, want)
			}
		}
	}
}

func TestOracleSmallCases(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, n := range []int{1, 2, 3, 4, 5, 8} {
		g := mustGraph(t, UniformLayout(1, n, 2, BalancedTree))
		for _, count := range []int64{0, 1, 2, 3, 5, 17, 100} {
			for coll := AllReduce; coll <= ReduceScatter; coll++ {
				algos := []Algorithm{Ring}
				if HasPlan(coll, HalvingDoubling, n) == nil && coll != AllReduce {
					algos = append(algos, HalvingDoubling)
				}
				if coll == AllGather || coll == ReduceScatter {
					algos = append(algos, Direct)
				}
				if coll == AllReduce {
					algos = append(algos, Tree, HalvingDoubling, Direct)
					if SharedUsable(n, 1) {
						algos = append(algos, Shared)
					}
					if OneShotUsable(n, 1, count*4) {
						algos = append(algos, OneShot)
					}
				}
				for _, algo := range algos {
					for _, inPlace := range []bool{false, true} {
						c := orCase{coll: coll, algo: algo, ty: orTypes[3], op: Sum, root: (n + 1) / 2 % n, count: count, inPlace: inPlace}
						req := PlanRequest{Coll: coll, Algo: algo, Proto: Simple, Count: count, DType: Int32, Op: Sum, Root: c.root, ChunkBytes: 8, KeepChannels: true}
						orRun(t, rng, g, req, c)
					}
				}
			}
		}
	}
}

// TestOracleProperties draws world sizes, node splits, channel counts,
// counts, dtypes, ops, chunk sizes and collectives at random.
func TestOracleProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 13))
	iters := 500
	if testing.Short() {
		iters = 120
	}
	sizes := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 31, 32, 33, 48, 63, 64}
	counts := []int64{0, 1, 2, 3, 7, 13, 31, 61, 97, 127, 251, 509, 1021, 1031}
	for it := 0; it < iters; it++ {
		n := sizes[rng.IntN(len(sizes))]
		l := randomLayout(rng, n)
		l.Channels = 1 + rng.IntN(16) // up to 32 graph channels
		l.Intra = nil
		if rng.IntN(2) == 0 {
			l = randomLayoutIntra(rng, l)
		}
		g := mustGraph(t, l)
		coll := Collective(rng.IntN(5))
		algo := Ring
		if coll == AllReduce {
			algo = Algorithm(rng.IntN(NumAlgorithms))
			if algo == Direct && g.NNodes > 1 {
				algo = Ring // direct reads memory: one host only
			}
			if algo == OneShot && !OneShotUsable(n, g.NNodes, 0) {
				algo = Ring // one host, up to 8 ranks
			}
			if algo == Shared && !SharedUsable(n, g.NNodes) {
				algo = Ring // staging regions: one host
			}
		} else if coll != Broadcast && coll != Reduce && HasPlan(coll, HalvingDoubling, n) == nil {
			switch rng.IntN(3) {
			case 0:
				algo = HalvingDoubling
			case 1:
				if g.NNodes == 1 {
					algo = Direct // one host only
				}
			}
		}
		ty := orTypes[rng.IntN(len(orTypes))]
		ops := orIntOps
		if ty.bits == 0 {
			ops = orFloatOps
		}
		op := ops[rng.IntN(len(ops))]
		for Supports(op, ty.dt) != nil {
			op = ops[rng.IntN(len(ops))]
		}
		count := counts[rng.IntN(len(counts))]
		if (coll == AllGather || coll == ReduceScatter) && int64(n)*count > 4000 {
			count = 4000/int64(n) | 1 // keep the run short: n*count elements per rank
		} else if n >= 32 && count > 300 {
			count /= 4
		}
		req := PlanRequest{Coll: coll, Algo: algo, Proto: Protocol(rng.IntN(3)), Count: count, DType: ty.dt, Op: op,
			Root: rng.IntN(n), Channels: rng.IntN(g.Channels + 1), KeepChannels: rng.IntN(4) != 0}
		switch rng.IntN(3) {
		case 0:
			req.ChunkBytes = int64(1 + rng.IntN(64))
		case 1:
			req.ChunkBytes = int64(16 * (1 + rng.IntN(40)))
		}
		if rng.IntN(2) == 0 { // a tree's slice that fits keeps one stream
			req.FragmentBytes = int64(1 + rng.IntN(4096))
		}
		c := orCase{coll: coll, algo: algo, ty: ty, op: op, root: req.Root, count: count, inPlace: rng.IntN(2) == 0}
		t.Run(fmt.Sprintf("%d_%v_%v_n%d_%v_%v_c%d", it, coll, algo, n, ty.dt, op, count), func(t *testing.T) {
			orRun(t, rng, g, req, c)
		})
	}
}

// randomLayoutIntra gives l random intra orders.
func randomLayoutIntra(rng *rand.Rand, l Layout) Layout {
	idx := map[int]int{}
	var members [][]int
	for r, lab := range l.NodeOf {
		if _, ok := idx[lab]; !ok {
			idx[lab] = len(members)
			members = append(members, nil)
		}
		members[idx[lab]] = append(members[idx[lab]], r)
	}
	l.Intra = make([][][]int, l.Channels)
	for c := range l.Intra {
		for _, m := range members {
			p := append([]int(nil), m...)
			rng.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
			l.Intra[c] = append(l.Intra[c], p)
		}
	}
	return l
}

// Many channels at once with the default (NCCL) channel reduction and
// default chunk sizes on a message that is large enough to use them.
func TestOracleManyChannels(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	g := mustGraph(t, UniformLayout(3, 3, 16, SplitTree))
	for _, algo := range []Algorithm{Ring, Tree, HalvingDoubling} {
		for _, proto := range []Protocol{LL, LL128, Simple} {
			count := int64(1<<16 + 3)
			req := PlanRequest{Coll: AllReduce, Algo: algo, Proto: proto, Count: count, DType: Int32, Op: Sum}
			p, err := BuildPlan(g, req)
			if err != nil {
				t.Fatal(err)
			}
			if p.Channels < 2 {
				t.Errorf("%v %v: %d channels for 256 KiB", algo, proto, p.Channels)
			}
			orRun(t, rng, g, req, orCase{coll: AllReduce, algo: algo, ty: orTypes[3], op: Sum, count: count})
		}
	}
}

func TestOracleInputErrors(t *testing.T) {
	g := mustGraph(t, UniformLayout(1, 2, 1, TreePattern))
	p, err := BuildPlan(g, PlanRequest{Coll: AllReduce, Count: 4, DType: Int32})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := RunOracle(p, [][]byte{make([]byte, 16)}, false); err == nil {
		t.Error("one input for two ranks accepted")
	}
	if _, err := RunOracle(p, [][]byte{make([]byte, 16), make([]byte, 12)}, false); err == nil {
		t.Error("short input accepted")
	}
}
