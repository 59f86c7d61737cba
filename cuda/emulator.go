package cuda

// A CPU model of kernels/gotree.cu, for tests here and in other packages
// (pg runs its device collectives on it): it runs the encoded device
// tables (EncodeRank, EncodeConns, KernelArgs.Bytes, decoded again from
// bytes) with the kernel's FIFO protocol — slots, head/tail counters that
// persist across launches, slicing, LL lines and flags, the abort flag and
// the error word — one goroutine per thread group, on an emulated device
// memory. What it cannot test (memory ordering, barriers, vector
// accesses) is left to the GPU tests. Keep it in step with gtRunStream.

import (
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
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

	// Bounds checking (Emulator.CheckBounds): each allocation's exact
	// [start, end), in address order, and the accesses of launches that
	// left them.
	check atomic.Bool
	spans [][2]uint64
	badMu sync.Mutex
	bad   []string
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
	m.spans = append(m.spans, [2]uint64{p, p + uint64(n)})
	return DevicePtr(p)
}

// in reports whether [p, p+n) lies inside one allocation.
func (m *emuMem) in(p DevicePtr, n int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, b := uint64(p), uint64(p)+uint64(n)
	i := sort.Search(len(m.spans), func(i int) bool { return m.spans[i][1] > a })
	return i < len(m.spans) && m.spans[i][0] <= a && b <= m.spans[i][1]
}

// at is bytes for a launch's access: with bounds checking on, an access
// outside every allocation is recorded (what names it).
func (m *emuMem) at(p DevicePtr, n int, what string) []byte {
	if m.check.Load() && !m.in(p, n) {
		m.badMu.Lock()
		m.bad = append(m.bad, fmt.Sprintf("%s: [%#x, %#x) (%d bytes) is not inside one allocation", what, uint64(p), uint64(p)+uint64(n), n))
		m.badMu.Unlock()
	}
	return m.bytes(p, n)
}

func (m *emuMem) bytes(p DevicePtr, n int) []byte {
	o := uint64(p) - m.base
	return m.buf[o : o+uint64(n)]
}

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
		cd := l.m.at(l.a.Channels+DevicePtr(c*channelBytes), channelBytes, "channel table")
		nstreams := int(le.Uint32(cd[16:]))
		firstConn := int(le.Uint32(cd[20:]))
		nconns := int(le.Uint32(cd[24:]))
		conns := make([]emuConn, nconns)
		step := make([]uint64, nconns) // sStep
		for i := range conns {
			b := l.m.at(l.a.Conns+DevicePtr((firstConn+i)*connBytes), connBytes, "connection table")
			conns[i] = emuConn{DevicePtr(le.Uint64(b)), DevicePtr(le.Uint64(b[8:])), DevicePtr(le.Uint64(b[16:])),
				DevicePtr(le.Uint64(b[24:])), le.Uint32(b[32:])}
			if conns[i].role == roleSend {
				step[i] = atomic.LoadUint64(l.u64(conns[i].tail, "tail"))
			} else {
				step[i] = atomic.LoadUint64(l.u64(conns[i].head, "head"))
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

func (l *emuLaunch) u64(p DevicePtr, what string) *uint64 {
	return (*uint64)(unsafe.Pointer(&l.m.at(p, 8, what)[0]))
}
func (l *emuLaunch) u32(p DevicePtr, what string) *uint32 {
	return (*uint32)(unsafe.Pointer(&l.m.at(p, 4, what)[0]))
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

// llLines calls f for the LL lines of units 16-byte units from slot: each
// line's address and where its 8 data bytes sit in the units' data (a line
// is {data 4 B, flag, data 4 B, flag}).
func llLines(slot DevicePtr, units int, f func(line DevicePtr, off int)) {
	for u := 0; u < units; u++ {
		for j := 0; j < 2; j++ {
			f(slot+DevicePtr(32*u+16*j), 16*u+8*j)
		}
	}
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
		st := decodeStep(l.m.at(l.a.Steps+DevicePtr((first+k)*stepBytes), stepBytes, "step table"))
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
				l.wait(func() bool { return atomic.LoadUint64(l.u64(c.head, "head"))+NSlots > s })
			}
			if !ll {
				for i := 0; i < int(st.nrecv); i++ {
					c := conns[st.recv[i]]
					s := sStep[st.recv[i]]
					l.wait(func() bool { return atomic.LoadUint64(l.u64(c.tail, "tail")) > s })
				}
			}
			// data: whole 16-byte units, as the kernel moves them
			units := int((n + 15) / 16)
			acc := make([]byte, 16*units)
			if src != 0 {
				copy(acc, l.m.at(src+DevicePtr(done), int(n), "source buffer"))
			}
			for i := 0; i < int(st.nrecv); i++ {
				c := conns[st.recv[i]]
				s := sStep[st.recv[i]]
				msg := make([]byte, 16*units)
				if ll {
					slot := c.ll + DevicePtr((s%NSlots)*stride)
					f := uint32(s + 1)
					llLines(slot, units, func(line DevicePtr, off int) {
						l.wait(func() bool {
							return atomic.LoadUint32(l.u32(line+4, "LL receive")) == f && atomic.LoadUint32(l.u32(line+12, "LL receive")) == f
						})
						copy(msg[off:], l.m.at(line, 4, "LL receive"))
						copy(msg[off+4:], l.m.at(line+8, 4, "LL receive"))
					})
				} else {
					copy(msg, l.m.at(c.simple+DevicePtr((s%NSlots)*stride), 16*units, "Simple receive"))
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
				copy(l.m.at(dst+DevicePtr(done), int(n), "destination buffer"), acc[:n])
			}
			for i := 0; i < int(st.nsend); i++ {
				c := conns[st.send[i]]
				s := sStep[st.send[i]]
				if ll {
					slot := c.ll + DevicePtr((s%NSlots)*stride)
					f := uint32(s + 1)
					llLines(slot, units, func(line DevicePtr, off int) {
						copy(l.m.at(line, 4, "LL send"), acc[off:off+4])
						copy(l.m.at(line+8, 4, "LL send"), acc[off+4:off+8])
						atomic.StoreUint32(l.u32(line+4, "LL send"), f)
						atomic.StoreUint32(l.u32(line+12, "LL send"), f)
					})
				} else {
					copy(l.m.at(c.simple+DevicePtr((s%NSlots)*stride), 16*units, "Simple send"), acc)
				}
			}
			done += n
			// post
			for i := 0; i < int(st.nsend); i++ {
				ci := st.send[i]
				sStep[ci]++
				atomic.StoreUint64(l.u64(conns[ci].tail, "tail"), sStep[ci])
			}
			for i := 0; i < int(st.nrecv); i++ {
				ci := st.recv[i]
				sStep[ci]++
				atomic.StoreUint64(l.u64(conns[ci].head, "head"), sStep[ci])
			}
		}
	}
}

// Emulator is a GPU that runs the emulated kernels: device and pinned host
// memory are one arena of Go memory (device addresses are host addresses,
// so Bytes views any buffer); an IPC handle carries the address, so the
// ranks that share it must be goroutines of one process; each stream is a
// goroutine that runs its launches in order. Free does not reuse memory.
type Emulator struct {
	m         *emuMem
	mu        sync.Mutex
	capturing map[uintptr]bool
	streams   map[uintptr]chan func()
	pending   sync.WaitGroup
	kernels   map[string]emuKernel
}

type emuKernel struct {
	dt       algorithms.DType
	op       algorithms.Op
	reduce   bool
	finalize bool
}

// NewEmulator makes an emulated GPU with size bytes of memory.
func NewEmulator(size int) *Emulator {
	g := &Emulator{m: newEmuMem(size), streams: map[uintptr]chan func(){}, kernels: map[string]emuKernel{}}
	for dt := algorithms.DType(0); dt.Valid(); dt++ {
		for op := algorithms.Op(0); op < 16; op++ {
			if algorithms.Supports(op, dt) != nil {
				continue
			}
			// Kernels shared by several dtypes (f32 and complex64 finalize,
			// i8 and u8 sum) run as the first: the same arithmetic.
			if n, err := KernelName(dt, op, true); err == nil && g.kernels[n] == (emuKernel{}) {
				g.kernels[n] = emuKernel{dt: dt, op: op, reduce: true}
			}
			if n := FinalizeKernel(dt, op); n != "" && g.kernels[n] == (emuKernel{}) {
				g.kernels[n] = emuKernel{dt: dt, op: op, finalize: true}
			}
		}
	}
	n, _ := KernelName(algorithms.Int8, algorithms.Sum, false)
	g.kernels[n] = emuKernel{dt: algorithms.Int8, op: algorithms.Sum, reduce: true}
	return g
}

// CheckBounds turns bounds checking on or off: with it on, every access
// of an emulated kernel, finalize or copy to device memory (user buffers,
// FIFO slots, head and tail words, the tables) must lie inside one
// allocation (its exact size, not the arena's rounding); BoundsErrors
// lists those that did not. Across processes such an access faults (a
// FIFO is an IPC mapping of its own size; a caching allocator's buffer
// ends where the caller's tensor does), while in one process it lands in
// a neighbour unnoticed.
func (g *Emulator) CheckBounds(on bool) { g.m.check.Store(on) }

// BoundsErrors returns the accesses found outside every allocation since
// bounds checking was turned on, and forgets them.
func (g *Emulator) BoundsErrors() []string {
	g.m.badMu.Lock()
	defer g.m.badMu.Unlock()
	b := g.m.bad
	g.m.bad = nil
	return b
}

func (g *Emulator) Alloc(n uint64) (DevicePtr, error) {
	p := g.m.alloc(int(n))
	clear(g.m.bytes(p, int(n)))
	return p, nil
}
func (g *Emulator) Free(DevicePtr) error { return nil }

// Bytes is the memory of n bytes at device address p.
func (g *Emulator) Bytes(p DevicePtr, n int) []byte { return g.m.bytes(p, n) }
func (g *Emulator) Upload(dst DevicePtr, b []byte) error {
	copy(g.m.bytes(dst, len(b)), b)
	return nil
}
func (g *Emulator) HostAlloc(n int) ([]byte, DevicePtr, error) {
	p, _ := g.Alloc(uint64(n))
	return g.m.bytes(p, n), p, nil
}
func (g *Emulator) HostFree([]byte) error { return nil }
func (g *Emulator) IpcExport(p DevicePtr) (IpcMemHandle, error) {
	var h IpcMemHandle
	copy(h[:], "emu")
	le.PutUint64(h[8:], uint64(p))
	return h, nil
}
func (g *Emulator) IpcOpen(h IpcMemHandle) (DevicePtr, error) {
	if string(h[:3]) != "emu" {
		return 0, fmt.Errorf("not an emulator handle")
	}
	return DevicePtr(le.Uint64(h[8:])), nil
}
func (g *Emulator) IpcClose(DevicePtr) error { return nil }
func (g *Emulator) MaxBlocks(int) int        { return 64 }

// Capture marks stream as capturing a graph (or not), for Capturing.
func (g *Emulator) Capture(stream uintptr, on bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.capturing == nil {
		g.capturing = map[uintptr]bool{}
	}
	g.capturing[stream] = on
}

// Ordinal is 0: the emulator is one device.
func (g *Emulator) Ordinal() int { return 0 }

// BusID is the emulated device's PCI address.
func (g *Emulator) BusID() string { return "0000:00:00.0" }

func (g *Emulator) Capturing(stream uintptr) (bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.capturing[stream], nil
}

// Close ends the stream goroutines once their work is done.
func (g *Emulator) Close() {
	g.pending.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	for s, q := range g.streams {
		close(q)
		delete(g.streams, s)
	}
}

func (g *Emulator) Synchronize() error {
	g.pending.Wait()
	return nil
}

func (g *Emulator) Copy(dst, src DevicePtr, n uint64, stream uintptr) error {
	g.pending.Add(1)
	g.stream(stream) <- func() { copy(g.m.at(dst, int(n), "copy destination"), g.m.at(src, int(n), "copy source")) }
	return nil
}

// CopyToHost queues a copy from device memory into host memory on stream.
func (g *Emulator) CopyToHost(dst []byte, src DevicePtr, stream uintptr) error {
	g.pending.Add(1)
	g.stream(stream) <- func() { copy(dst, g.m.bytes(src, len(dst))) }
	return nil
}

// CopyFromHost queues a copy from host memory into device memory on stream.
func (g *Emulator) CopyFromHost(dst DevicePtr, src []byte, stream uintptr) error {
	g.pending.Add(1)
	g.stream(stream) <- func() { copy(g.m.bytes(dst, len(src)), src) }
	return nil
}

// SyncStream waits for the work queued on stream so far.
func (g *Emulator) SyncStream(stream uintptr) error {
	done := make(chan struct{})
	g.pending.Add(1)
	g.stream(stream) <- func() { close(done) }
	<-done
	return nil
}

// stream returns the queue of stream s, starting its goroutine.
func (g *Emulator) stream(s uintptr) chan func() {
	g.mu.Lock()
	defer g.mu.Unlock()
	q, ok := g.streams[s]
	if !ok {
		q = make(chan func(), 64)
		g.streams[s] = q
		go func() {
			for f := range q {
				f()
				g.pending.Done()
			}
		}()
	}
	return q
}

func decodeArgs(ab []byte) KernelArgs {
	u := func(i int) DevicePtr { return DevicePtr(le.Uint64(ab[8*i:])) }
	return KernelArgs{In: u(0), Out: u(1), Steps: u(2), Channels: u(3), Conns: u(4), Err: u(5), AbortFlag: u(6),
		TimeoutNs: le.Uint64(ab[56:]), SimpleSlotBytes: le.Uint32(ab[64:]), LLSlotLines: le.Uint32(ab[68:]),
		Proto: le.Uint32(ab[72:]), Group0Threads: le.Uint32(ab[76:])}
}

func (g *Emulator) Launch(name string, grid, block int, stream uintptr, params ...[]byte) error {
	k, ok := g.kernels[name]
	if !ok {
		return fmt.Errorf("emulator: no kernel %q", name)
	}
	var run func()
	if k.finalize {
		out, n, ranks := DevicePtr(le.Uint64(params[0])), int(le.Uint64(params[1])), int(le.Uint32(params[2]))
		run = func() { algorithms.Finalize(g.m.at(out, n, name), k.dt, k.op, ranks) }
	} else {
		a := decodeArgs(params[0])
		run = func() {
			l := &emuLaunch{m: g.m, a: a, dt: k.dt, op: k.op, reduce: k.reduce, deadline: time.Now().Add(time.Duration(a.TimeoutNs))}
			var wg sync.WaitGroup
			l.run(grid, &wg)
			wg.Wait()
		}
	}
	g.pending.Add(1)
	g.stream(stream) <- run
	return nil
}
