package cuda

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend"
)

// Host-staged connections between nodes (NCCL's network proxy, written
// from its description): the kernels cannot reach a socket, so a
// connection whose ends are on different nodes has a FIFO in pinned host
// memory mapped into the device at each end, and a proxy goroutine per
// end moves slots between that FIFO and a host link (backend.Conn, TCP
// between nodes):
//
//	sender kernel → host FIFO → send proxy → link → recv proxy → host FIFO → receiver kernel
//
// The FIFOs have the layout and counters of a device connection (Simple
// slots, tail, head), so the kernels run unchanged: the send proxy plays
// the receiver to its kernel (it waits for tail, ships the slot, frees it
// with head) and the receive proxy plays the sender (it waits for a free
// slot by head, fills it from the link, posts tail). Only the Simple
// protocol crosses nodes: an LL line's flag is checked by its reader, and
// a proxy that shipped a line before its flag was written would hang the
// far kernel.
//
// A proxy does not know the plan's steps, only how many bytes each slot
// of its connection carries: SliceSchedule lists them, per collective, in
// the order the kernel fills them.

// hostFIFO is one end's FIFO of a host-staged connection: NSlots slots of
// slot bytes, then tail and head (u64, 128 bytes apart), in memory both the
// host (mem) and the device (dev, the address of mem[0]) reach.
type hostFIFO struct {
	mem  []byte
	dev  DevicePtr
	slot int
}

// hostFIFOBytes is the size of a host FIFO with slots of slot bytes.
func hostFIFOBytes(slot int) int { return NSlots*slot + 256 }

func (f *hostFIFO) tail() *uint64 { return (*uint64)(unsafe.Pointer(&f.mem[NSlots*f.slot])) }
func (f *hostFIFO) head() *uint64 { return (*uint64)(unsafe.Pointer(&f.mem[NSlots*f.slot+128])) }

// slotData is the first n bytes of the slot that step fills.
func (f *hostFIFO) slotData(step uint64, n int) []byte {
	o := int(step%NSlots) * f.slot
	return f.mem[o : o+n]
}

// connMem is the FIFO as the kernel's connection table names it.
func (f *hostFIFO) connMem(peer int) ConnMem {
	tail := f.dev + DevicePtr(NSlots*f.slot)
	return ConnMem{Simple: f.dev, LL: f.dev, Tail: tail, Head: tail + 128, Peer: peer}
}

// SliceSchedule lists, for every connection of rank's part of p, the bytes
// of data each FIFO slot carries, in the order the kernel fills them: each
// step that receives from or sends to a peer moves its bytes in slices of
// at most sliceBytes (the slot's data size). Both ends of a connection
// compute the same list.
func SliceSchedule(p *algorithms.Plan, rank, sliceBytes int) map[ConnKey][]int {
	out := map[ConnKey][]int{}
	es := int64(p.DType.Size())
	for _, cp := range p.Ranks[rank].Channels {
		for _, stream := range cp.Streams {
			for _, st := range stream {
				if len(st.RecvFrom)+len(st.SendTo) == 0 {
					continue
				}
				var keys []ConnKey
				for _, peer := range st.RecvFrom {
					keys = append(keys, ConnKey{cp.Channel, peer, rank})
				}
				for _, peer := range st.SendTo {
					keys = append(keys, ConnKey{cp.Channel, rank, peer})
				}
				for left := st.Count * es; left > 0; left -= int64(sliceBytes) {
					n := int(min(left, int64(sliceBytes)))
					for _, k := range keys {
						out[k] = append(out[k], n)
					}
				}
			}
		}
	}
	return out
}

// proxyJob is one collective's slices on one connection.
type proxyJob struct {
	seq    uint64 // the collective's number on this rank's communicator (for messages)
	slices []int
}

// proxy runs one end of a host-staged connection. Jobs run in order, each
// slice as one or more link messages (a slot may exceed the link's largest
// message). A failure is reported once through fail, which aborts the
// kernels; the jobs queued after it are dropped.
type proxy struct {
	key     ConnKey
	send    bool // this end's kernel sends
	fifo    *hostFIFO
	link    backend.Conn
	jobs    chan proxyJob
	timeout time.Duration   // longest wait for one slice
	life    context.Context // cancelled when the communicator closes
	fail    func(error)
	done    chan struct{} // closed when run returns
}

func newProxy(life context.Context, key ConnKey, send bool, fifo *hostFIFO, link backend.Conn, timeout time.Duration, fail func(error)) *proxy {
	p := &proxy{key: key, send: send, fifo: fifo, link: link, jobs: make(chan proxyJob, 256),
		timeout: timeout, life: life, fail: fail, done: make(chan struct{})}
	go p.run()
	return p
}

func (p *proxy) String() string {
	if p.send {
		return fmt.Sprintf("channel %d send proxy to rank %d", p.key.Channel, p.key.To)
	}
	return fmt.Sprintf("channel %d receive proxy from rank %d", p.key.Channel, p.key.From)
}

func (p *proxy) run() {
	defer close(p.done)
	// The counters persist across collectives: the next slot is where the
	// last collective left them.
	step := atomic.LoadUint64(p.fifo.head())
	if !p.send {
		step = atomic.LoadUint64(p.fifo.tail())
	}
	failed := false
	// The messages' tag is the job's number on this connection: both ends
	// count the same jobs, whatever else each rank runs.
	var tag uint32
	for {
		var job proxyJob
		select {
		case job = <-p.jobs:
		case <-p.life.Done():
			return
		}
		if failed {
			continue
		}
		tag++
		for i, n := range job.slices {
			var err error
			if p.send {
				err = p.sendSlice(step, n, tag)
			} else {
				err = p.recvSlice(step, n, tag)
			}
			if err != nil {
				failed = true
				p.fail(fmt.Errorf("%v: collective #%d, slice %d of %d (%d bytes): %w", p, job.seq, i+1, len(job.slices), n, err))
				break
			}
			step++
		}
	}
}

// wire is how many bytes of a slice travel: whole 16-byte units, as the
// kernels move them.
func wire(n int) int { return (n + 15) &^ 15 }

// sendSlice waits for the kernel to post slot step, ships it and frees it.
func (p *proxy) sendSlice(step uint64, n int, tag uint32) error {
	if err := p.waitFor(func() bool { return atomic.LoadUint64(p.fifo.tail()) > step }, "the kernel to post the slot"); err != nil {
		return err
	}
	data := p.fifo.slotData(step, wire(n))
	ctx, cancel := p.ctx()
	defer cancel()
	for max := p.link.MaxMessage(); len(data) > 0; {
		k := min(len(data), max)
		if err := p.link.Send(ctx, tag, data[:k]); err != nil {
			return err
		}
		data = data[k:]
	}
	atomic.StoreUint64(p.fifo.head(), step+1)
	return nil
}

// recvSlice waits for slot step to be free, fills it from the link and
// posts it.
func (p *proxy) recvSlice(step uint64, n int, want uint32) error {
	if err := p.waitFor(func() bool { return atomic.LoadUint64(p.fifo.head())+NSlots > step }, "the kernel to free a slot"); err != nil {
		return err
	}
	data := p.fifo.slotData(step, wire(n))
	ctx, cancel := p.ctx()
	defer cancel()
	for len(data) > 0 {
		b, tag, err := p.link.Recv(ctx)
		if err != nil {
			return err
		}
		if tag != want || len(b) > len(data) {
			p.link.Release()
			return fmt.Errorf("%w: got %d bytes of job %d on this connection, expected at most %d bytes of job %d (the ranks issued different collectives)",
				backend.ErrProto, len(b), tag, len(data), want)
		}
		copy(data, b)
		data = data[len(b):]
		p.link.Release()
	}
	atomic.StoreUint64(p.fifo.tail(), step+1)
	return nil
}

// ctx bounds one slice's link traffic by the timeout and the
// communicator's life.
func (p *proxy) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(p.life, p.timeout)
}

// errProxyStopped: the communicator closed while a proxy waited.
var errProxyStopped = errors.New("the communicator was closed")

// waitFor polls cond: a short spin, then yields, then sleeps growing to
// 50 µs (a kernel posts a slot every few microseconds when it streams,
// and may not start for a long time when its stream is busy). It gives up
// after the proxy's timeout.
func (p *proxy) waitFor(cond func() bool, what string) error {
	var start time.Time
	var timer *time.Timer
	sleep := time.Microsecond
	for i := 0; !cond(); i++ {
		switch {
		case i < 64:
		case i < 256:
			runtime.Gosched()
		default:
			if start.IsZero() {
				start = time.Now()
				timer = time.NewTimer(sleep)
				defer timer.Stop()
			} else if time.Since(start) > p.timeout {
				return fmt.Errorf("%w: waited %v for %s", backend.ErrTimeout, p.timeout, what)
			} else {
				timer.Reset(sleep)
			}
			select {
			case <-p.life.Done():
				return errProxyStopped
			case <-timer.C:
			}
			sleep = min(2*sleep, 50*time.Microsecond)
		}
	}
	return nil
}
