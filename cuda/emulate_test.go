package cuda

// The emulator (emulator.go) against RunOracle: the encoding and the
// protocol logic without a GPU.

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/gotree/gotree/algorithms"
)

// emuComm mirrors Comm on emulated memory.
type emuComm struct {
	m     *emuMem
	n     int
	cfg   Config
	conns map[ConnKey]ConnMem
}

func (e *emuComm) conn(k ConnKey) ConnMem {
	if m, ok := e.conns[k]; ok {
		return m
	}
	m := fifoAt(e.m.alloc(int(e.cfg.fifoBytes())), e.cfg, 0)
	e.conns[k] = m
	return m
}

// run executes p on the emulated device and returns each rank's output
// (finalized, like the executor's finalize kernel).
func (e *emuComm) run(t *testing.T, name string, p *algorithms.Plan, inputs [][]byte, inPlace bool) [][]byte {
	t.Helper()
	es := int64(p.DType.Size())
	inN, outN := p.BufferCounts()
	ins, outs := make([]DevicePtr, e.n), make([]DevicePtr, e.n)
	for r := 0; r < e.n; r++ {
		switch {
		case !inPlace:
			ins[r] = e.m.alloc(int(inN * es))
			outs[r] = e.m.alloc(int(outN * es))
			fill := e.m.bytes(outs[r], int(outN*es))
			for i := range fill {
				fill[i] = 0xA5 // poison
			}
			if p.Coll == algorithms.Reduce && r != p.Root {
				clear(fill) // the oracle's untouched outputs are zero
			}
		case p.Coll == algorithms.AllGather:
			outs[r] = e.m.alloc(int(outN * es))
			ins[r] = outs[r] + DevicePtr(int64(r)*p.Count*es)
		case p.Coll == algorithms.ReduceScatter:
			ins[r] = e.m.alloc(int(inN * es))
			outs[r] = ins[r] + DevicePtr(int64(r)*p.Count*es)
		default:
			ins[r] = e.m.alloc(int(inN * es))
			outs[r] = ins[r]
		}
		copy(e.m.bytes(ins[r], int(inN*es)), inputs[r])
	}
	var wg sync.WaitGroup
	launches := make([]*emuLaunch, e.n)
	deadline := time.Now().Add(5 * time.Second)
	for r := 0; r < e.n; r++ {
		tb, err := EncodeRank(p, r)
		if err != nil {
			t.Fatal(err)
		}
		connTab := EncodeConns(tb, e.conn)
		up := func(b []byte) DevicePtr {
			d := e.m.alloc(len(b) + 1)
			copy(e.m.bytes(d, len(b)), b)
			return d
		}
		a := KernelArgs{In: ins[r], Out: outs[r], Steps: up(tb.Steps), Channels: up(tb.Channels), Conns: up(connTab),
			SimpleSlotBytes: uint32(e.cfg.SimpleSlotBytes), LLSlotLines: uint32(e.cfg.LLSlotLines),
			Proto: protoOf(p.Proto), Group0Threads: uint32(GroupSplit(p.Proto, 512))}
		// Decode the argument block the kernel would get.
		ab := a.Bytes()
		a2 := KernelArgs{In: DevicePtr(le.Uint64(ab)), Out: DevicePtr(le.Uint64(ab[8:])), Steps: DevicePtr(le.Uint64(ab[16:])),
			Channels: DevicePtr(le.Uint64(ab[24:])), Conns: DevicePtr(le.Uint64(ab[32:])),
			SimpleSlotBytes: le.Uint32(ab[64:]), LLSlotLines: le.Uint32(ab[68:]), Proto: le.Uint32(ab[72:])}
		launches[r] = &emuLaunch{m: e.m, a: a2, dt: p.DType, op: p.Op, reduce: p.Coll.Reduces(), deadline: deadline}
		launches[r].run(p.Channels, &wg)
	}
	wg.Wait()
	for r, l := range launches {
		if l.failed.Load() {
			t.Fatalf("%s: rank %d: emulated kernel deadlocked (a wait never finished)", name, r)
		}
	}
	res := make([][]byte, e.n)
	for r := 0; r < e.n; r++ {
		res[r] = append([]byte(nil), e.m.bytes(outs[r], int(outN*es))...)
		if p.Coll.Reduces() && (p.Coll != algorithms.Reduce || r == p.Root) {
			algorithms.Finalize(res[r], p.DType, p.Op, p.NRanks)
		}
	}
	return res
}

func randomInput(rng *rand.Rand, dt algorithms.DType, n int64) []byte {
	b := make([]byte, n*int64(dt.Size()))
	rng.Read(b)
	switch dt {
	case algorithms.Bool:
		for i := range b {
			b[i] &= 1
		}
	case algorithms.Float32, algorithms.Complex64:
		for i := 0; i+4 <= len(b); i += 4 {
			le.PutUint32(b[i:], math.Float32bits(float32(rng.NormFloat64())))
		}
	case algorithms.Float64, algorithms.Complex128:
		for i := 0; i+8 <= len(b); i += 8 {
			le.PutUint64(b[i:], math.Float64bits(rng.NormFloat64()))
		}
	case algorithms.Float16, algorithms.BFloat16:
		for i := 0; i+2 <= len(b); i += 2 {
			f := float32(rng.NormFloat64())
			if dt == algorithms.Float16 {
				le.PutUint16(b[i:], algorithms.Float32ToFloat16(f))
			} else {
				le.PutUint16(b[i:], algorithms.Float32ToBFloat16(f))
			}
		}
	}
	return b
}

func TestEmulatedKernels(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	type tc struct {
		coll    algorithms.Collective
		algo    algorithms.Algorithm
		proto   algorithms.Protocol
		n, ch   int
		count   int64
		dt      algorithms.DType
		op      algorithms.Op
		inPlace bool
		chunk   int64
	}
	var cases []tc
	dts := []algorithms.DType{algorithms.Float32, algorithms.Float16, algorithms.BFloat16, algorithms.Int8,
		algorithms.Uint8, algorithms.Int64, algorithms.Bool, algorithms.Complex128, algorithms.Float64, algorithms.Int32}
	for _, n := range []int{1, 2, 3, 4, 8} {
		for _, proto := range []algorithms.Protocol{algorithms.LL, algorithms.Simple, algorithms.LL128} {
			for _, algo := range []algorithms.Algorithm{algorithms.Ring, algorithms.Tree} {
				for _, count := range []int64{1, 3, 100, 1000, 4099} {
					dt := dts[rng.Intn(len(dts))]
					op := algorithms.Op(rng.Intn(8))
					for algorithms.Supports(op, dt) != nil {
						op = algorithms.Op(rng.Intn(8))
					}
					cases = append(cases, tc{algorithms.AllReduce, algo, proto, n, 1 + rng.Intn(3), count, dt, op, rng.Intn(2) == 0, int64(16 << rng.Intn(6))})
				}
			}
			for _, coll := range []algorithms.Collective{algorithms.Broadcast, algorithms.Reduce, algorithms.AllGather, algorithms.ReduceScatter} {
				for _, count := range []int64{1, 37, 2000} {
					cases = append(cases, tc{coll, algorithms.Ring, proto, n, 2, count, algorithms.Float32, algorithms.Sum, rng.Intn(2) == 0, 256})
				}
			}
		}
	}
	for _, c := range cases {
		name := fmt.Sprintf("%v-%v-%v-n%d-ch%d-%d-%v-%v-inplace=%v", c.coll, c.algo, c.proto, c.n, c.ch, c.count, c.dt, c.op, c.inPlace)
		g, err := algorithms.BuildGraph(algorithms.UniformLayout(1, c.n, c.ch, algorithms.BalancedTree))
		if err != nil {
			t.Fatal(err)
		}
		chunk := c.chunk // LL: at most 512 = 4 slots of 16 lines
		if c.proto != algorithms.LL {
			chunk = max(chunk, algorithms.GrainBytes(c.proto)) // at most 1920 = 4 slots of 512 bytes
		}
		p, err := algorithms.BuildPlan(g, algorithms.PlanRequest{Coll: c.coll, Algo: c.algo, Proto: c.proto, Count: c.count,
			DType: c.dt, Op: c.op, Root: c.n - 1, KeepChannels: true, ChunkBytes: chunk})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		inN, _ := p.BufferCounts()
		inputs := make([][]byte, c.n)
		for r := range inputs {
			inputs[r] = randomInput(rng, c.dt, inN)
		}
		want, err := algorithms.RunOracle(p, inputs, c.inPlace)
		if err != nil {
			t.Fatalf("%s: oracle: %v", name, err)
		}
		// Small slots: many slices per step and FIFO wrap-around. Two
		// runs on the same connections: the counters carry over.
		cfg := Config{SimpleSlotBytes: 512, LLSlotLines: 16}
		if err := CheckSlices(p, cfg.SimpleSlotBytes, cfg.LLSlotLines); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		e := &emuComm{m: newEmuMem(64 << 20), n: c.n, cfg: cfg, conns: map[ConnKey]ConnMem{}}
		for run := 0; run < 2; run++ {
			got := e.run(t, name, p, inputs, c.inPlace)
			for r := range got {
				if !bytes.Equal(got[r], want[r]) {
					t.Fatalf("%s run %d: rank %d output differs from the oracle", name, run, r)
				}
			}
		}
	}
	t.Logf("%d plans emulated", len(cases))
}

// TestEmulatedDeadlockNeedsCheck shows why CheckSlices exists: a ring step
// that fills the whole FIFO deadlocks the two neighbours.
func TestEmulatedDeadlockNeedsCheck(t *testing.T) {
	g, err := algorithms.BuildGraph(algorithms.UniformLayout(1, 2, 1, algorithms.BalancedTree))
	if err != nil {
		t.Fatal(err)
	}
	p, err := algorithms.BuildPlan(g, algorithms.PlanRequest{Coll: algorithms.AllReduce, Algo: algorithms.Ring,
		Proto: algorithms.Simple, Count: 4096, DType: algorithms.Float32, KeepChannels: true, ChunkBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckSlices(p, 512, 16); err == nil {
		t.Fatal("CheckSlices accepts 4096-byte steps with 512-byte slots")
	}
	if err := CheckSlices(p, 1024, 16); err != nil {
		t.Fatalf("CheckSlices rejects 4 slots per step: %v", err)
	}
}
