package cuda

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend"
)

// GPU is what a RankComm needs of its GPU: memory, IPC handles, pinned
// host memory mapped into the device, and launches. NewGPU gives it for
// a context and its kernels; tests run it on an emulator.
type GPU interface {
	Alloc(n uint64) (DevicePtr, error) // zeroed device memory
	Free(p DevicePtr) error
	Upload(dst DevicePtr, src []byte) error
	// HostAlloc returns n zeroed bytes of pinned host memory and the
	// address the device reaches them at.
	HostAlloc(n int) (host []byte, dev DevicePtr, err error)
	HostFree(host []byte) error
	IpcExport(p DevicePtr) (IpcMemHandle, error)
	IpcOpen(h IpcMemHandle) (DevicePtr, error)
	IpcClose(p DevicePtr) error
	// Launch runs kernel name on grid blocks of block threads on stream (a
	// CUstream; 0 is the legacy default stream).
	Launch(name string, grid, block int, stream uintptr, params ...[]byte) error
	// Copy queues a copy of n bytes of device memory on stream.
	Copy(dst, src DevicePtr, n uint64, stream uintptr) error
	// CopyToHost and CopyFromHost queue a copy between device memory and
	// pinned host memory from HostAlloc on stream.
	CopyToHost(dst []byte, src DevicePtr, stream uintptr) error
	CopyFromHost(dst DevicePtr, src []byte, stream uintptr) error
	// Ordinal is the device's CUDA ordinal.
	Ordinal() int
	// BusID is the device's PCI address ("" where unknown): what says,
	// across processes whose ordinals may differ, that two use one GPU.
	BusID() string
	// Capturing says whether stream is capturing a CUDA graph.
	Capturing(stream uintptr) (bool, error)
	// MaxBlocks is how many blocks of threads threads the device runs at
	// once.
	MaxBlocks(threads int) int
	// Synchronize waits for all work of the context.
	Synchronize() error
	// SyncStream waits for the work queued on stream so far.
	SyncStream(stream uintptr) error
}

// Links is what a RankComm needs of its host communicator.
type Links interface {
	Rank() int
	Size() int
	// SameHost says whether peer runs on this rank's node (CUDA IPC
	// reaches it); other peers are reached through host-staged proxies.
	SameHost(peer int) bool
	// DeviceLink is the host link to peer reserved for the device path's
	// channel ch, made on first use (both ranks ask for it).
	DeviceLink(ch, peer int) (backend.Conn, error)
	// Warn reports something that works but not as the user expects.
	Warn(msg string)
}

// RankComm is one rank of a communicator whose ranks are separate
// processes, each with its GPU (or sharing one): the kernels of
// kernels/gotree.cu run this rank's part of each plan on the caller's
// stream. A connection to a rank of the same node lives in the receiver's
// device memory, opened by the sender through CUDA IPC; a connection to
// another node is host-staged (proxy.go). Connections are made when a plan
// first needs them: every rank prepares the same plans in the same order,
// because collectives are issued in the same order.
//
// Errors that happen after a launch returned (a kernel's wait timed out,
// a proxy lost its peer) are kept: Err reports them, and every later
// Enqueue fails with them.
type RankComm struct {
	dev     GPU
	links   Links
	pid     int // this process (tests give ranks distinct ones to go through IPC)
	cfg     Config
	rank, n int
	timeout time.Duration

	status []byte    // host-mapped: error word at 0, abort flag at 64
	devSt  DevicePtr // its device address

	life   context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	conns   map[ConnKey]ConnMem
	proxies map[ConnKey]*proxy
	plans   map[*algorithms.Plan]*rankPlan
	streams map[uintptr]bool // streams launched on
	owned   []DevicePtr      // device FIFOs this rank allocated
	opened  []DevicePtr      // peers' FIFOs opened through IPC
	hosts   [][]byte         // host FIFOs
	seq     uint64

	failMu sync.Mutex
	failed error          // first asynchronous failure
	staged []backend.Conn // the proxies' links, aborted at the first failure

	last atomic.Pointer[launch] // the last launch, named in kernel errors

	sharedGPUOnce sync.Once // the warning that another process uses this GPU

	stageMu sync.Mutex // one Staged call at a time; Close frees stage under it
	stage   []byte     // pinned host memory of Staged calls, the largest so far
}

// launch is a collective as Enqueue launched it.
type launch struct {
	seq uint64
	rp  *rankPlan
}

// rankPlan is a plan's tables on the device and the host-staged
// connections' slices.
type rankPlan struct {
	kernel, finalize           string
	proto                      uint32
	steps, channels, connTable DevicePtr
	allocs                     []DevicePtr
	staged                     []stagedConn // host-staged connections, in table order
	peers                      []int        // ranks this rank's part talks to
	coll                       algorithms.Collective
}

// stagedConn is a host-staged connection and the slices one run of the
// plan moves over it.
type stagedConn struct {
	key    ConnKey
	slices []int
}

// NewRankComm makes this rank's device communicator. timeout bounds every
// wait of a proxy and of the kernels.
func NewRankComm(dev GPU, links Links, cfg Config, timeout time.Duration) (*RankComm, error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	cfg.TimeoutNs = uint64(timeout.Nanoseconds())
	host, d, err := dev.HostAlloc(128)
	if err != nil {
		return nil, fmt.Errorf("gotree/cuda: rank %d: status word: %w", links.Rank(), err)
	}
	life, cancel := context.WithCancel(context.Background())
	return &RankComm{dev: dev, links: links, cfg: cfg, pid: os.Getpid(), rank: links.Rank(), n: links.Size(), timeout: timeout,
		status: host, devSt: d, life: life, cancel: cancel,
		conns: map[ConnKey]ConnMem{}, proxies: map[ConnKey]*proxy{}, plans: map[*algorithms.Plan]*rankPlan{}, streams: map[uintptr]bool{}}, nil
}

func (c *RankComm) errWord() *uint32   { return (*uint32)(unsafe.Pointer(&c.status[0])) }
func (c *RankComm) abortWord() *uint32 { return (*uint32)(unsafe.Pointer(&c.status[64])) }

// fail records an asynchronous failure and makes the kernels give up.
func (c *RankComm) fail(err error) {
	c.failMu.Lock()
	defer c.failMu.Unlock()
	if c.failed == nil {
		c.failed = fmt.Errorf("gotree/cuda: rank %d: %w", c.rank, err)
		// The peers' proxies learn it at once instead of at their timeout.
		for _, l := range c.staged {
			l.Abort(c.failed.Error())
		}
	}
	atomic.StoreUint32(c.abortWord(), 1)
}

// Interrupt fails the communicator with err: running kernels and proxies
// give up at once, and later calls return err. It may be called at any
// time, also during Close.
func (c *RankComm) Interrupt(err error) { c.fail(err) }

// Err reports the first failure seen after a launch: a kernel's error
// word or a proxy's error. nil while all is well.
func (c *RankComm) Err() error {
	c.failMu.Lock()
	defer c.failMu.Unlock()
	if c.failed != nil {
		return c.failed
	}
	switch code := atomic.LoadUint32(c.errWord()); code {
	case 0:
		return nil
	case KernelErrTimeout:
		c.failed = fmt.Errorf("gotree/cuda: rank %d: %s: a kernel's FIFO wait timed out after %v (a peer did not launch the same collective, or it failed)", c.rank, c.lastLaunch(), c.timeout)
	case KernelErrAbort:
		c.failed = fmt.Errorf("gotree/cuda: rank %d: %s: the kernel was aborted", c.rank, c.lastLaunch())
	default:
		c.failed = fmt.Errorf("gotree/cuda: rank %d: %s: kernel error %d", c.rank, c.lastLaunch(), code)
	}
	return c.failed
}

// ranksText is "rank 1" or "ranks 1, 2".
func ranksText(rs []int) string {
	if len(rs) == 1 {
		return fmt.Sprintf("rank %d", rs[0])
	}
	return "ranks " + strings.Trim(strings.Join(strings.Fields(fmt.Sprint(rs)), ", "), "[]")
}

// lastLaunch names the last launch: "collective #3 (allreduce with ranks 1, 2)".
func (c *RankComm) lastLaunch() string {
	l := c.last.Load()
	if l == nil {
		return "no collective launched"
	}
	return fmt.Sprintf("collective #%d (%v with %s)", l.seq, l.rp.coll, ranksText(l.rp.peers))
}

// Enqueue launches this rank's part of p on stream: in and out are the
// rank's input and output buffers (equal for in place; see Comm.Enqueue
// for in-place allgather and reducescatter). The call returns once the
// work is queued; Err reports later failures. An Avg result is divided by
// the rank count on the same stream.
func (c *RankComm) Enqueue(p *algorithms.Plan, in, out DevicePtr, stream uintptr) error {
	if err := c.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.Channels == 0 {
		return nil
	}
	rp, err := c.prepare(p)
	if err != nil {
		return err
	}
	if len(rp.staged) > 0 {
		// A captured launch replays without the host: the proxies would
		// not know. Within a node a plan replays as it was captured.
		if capturing, err := c.dev.Capturing(stream); err != nil || capturing {
			if err == nil {
				err = fmt.Errorf("gotree/cuda: rank %d: %v across nodes cannot be captured in a CUDA graph: its host-staged proxies run per call (capture within one node works)", c.rank, p.Coll)
			}
			return err
		}
	}
	c.seq++
	c.last.Store(&launch{c.seq, rp})
	for _, s := range rp.staged {
		select {
		case c.proxies[s.key].jobs <- proxyJob{seq: c.seq, slices: s.slices}:
		case <-c.life.Done():
			return fmt.Errorf("gotree/cuda: rank %d: the communicator was closed", c.rank)
		}
	}
	a := KernelArgs{In: in, Out: out, Steps: rp.steps, Channels: rp.channels, Conns: rp.connTable,
		Err: c.devSt, AbortFlag: c.devSt + 64, TimeoutNs: c.cfg.TimeoutNs, SimpleSlotBytes: uint32(c.cfg.SimpleSlotBytes),
		LLSlotLines: uint32(c.cfg.LLSlotLines), Proto: rp.proto, Group0Threads: uint32(GroupSplit(p.Proto, c.cfg.Threads))}
	c.streams[stream] = true
	if err := c.dev.Launch(rp.kernel, p.Channels, c.cfg.Threads, stream, a.Bytes()); err != nil {
		c.fail(err)
		return c.Err()
	}
	if rp.finalize != "" && (p.Coll != algorithms.Reduce || c.rank == p.Root) {
		_, outN := p.BufferCounts()
		bytes := uint64(outN) * uint64(p.DType.Size())
		if err := c.dev.Launch(rp.finalize, finalizeBlocks(bytes, p.DType), 256, stream,
			ArgU64(uint64(out)), ArgU64(bytes), ArgU32(uint32(c.n))); err != nil {
			c.fail(err)
			return c.Err()
		}
	}
	return nil
}

// Copy queues a device-to-device copy of n bytes on stream (for callers
// that move a buffer into the layout a plan wants).
func (c *RankComm) Copy(dst, src DevicePtr, n uint64, stream uintptr) error {
	if err := c.Err(); err != nil {
		return err
	}
	return c.dev.Copy(dst, src, n, stream)
}

// ErrCapture is returned for work that a CUDA graph capture cannot hold.
var ErrCapture = errors.New("gotree/cuda: not capturable")

// HostWaitAllowed returns ErrCapture when stream is capturing a CUDA graph
// (a capture cannot wait for the host, as Staged does), and the
// communicator's failure if it has one.
func (c *RankComm) HostWaitAllowed(stream uintptr) error {
	if err := c.Err(); err != nil {
		return err
	}
	if capturing, err := c.dev.Capturing(stream); err != nil || capturing {
		if err == nil {
			err = fmt.Errorf("%w: rank %d: this operation runs through host memory on CUDA buffers, which a CUDA graph capture cannot do", ErrCapture, c.rank)
		}
		return err
	}
	return nil
}

// Staged runs work on host copies of device buffers, for collectives
// without a device path: it copies sendBytes at send into pinned host
// memory on stream (after the work queued there so far), waits for the
// stream, calls work with that copy and a host buffer of recvBytes for the
// result, then copies the result to recv on stream and waits again. So,
// unlike Enqueue, it returns with the data in place, and it blocks the
// calling thread for as long as work takes. A stream that captures a CUDA
// graph is refused (a capture cannot wait for the host). The pinned
// buffer stays for the next call (the largest so far) until Close.
func (c *RankComm) Staged(send, recv DevicePtr, sendBytes, recvBytes uint64, stream uintptr, work func(send, recv []byte) error) error {
	if err := c.HostWaitAllowed(stream); err != nil {
		return err
	}
	c.stageMu.Lock()
	defer c.stageMu.Unlock()
	total := sendBytes + recvBytes
	if uint64(len(c.stage)) < total {
		if c.stage != nil {
			if err := c.dev.HostFree(c.stage); err != nil {
				return err
			}
			c.stage = nil
		}
		host, _, err := c.dev.HostAlloc(int(total))
		if err != nil {
			return fmt.Errorf("gotree/cuda: rank %d: %d bytes of pinned host memory for a host-staged collective: %w", c.rank, total, err)
		}
		c.stage = host
	}
	hostSend, hostRecv := c.stage[:sendBytes], c.stage[sendBytes:total]
	if sendBytes > 0 {
		if err := c.dev.CopyToHost(hostSend, send, stream); err != nil {
			return err
		}
		if err := c.dev.SyncStream(stream); err != nil {
			return err
		}
	}
	if err := work(hostSend, hostRecv); err != nil {
		return err
	}
	if recvBytes > 0 {
		if err := c.dev.CopyFromHost(recv, hostRecv, stream); err != nil {
			return err
		}
		if err := c.dev.SyncStream(stream); err != nil {
			return err
		}
	}
	return nil
}

// finalizeBlocks is the grid of a finalize kernel over bytes of dt.
func finalizeBlocks(bytes uint64, dt algorithms.DType) int {
	return int(min(1024, max(1, (bytes/uint64(dt.Size())+255)/256)))
}

// planKernels checks that the kernels can run p's steps with cfg's FIFOs
// and names its kernels.
func planKernels(p *algorithms.Plan, cfg Config) (kernel, finalize string, err error) {
	if err := CheckSlices(p, cfg.SimpleSlotBytes, cfg.LLSlotLines); err != nil {
		return "", "", err
	}
	if kernel, err = KernelName(p.DType, p.Op, p.Coll.Reduces()); err != nil {
		return "", "", err
	}
	if p.Coll.Reduces() {
		finalize = FinalizeKernel(p.DType, p.Op)
	}
	return kernel, finalize, nil
}

// maxRankPlans bounds the plans whose tables stay on the device.
const maxRankPlans = 512

// prepare uploads p's tables and makes the connections it needs (once
// per plan; c.mu held).
func (c *RankComm) prepare(p *algorithms.Plan) (*rankPlan, error) {
	if rp, ok := c.plans[p]; ok {
		return rp, nil
	}
	if p.NRanks != c.n {
		return nil, fmt.Errorf("gotree/cuda: plan for %d ranks on a communicator of %d", p.NRanks, c.n)
	}
	if len(c.plans) >= maxRankPlans {
		// Many shapes (the caller's plan cache turned over): drop every
		// plan's tables once this rank's launches are done (not the whole
		// context's: ranks sharing it may be waiting for this one).
		// Connections stay.
		for s := range c.streams {
			if err := c.dev.SyncStream(s); err != nil {
				return nil, err
			}
		}
		for q, rp := range c.plans {
			for _, d := range rp.allocs {
				c.dev.Free(d)
			}
			delete(c.plans, q)
		}
	}
	if maxB := c.dev.MaxBlocks(c.cfg.Threads); p.Channels > maxB {
		return nil, fmt.Errorf("gotree/cuda: plan needs %d channels, each a resident block; the device runs %d", p.Channels, maxB)
	}
	kernel, finalize, err := planKernels(p, c.cfg)
	if err != nil {
		return nil, err
	}
	t, err := EncodeRank(p, c.rank)
	if err != nil {
		return nil, err
	}
	rp := &rankPlan{kernel: kernel, finalize: finalize, proto: protoOf(p.Proto), coll: p.Coll}
	slices := SliceSchedule(p, c.rank, c.cfg.SimpleSlotBytes)
	seen := map[int]bool{}
	for _, ref := range t.Conns {
		peer := peerOf(ref)
		if !seen[peer] {
			seen[peer] = true
			rp.peers = append(rp.peers, peer)
		}
		if !c.links.SameHost(peer) {
			if p.Proto == algorithms.LL {
				return nil, fmt.Errorf("gotree/cuda: rank %d: the LL protocol does not cross nodes (rank %d is on another node); use Simple", c.rank, peer)
			}
			rp.staged = append(rp.staged, stagedConn{ref.Key, slices[ref.Key]})
		}
	}
	sort.Ints(rp.peers)
	if err := c.connect(t.Conns); err != nil {
		c.fail(err)
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			for _, d := range rp.allocs {
				c.dev.Free(d)
			}
		}
	}()
	connTab := EncodeConns(t, func(k ConnKey) ConnMem { return c.conns[k] })
	var addrs []DevicePtr
	addrs, rp.allocs, err = uploadTables(c.dev, t.Steps, t.Channels, connTab)
	if err != nil {
		return nil, err
	}
	rp.steps, rp.channels, rp.connTable = addrs[0], addrs[1], addrs[2]
	c.plans[p] = rp
	ok = true
	return rp, nil
}

// uploadTables copies encoded tables to fresh device memory: each table's
// address (0 for an empty one) and the allocations made, also on error.
func uploadTables(dev GPU, tables ...[]byte) (addrs, allocs []DevicePtr, err error) {
	addrs = make([]DevicePtr, len(tables))
	for i, b := range tables {
		if len(b) == 0 {
			continue
		}
		d, err := dev.Alloc(uint64(len(b)))
		if err != nil {
			return nil, allocs, err
		}
		allocs = append(allocs, d)
		if err := dev.Upload(d, b); err != nil {
			return nil, allocs, err
		}
		addrs[i] = d
	}
	return addrs, allocs, nil
}

func peerOf(ref ConnRef) int {
	if ref.Role == roleSend {
		return ref.Key.To
	}
	return ref.Key.From
}

// ipcMsg is what a receiver sends the sender of a connection on the same
// node: the connection, the FIFO's size, the receiver's process id,
// device and address of the FIFO (a rank in the same process uses the
// address: CUDA IPC does not open a process's own memory), its IPC
// handle, and the device's PCI address.
const ipcMsgBytes = 4 + 12 + 8 + 4 + 4 + 8 + 64 + busIDBytes

const busIDBytes = 16 // "dddd:bb:dd.f", zero-padded

const ipcMagic = 0x47544950 // "GTIP"

// connect makes the connections of refs that do not exist yet: for a
// same-node peer, the receiver allocates the FIFO and sends its IPC handle
// to the sender, which opens it; for a peer on another node, each end
// allocates a host FIFO and starts its proxy. All handles are sent before
// any is awaited, so no two ranks wait for each other.
func (c *RankComm) connect(refs []ConnRef) error {
	fifoBytes := c.cfg.fifoBytes()
	var await []ConnRef
	for _, ref := range refs {
		if _, ok := c.conns[ref.Key]; ok {
			continue
		}
		peer := peerOf(ref)
		link, err := c.links.DeviceLink(ref.Key.Channel, peer)
		if err != nil {
			return fmt.Errorf("link to rank %d for channel %d: %w", peer, ref.Key.Channel, err)
		}
		if !c.links.SameHost(peer) {
			host, dev, err := c.dev.HostAlloc(hostFIFOBytes(c.cfg.SimpleSlotBytes))
			if err != nil {
				return fmt.Errorf("host FIFO for rank %d: %w", peer, err)
			}
			c.hosts = append(c.hosts, host)
			f := &hostFIFO{mem: host, dev: dev, slot: c.cfg.SimpleSlotBytes}
			c.conns[ref.Key] = f.connMem(peer)
			c.proxies[ref.Key] = newProxy(c.life, ref.Key, ref.Role == roleSend, f, link, c.timeout, c.fail)
			c.failMu.Lock()
			c.staged = append(c.staged, link)
			c.failMu.Unlock()
			continue
		}
		if ref.Role == roleSend {
			await = append(await, ref)
			continue
		}
		d, err := c.dev.Alloc(fifoBytes)
		if err != nil {
			return fmt.Errorf("FIFO for rank %d: %w", peer, err)
		}
		c.owned = append(c.owned, d)
		c.conns[ref.Key] = fifoAt(d, c.cfg, peer)
		h, err := c.dev.IpcExport(d)
		if err != nil {
			return err
		}
		msg := make([]byte, ipcMsgBytes)
		binary.LittleEndian.PutUint32(msg, ipcMagic)
		for i, v := range []int{ref.Key.Channel, ref.Key.From, ref.Key.To} {
			binary.LittleEndian.PutUint32(msg[4+4*i:], uint32(v))
		}
		binary.LittleEndian.PutUint64(msg[16:], fifoBytes)
		binary.LittleEndian.PutUint32(msg[24:], uint32(c.pid))
		binary.LittleEndian.PutUint32(msg[28:], uint32(c.dev.Ordinal()))
		binary.LittleEndian.PutUint64(msg[32:], uint64(d))
		copy(msg[40:], h[:])
		copy(msg[104:104+busIDBytes], c.dev.BusID())
		ctx, cancel := context.WithTimeout(c.life, c.timeout)
		err = link.Send(ctx, ipcMagic, msg)
		cancel()
		if err != nil {
			return fmt.Errorf("sending the FIFO of channel %d to rank %d: %w", ref.Key.Channel, peer, err)
		}
	}
	for _, ref := range await {
		if err := c.openPeerFIFO(ref, fifoBytes); err != nil {
			return err
		}
	}
	return nil
}

// fifoBytes is the size of a device FIFO: Simple slots, LL slots, then
// tail and head 128 bytes apart (docs/cuda.md, "Buffer layout").
func (c Config) fifoBytes() uint64 {
	return uint64(NSlots*c.SimpleSlotBytes + NSlots*c.LLSlotLines*LLLineBytes + 256)
}

// fifoAt is the layout of a device FIFO at d.
func fifoAt(d DevicePtr, cfg Config, peer int) ConnMem {
	simple := DevicePtr(NSlots * cfg.SimpleSlotBytes)
	ll := DevicePtr(NSlots * cfg.LLSlotLines * LLLineBytes)
	return ConnMem{Simple: d, LL: d + simple, Tail: d + simple + ll, Head: d + simple + ll + 128, Peer: peer}
}

// openPeerFIFO receives the receiver's handle for the connection ref sends
// on and opens it.
func (c *RankComm) openPeerFIFO(ref ConnRef, fifoBytes uint64) error {
	peer := ref.Key.To
	link, err := c.links.DeviceLink(ref.Key.Channel, peer)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.life, c.timeout)
	defer cancel()
	b, tag, err := link.Recv(ctx)
	if err != nil {
		return fmt.Errorf("waiting for rank %d's FIFO of channel %d: %w", peer, ref.Key.Channel, err)
	}
	defer link.Release()
	if tag != ipcMagic || len(b) != ipcMsgBytes || binary.LittleEndian.Uint32(b) != ipcMagic {
		return fmt.Errorf("%w: rank %d sent %d bytes (tag %#x) where the IPC handle of a FIFO belongs", backend.ErrProto, peer, len(b), tag)
	}
	got := ConnKey{int(binary.LittleEndian.Uint32(b[4:])), int(binary.LittleEndian.Uint32(b[8:])), int(binary.LittleEndian.Uint32(b[12:]))}
	if got != ref.Key || binary.LittleEndian.Uint64(b[16:]) != fifoBytes {
		return fmt.Errorf("%w: rank %d sent the FIFO of %+v (%d bytes), this rank expected %+v (%d bytes): the ranks run different plans or configurations",
			backend.ErrProto, peer, got, binary.LittleEndian.Uint64(b[16:]), ref.Key, fifoBytes)
	}
	pid, dev := int(binary.LittleEndian.Uint32(b[24:])), int(binary.LittleEndian.Uint32(b[28:]))
	if pid == c.pid {
		// Ranks as threads of one process: the address is valid here.
		if dev != c.dev.Ordinal() {
			return fmt.Errorf("ranks %d and %d are threads of one process on different GPUs (%d and %d): the device path needs a process per GPU, or ranks sharing one GPU",
				c.rank, peer, c.dev.Ordinal(), dev)
		}
		c.conns[ref.Key] = fifoAt(DevicePtr(binary.LittleEndian.Uint64(b[32:])), c.cfg, peer)
		return nil
	}
	if bus := string(bytes.TrimRight(b[104:104+busIDBytes], "\x00")); bus != "" && bus == c.dev.BusID() {
		c.sharedGPUOnce.Do(func() {
			c.links.Warn(fmt.Sprintf("ranks %d and %d are processes %d and %d on one GPU (%s): "+
				"kernels of two processes do not run at once, so each collective between them waits for the "+
				"driver to switch (about 5 ms a call on an H200, whatever its size); give each rank its own GPU",
				c.rank, peer, c.pid, pid, bus))
		})
	}
	var h IpcMemHandle
	copy(h[:], b[40:])
	d, err := c.dev.IpcOpen(h)
	if err != nil {
		return fmt.Errorf("opening rank %d's FIFO of channel %d: %w", peer, ref.Key.Channel, err)
	}
	c.opened = append(c.opened, d)
	c.conns[ref.Key] = fifoAt(d, c.cfg, peer)
	return nil
}

// Forget frees a plan's device tables; call it when the plan's launches
// have finished and it will not run again.
func (c *RankComm) Forget(p *algorithms.Plan) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rp, ok := c.plans[p]; ok {
		for _, d := range rp.allocs {
			c.dev.Free(d)
		}
		delete(c.plans, p)
	}
}

// Abort makes the running kernels and proxies give up (their waits fail at
// once), then closes.
func (c *RankComm) Abort(reason string) error {
	c.fail(errors.New(reason))
	return c.Close()
}

// Close waits for the context's work, stops the proxies and frees the
// communicator's memory. The links belong to the caller.
func (c *RankComm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel == nil {
		return nil
	}
	// Launched kernels end (a failed communicator's gave up at its abort
	// flag) before their memory goes.
	errs := []error{c.dev.Synchronize()}
	c.cancel()
	for _, p := range c.proxies {
		<-p.done
	}
	for _, rp := range c.plans {
		for _, d := range rp.allocs {
			errs = append(errs, c.dev.Free(d))
		}
	}
	for _, d := range c.opened {
		errs = append(errs, c.dev.IpcClose(d))
	}
	for _, d := range c.owned {
		errs = append(errs, c.dev.Free(d))
	}
	for _, h := range c.hosts {
		errs = append(errs, c.dev.HostFree(h))
	}
	c.stageMu.Lock()
	if c.stage != nil {
		errs = append(errs, c.dev.HostFree(c.stage))
		c.stage = nil
	}
	c.stageMu.Unlock()
	c.failMu.Lock()
	errs = append(errs, c.dev.HostFree(c.status))
	c.status = make([]byte, 128) // Err and fail keep working, on Go memory
	c.failMu.Unlock()
	c.fail(errors.New("the communicator was closed"))
	c.plans, c.proxies, c.conns, c.opened, c.owned, c.hosts, c.cancel = nil, nil, nil, nil, nil, nil, nil
	return errors.Join(errs...)
}
