package cuda

// A CPU model of kernels/gotree.cu: it runs the encoded device tables
// (EncodeRank, EncodeConns, KernelArgs.Bytes, decoded again from bytes)
// with the kernel's FIFO protocol — slots, head/tail counters that persist
// across launches, slicing, LL lines and flags — one goroutine per thread
// group, on an emulated device memory. Checked against RunOracle, it tests
// the encoding and the protocol logic without a GPU; what it cannot test
// (memory ordering, barriers, vector accesses) is left to the GPU tests.
// Keep it in step with gtRunStream.

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/gotree/gotree/algorithms"
)

// emuMem is the emulated device memory: a Go arena whose device
// addresses are its host addresses, so that it also serves as pinned host
// memory mapped into the device (rankcomm_test.go).
type emuMem struct {
	buf  []byte
	base uint64
	mu   sync.Mutex
	next uint64
}

func newEmuMem(n int) *emuMem {
	buf := make([]byte, n+256)
	base := uint64(uintptr(unsafe.Pointer(&buf[0])))
	base = (base + 255) &^ 255
	m := &emuMem{buf: buf, base: base, next: base}
	m.buf = buf[base-uint64(uintptr(unsafe.Pointer(&buf[0]))):]
	return m
}

func (m *emuMem) alloc(n int) DevicePtr {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.next
	m.next += uint64((n + 255) &^ 255)
	if m.next-m.base > uint64(len(m.buf)) {
		panic("emulated device memory exhausted")
	}
	return DevicePtr(p)
}

func (m *emuMem) bytes(p DevicePtr, n int) []byte {
	o := uint64(p) - m.base
	return m.buf[o : o+uint64(n)]
}

func (m *emuMem) u64(p DevicePtr) *uint64 { return (*uint64)(unsafe.Pointer(&m.buf[uint64(p)-m.base])) }
func (m *emuMem) u32(p DevicePtr) *uint32 { return (*uint32)(unsafe.Pointer(&m.buf[uint64(p)-m.base])) }

// emuConn is a decoded GtConn.
type emuConn struct {
	simple, ll, tail, head DevicePtr
	role                   uint32
}

type emuStep struct {
	prim, nrecv, nsend, srcBuf, dstBuf byte
	recv, send                         [3]byte
	srcOff, dstOff, bytes              int64
}

func decodeStep(b []byte) emuStep {
	var s emuStep
	s.prim, s.nrecv, s.nsend, s.srcBuf, s.dstBuf = b[0], b[1], b[2], b[3], b[4]
	copy(s.recv[:], b[5:8])
	copy(s.send[:], b[8:11])
	s.srcOff, s.dstOff, s.bytes = int64(le.Uint64(b[16:])), int64(le.Uint64(b[24:])), int64(le.Uint64(b[32:]))
	return s
}

type emuLaunch struct {
	m        *emuMem
	a        KernelArgs
	dt       algorithms.DType
	op       algorithms.Op
	reduce   bool
	deadline time.Time
	failed   atomic.Bool
}

// run emulates one kernel launch of nch blocks; it returns when all
// groups are done.
func (l *emuLaunch) run(nch int, wg *sync.WaitGroup) {
	for c := 0; c < nch; c++ {
		cd := l.m.bytes(l.a.Channels+DevicePtr(c*channelBytes), channelBytes)
		nstreams := int(le.Uint32(cd[16:]))
		firstConn := int(le.Uint32(cd[20:]))
		nconns := int(le.Uint32(cd[24:]))
		conns := make([]emuConn, nconns)
		step := make([]uint64, nconns) // sStep
		for i := range conns {
			b := l.m.bytes(l.a.Conns+DevicePtr((firstConn+i)*connBytes), connBytes)
			conns[i] = emuConn{DevicePtr(le.Uint64(b)), DevicePtr(le.Uint64(b[8:])), DevicePtr(le.Uint64(b[16:])),
				DevicePtr(le.Uint64(b[24:])), le.Uint32(b[32:])}
			if conns[i].role == roleSend {
				step[i] = atomic.LoadUint64(l.m.u64(conns[i].tail))
			} else {
				step[i] = atomic.LoadUint64(l.m.u64(conns[i].head))
			}
		}
		for g := 0; g < nstreams; g++ {
			first, n := int(le.Uint32(cd[4*g:])), int(le.Uint32(cd[8+4*g:]))
			wg.Add(1)
			go func() {
				defer wg.Done()
				l.stream(first, n, conns, step)
			}()
		}
	}
}

func (l *emuLaunch) wait(cond func() bool) {
	for !cond() {
		if l.failed.Load() {
			return
		}
		code := uint32(0)
		if l.a.AbortFlag != 0 && atomic.LoadUint32(l.m.u32(l.a.AbortFlag)) != 0 {
			code = KernelErrAbort
		} else if time.Now().After(l.deadline) {
			code = KernelErrTimeout
		}
		if code != 0 {
			l.failed.Store(true)
			if l.a.Err != 0 {
				atomic.CompareAndSwapUint32(l.m.u32(l.a.Err), 0, code)
			}
			return
		}
		runtime.Gosched()
	}
}

func (l *emuLaunch) buf(sel byte, off int64) DevicePtr {
	switch sel {
	case 1:
		return l.a.In + DevicePtr(off)
	case 2:
		return l.a.Out + DevicePtr(off)
	}
	return 0
}

func (l *emuLaunch) stream(first, nsteps int, conns []emuConn, sStep []uint64) {
	ll := l.a.Proto == protoLL
	sliceBytes := int64(l.a.SimpleSlotBytes)
	stride := uint64(l.a.SimpleSlotBytes)
	if ll {
		sliceBytes = int64(l.a.LLSlotLines) * 8
		stride = uint64(l.a.LLSlotLines) * LLLineBytes
	}
	for k := 0; k < nsteps; k++ {
		st := decodeStep(l.m.bytes(l.a.Steps+DevicePtr((first+k)*stepBytes), stepBytes))
		src, dst := l.buf(st.srcBuf, st.srcOff), l.buf(st.dstBuf, st.dstOff)
		if st.prim == byte(algorithms.Copy) && src == dst {
			continue
		}
		for done := int64(0); done < st.bytes; {
			n := min(sliceBytes, st.bytes-done)
			// wait
			for i := 0; i < int(st.nsend); i++ {
				c := conns[st.send[i]]
				s := sStep[st.send[i]]
				l.wait(func() bool { return atomic.LoadUint64(l.m.u64(c.head))+NSlots > s })
			}
			if !ll {
				for i := 0; i < int(st.nrecv); i++ {
					c := conns[st.recv[i]]
					s := sStep[st.recv[i]]
					l.wait(func() bool { return atomic.LoadUint64(l.m.u64(c.tail)) > s })
				}
			}
			// data: whole 16-byte units, as the kernel moves them
			units := int((n + 15) / 16)
			acc := make([]byte, 16*units)
			if src != 0 {
				copy(acc, l.m.bytes(src+DevicePtr(done), int(n)))
			}
			for i := 0; i < int(st.nrecv); i++ {
				c := conns[st.recv[i]]
				s := sStep[st.recv[i]]
				msg := make([]byte, 16*units)
				if ll {
					slot := c.ll + DevicePtr((s%NSlots)*stride)
					f := uint32(s + 1)
					for u := 0; u < units; u++ {
						for j := 0; j < 2; j++ {
							line := slot + DevicePtr(32*u+16*j)
							l.wait(func() bool {
								return atomic.LoadUint32(l.m.u32(line+4)) == f && atomic.LoadUint32(l.m.u32(line+12)) == f
							})
							copy(msg[16*u+8*j:], l.m.bytes(line, 4))
							copy(msg[16*u+8*j+4:], l.m.bytes(line+8, 4))
						}
					}
				} else {
					copy(msg, l.m.bytes(c.simple+DevicePtr((s%NSlots)*stride), 16*units))
				}
				if src != 0 || i > 0 {
					if l.reduce {
						algorithms.ReduceInto(acc, msg, l.dt, l.op)
					} else {
						panic("reduction in a copy-only plan")
					}
				} else {
					acc = msg
				}
			}
			if dst != 0 {
				copy(l.m.bytes(dst+DevicePtr(done), int(n)), acc[:n])
			}
			for i := 0; i < int(st.nsend); i++ {
				c := conns[st.send[i]]
				s := sStep[st.send[i]]
				if ll {
					slot := c.ll + DevicePtr((s%NSlots)*stride)
					f := uint32(s + 1)
					for u := 0; u < units; u++ {
						for j := 0; j < 2; j++ {
							line := slot + DevicePtr(32*u+16*j)
							copy(l.m.bytes(line, 4), acc[16*u+8*j:16*u+8*j+4])
							copy(l.m.bytes(line+8, 4), acc[16*u+8*j+4:16*u+8*j+8])
							atomic.StoreUint32(l.m.u32(line+4), f)
							atomic.StoreUint32(l.m.u32(line+12), f)
						}
					}
				} else {
					copy(l.m.bytes(c.simple+DevicePtr((s%NSlots)*stride), 16*units), acc)
				}
			}
			done += n
			// post
			for i := 0; i < int(st.nsend); i++ {
				ci := st.send[i]
				sStep[ci]++
				atomic.StoreUint64(l.m.u64(conns[ci].tail), sStep[ci])
			}
			for i := 0; i < int(st.nrecv); i++ {
				ci := st.recv[i]
				sStep[ci]++
				atomic.StoreUint64(l.m.u64(conns[ci].head), sStep[ci])
			}
		}
	}
}

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
	simple := NSlots * e.cfg.SimpleSlotBytes
	ll := NSlots * e.cfg.LLSlotLines * LLLineBytes
	p := e.m.alloc(simple + ll + 256)
	m := ConnMem{Simple: p, LL: p + DevicePtr(simple), Tail: p + DevicePtr(simple+ll), Head: p + DevicePtr(simple+ll+128)}
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
		launches[r] = &emuLaunch{m: e.m, a: a2, dt: p.DType, op: p.Op, reduce: reduces(p.Coll), deadline: deadline}
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
		if reduces(p.Coll) && (p.Coll != algorithms.Reduce || r == p.Root) {
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
