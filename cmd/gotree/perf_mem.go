package main

import (
	"fmt"
	"unsafe"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend"
	"github.com/gotree/gotree/cuda"
	"github.com/gotree/gotree/pg"
)

// perfMem is where gotree perf's buffers live: host memory, or a CUDA
// device's (--device), and how a collective runs on them.
type perfMem interface {
	// fill sets region r to what encode writes into a buffer of its size:
	// host memory in place, device memory through a host copy.
	fill(r perfRegion, encode func(b []byte)) error
	// read returns a host copy of region r.
	read(r perfRegion) ([]byte, error)
	// run issues the collective with input in and output out and waits
	// for its result.
	run(comm *pg.Comm, o perfOpts, in, out perfRegion, count int64) error
	// bound fills row's plan and memory-traffic bound columns.
	bound(comm *pg.Comm, o perfOpts, count int64, row *perfRow) error
	String() string
}

// perfRegion is n bytes at off of the send buffer, or of the receive
// buffer when recv.
type perfRegion struct {
	recv   bool
	off, n int64
}

// hostMem is host memory: private, or shared (newShmMem).
type hostMem struct {
	send, recv []byte
	shared     bool
}

func (m *hostMem) String() string {
	if m.shared {
		return "host memory from gotree_mem_alloc"
	}
	return "host memory"
}

// newShmMem is host memory that the ranks of the host map
// (backend.AllocWindow, the C ABI's gotree_mem_alloc).
func newShmMem(send, recv int64) (*hostMem, error) {
	m := &hostMem{shared: true}
	var err error
	if m.send, err = backend.AllocWindow(max(send, 1)); err != nil {
		return nil, err
	}
	if m.recv, err = backend.AllocWindow(max(recv, 1)); err != nil {
		m.free()
		return nil, err
	}
	m.send, m.recv = m.send[:send], m.recv[:recv]
	return m, nil
}

// free releases shared memory.
func (m *hostMem) free() {
	for _, b := range [][]byte{m.send, m.recv} {
		if m.shared && cap(b) > 0 {
			_ = backend.FreeWindow(unsafe.Pointer(unsafe.SliceData(b)))
		}
	}
}

func (m *hostMem) bytes(r perfRegion) []byte {
	b := m.send
	if r.recv {
		b = m.recv
	}
	return b[r.off : r.off+r.n]
}

func (m *hostMem) fill(r perfRegion, encode func([]byte)) error { encode(m.bytes(r)); return nil }
func (m *hostMem) read(r perfRegion) ([]byte, error)            { return m.bytes(r), nil }

func (m *hostMem) run(comm *pg.Comm, o perfOpts, in, out perfRegion, count int64) error {
	ib, ob := m.bytes(in), m.bytes(out)
	var r *pg.Request
	var err error
	comm.WillWait(true) // blocking calls, like nccl-tests without -a
	switch o.coll {
	case algorithms.AllReduce:
		r, err = comm.AllReduce(ib, ob, count, o.dtype, o.op)
	case algorithms.AllGather:
		r, err = comm.AllGather(ib, ob, count, o.dtype)
	case algorithms.Broadcast:
		r, err = comm.Broadcast(ib, ob, count, o.dtype, 0)
	case algorithms.ReduceScatter:
		r, err = comm.ReduceScatter(ib, ob, count, o.dtype, o.op)
	case algorithms.Reduce:
		r, err = comm.Reduce(ib, ob, count, o.dtype, o.op, 0)
	case algorithms.AllToAll:
		r, err = comm.AllToAllEqual(ib, ob, count, o.dtype)
	case algorithms.Gather:
		r, err = comm.Gather(ib, ob, count, o.dtype, 0)
	case algorithms.Scatter:
		r, err = comm.Scatter(ib, ob, count, o.dtype, 0)
	default:
		err = fmt.Errorf("gotree perf: %v is not supported", o.coll)
	}
	if err != nil {
		comm.WillWait(false)
		return err
	}
	return r.Wait(-1)
}

func (m *hostMem) bound(comm *pg.Comm, o perfOpts, count int64, row *perfRow) error {
	return memBound(comm, o, count, m.send, m.recv, row)
}

// deviceMem is a CUDA device's memory: the collectives run through the
// device path on a stream of this program's, and each call waits for the
// stream (what nccl-tests times without -a).
type deviceMem struct {
	ctx        *cuda.Context
	ordinal    int
	send, recv cuda.DevicePtr
	stream     *cuda.Stream
}

func newDeviceMem(o perfOpts, cfg pg.Config, rank int, sendBytes, recvBytes int64) (*deviceMem, error) {
	ctx, err := cuda.OpenDevice(cfg.LibCUDA, func(n int) int { return (o.device + rank) % max(n, 1) })
	if err != nil {
		return nil, err
	}
	m := &deviceMem{ctx: ctx, ordinal: ctx.Dev.Ordinal}
	if m.send, err = ctx.MemAlloc(uint64(max(sendBytes, 1))); err == nil {
		if m.recv, err = ctx.MemAlloc(uint64(max(recvBytes, 1))); err == nil {
			m.stream, err = ctx.StreamCreate(cuda.StreamNonBlocking)
		}
	}
	if err != nil {
		m.close()
		return nil, err
	}
	return m, nil
}

func (m *deviceMem) String() string {
	return fmt.Sprintf("CUDA buffers (rank 0 on device %d)", m.ordinal)
}

func (m *deviceMem) close() {
	if m.stream != nil {
		m.stream.Synchronize()
		m.stream.Destroy()
	}
	for _, p := range []cuda.DevicePtr{m.send, m.recv} {
		if p != 0 {
			m.ctx.MemFree(p)
		}
	}
	m.ctx.Release()
}

func (m *deviceMem) addr(r perfRegion) cuda.DevicePtr {
	if r.recv {
		return m.recv + cuda.DevicePtr(r.off)
	}
	return m.send + cuda.DevicePtr(r.off)
}

func (m *deviceMem) fill(r perfRegion, encode func([]byte)) error {
	if r.n == 0 {
		return nil
	}
	b := make([]byte, r.n)
	encode(b)
	return m.ctx.MemcpyHtoDNow(m.addr(r), b) // complete before the next kernel, whatever its stream
}

func (m *deviceMem) read(r perfRegion) ([]byte, error) {
	b := make([]byte, r.n)
	if r.n == 0 {
		return b, nil
	}
	if err := m.stream.Synchronize(); err != nil {
		return nil, err
	}
	return b, m.ctx.MemcpyDtoH(b, m.addr(r))
}

func (m *deviceMem) args(o perfOpts, in, out perfRegion, count int64) pg.DeviceArgs {
	return pg.DeviceArgs{Coll: o.coll, Send: uintptr(m.addr(in)), Recv: uintptr(m.addr(out)), Count: count,
		DType: o.dtype, Op: o.op, Device: m.ordinal, Stream: m.stream.Handle()}
}

func (m *deviceMem) run(comm *pg.Comm, o perfOpts, in, out perfRegion, count int64) error {
	if err := comm.DeviceCollective(m.args(o, in, out, count)); err != nil {
		return err
	}
	return m.stream.Synchronize()
}

// bound names the plan; the device's memory-traffic bound is measured by
// tests/gpu/device_check.sh, not here.
func (m *deviceMem) bound(comm *pg.Comm, o perfOpts, count int64, row *perfRow) error {
	p, err := comm.DevicePlan(m.args(o, perfRegion{}, perfRegion{recv: true}, count))
	if err != nil {
		return err
	}
	row.PlanAlgo, row.PlanChannels = p.Algo.String()+"/"+p.Proto.String(), p.Channels
	return nil
}
