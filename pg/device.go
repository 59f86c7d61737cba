package pg

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend"
	"github.com/gotree/gotree/cuda"
)

// Device collectives: CUDA buffers run through cuda.RankComm on the
// caller's stream, like NCCL: the call enqueues the kernels and returns;
// the work happens when the stream gets there. The device path has its own
// links (devChannel, made on first use), so its proxies never share a link
// with the CPU path.

// DeviceArgs is one collective on CUDA buffers.
type DeviceArgs struct {
	Coll       algorithms.Collective
	Send, Recv uintptr // device addresses; equal for in place
	Count      int64   // elements, as the CPU collectives count them
	DType      algorithms.DType
	Op         algorithms.Op
	Root       int
	Device     int     // CUDA ordinal
	Stream     uintptr // CUstream; 0 is the legacy default stream
}

// devices holds the communicator's device path: one RankComm per CUDA
// ordinal it was used with, made on first use.
type devices struct {
	mu      sync.Mutex
	comms   map[int]*cuda.RankComm
	release map[int]func() error

	maxChannels int // GOTREE_MAX_NCHANNELS, else DefaultDeviceChannels
	graphOnce   sync.Once
	graph       *algorithms.Graph // the CPU graph's shape with maxChannels channels
	graphErr    error
	algoWarn    sync.Once // GOTREE_ALGO allows no device plan: said once
}

// DefaultDeviceChannels bounds the channels (thread blocks) of a device
// collective without GOTREE_MAX_NCHANNELS; the CPU path's default follows
// the CPUs instead.
const DefaultDeviceChannels = 16

// deviceGraph is the communicator's rings and trees with the device path's
// channel count.
func (c *Comm) deviceGraph() (*algorithms.Graph, error) {
	d := &c.devs
	d.graphOnce.Do(func() {
		d.graph, d.graphErr = algorithms.BuildGraph(algorithms.Layout{NodeOf: c.nodeOf, Channels: max(1, d.maxChannels/2), Pattern: algorithms.BalancedTree})
	})
	return d.graph, d.graphErr
}

// deviceLinks gives a RankComm the communicator's hosts and lazy links.
type deviceLinks struct{ c *Comm }

func (l deviceLinks) Rank() int { return l.c.rank }
func (l deviceLinks) Size() int { return l.c.nranks }
func (l deviceLinks) SameHost(peer int) bool {
	return l.c.peers[peer].HostID == l.c.peers[l.c.rank].HostID
}
func (l deviceLinks) Warn(msg string) { l.c.log.Warnf("%s", msg) }
func (l deviceLinks) DeviceLink(ch, peer int) (backend.Conn, error) {
	if ch < 0 || ch >= maxDevChannels {
		return nil, fmt.Errorf("%w: device channel %d not in 0..%d", ErrInvalidArgument, ch, maxDevChannels-1)
	}
	return l.c.lazyLink(linkKey{devChannel(ch), peer}, fmt.Sprintf("device channel %d", ch), nil)
}

// openGPU opens CUDA device ordinal for the device path: its primary
// context (the one torch uses) with the kernels loaded, a release, and
// where the kernels came from. Without a driver the error wraps
// ErrNotSupported and says why. Tests put the emulator here.
var openGPU = func(ordinal int, cfg Config) (cuda.GPU, func() error, string, error) {
	ctx, err := cuda.OpenDevice(cfg.LibCUDA, func(int) int { return ordinal })
	switch {
	case errors.Is(err, cuda.ErrNoDevice):
		return nil, nil, "", fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	case err != nil:
		return nil, nil, "", fmt.Errorf("%w: CUDA device %d: %v", ErrNotSupported, ordinal, err)
	}
	k, err := cuda.LoadKernels(ctx, cuda.KernelOptions{NVRTC: cfg.NVRTC, CacheDir: cfg.CacheDir})
	if err != nil {
		ctx.Release()
		return nil, nil, "", fmt.Errorf("CUDA device %d: loading the kernels: %w", ordinal, err)
	}
	return cuda.NewGPU(ctx, k), ctx.Release, k.Source, nil
}

// deviceComm returns the RankComm of a CUDA ordinal, made on first use.
func (c *Comm) deviceComm(ordinal int) (*cuda.RankComm, error) {
	d := &c.devs
	d.mu.Lock()
	defer d.mu.Unlock()
	if rc, ok := d.comms[ordinal]; ok {
		return rc, nil
	}
	gpu, release, source, err := openGPU(ordinal, c.cfg)
	if err != nil {
		return nil, fmt.Errorf("rank %d: %w", c.rank, err)
	}
	rc, err := cuda.NewRankComm(gpu, deviceLinks{c}, cuda.Config{}, c.cfg.Timeout)
	if err != nil {
		release()
		return nil, err
	}
	if d.comms == nil {
		d.comms, d.release = map[int]*cuda.RankComm{}, map[int]func() error{}
	}
	d.comms[ordinal], d.release[ordinal] = rc, release
	c.log.Infof("INIT", "CUDA device %d: kernels from %s", ordinal, source)
	return rc, nil
}

// closeDevices closes the device path (abort: make running kernels give
// up first). The communicators stay listed while they close, so that a
// failure meanwhile still interrupts their kernels.
func (c *Comm) closeDevices(abort bool) error {
	d := &c.devs
	d.mu.Lock()
	comms, release := d.comms, d.release
	d.mu.Unlock()
	var errs []error
	for ord, rc := range comms {
		if abort {
			errs = append(errs, rc.Abort("the communicator was aborted"))
		} else {
			errs = append(errs, rc.Close())
		}
		errs = append(errs, release[ord]())
	}
	d.mu.Lock()
	d.comms, d.release = nil, nil
	d.mu.Unlock()
	return errors.Join(errs...)
}

// interruptDevices makes the device path's kernels and proxies give up
// (the communicator failed: a peer may never launch again).
func (c *Comm) interruptDevices(err error) {
	d := &c.devs
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, rc := range d.comms {
		rc.Interrupt(err)
	}
}

// DeviceCollective enqueues a collective on CUDA buffers on a.Stream. It
// returns when the kernels are queued (the first call of a plan also makes
// its connections with the peers, which issue the same call); failures
// found later are returned by the following calls.
func (c *Comm) DeviceCollective(a DeviceArgs) error {
	c.mu.Lock()
	err := c.usable(a.Coll.String())
	c.mu.Unlock()
	if err != nil {
		return err
	}
	switch a.Coll {
	case algorithms.AllReduce, algorithms.Broadcast, algorithms.Reduce, algorithms.AllGather, algorithms.ReduceScatter:
	default:
		return fmt.Errorf("%w: rank %d: %v on CUDA buffers: the device path runs allreduce, broadcast, reduce, allgather and reducescatter", ErrNotSupported, c.rank, a.Coll)
	}
	if a.Root < 0 || a.Root >= c.nranks {
		return fmt.Errorf("%w: rank %d: %v: root %d not in [0, %d)", ErrInvalidArgument, c.rank, a.Coll, a.Root, c.nranks)
	}
	if a.Count < 0 {
		return fmt.Errorf("%w: rank %d: %v: count %d < 0", ErrInvalidArgument, c.rank, a.Coll, a.Count)
	}
	if a.Op == algorithms.PremulSum {
		return fmt.Errorf("%w: rank %d: %v: PREMUL_SUM on CUDA buffers (scale the input and use SUM)", ErrNotSupported, c.rank, a.Coll)
	}
	if err := algorithms.Supports(a.Op, a.DType); err != nil {
		return fmt.Errorf("%w: rank %d: %v: %v", ErrInvalidArgument, c.rank, a.Coll, err)
	}
	if a.Count > 0 && (a.Send == 0 || a.Recv == 0) {
		return fmt.Errorf("%w: rank %d: %v: null device buffer for %d elements", ErrInvalidArgument, c.rank, a.Coll, a.Count)
	}
	rc, err := c.deviceComm(a.Device)
	if err != nil {
		return err
	}
	if a.Count == 0 || c.nranks == 1 && a.Send == a.Recv {
		return rc.Err()
	}
	p, err := c.devicePlan(a)
	if err != nil {
		return fmt.Errorf("%w: rank %d: %v on CUDA buffers: no plan: %v", ErrInvalidArgument, c.rank, a.Coll, err)
	}
	id := c.flight.issue(flightCall{coll: a.Coll, count: a.Count, dt: a.DType, op: a.Op, root: a.Root, device: a.Device + 1})
	c.flight.start(id)
	c.flight.planned(id, p.Algo)
	err = c.enqueueDevice(a, rc, p)
	c.flight.end(id, err)
	return err
}

// enqueueDevice queues the plan p of the device collective a on its
// stream.
func (c *Comm) enqueueDevice(a DeviceArgs, rc *cuda.RankComm, p *algorithms.Plan) error {
	failed := func(err error) error {
		return fmt.Errorf("%w: rank %d: %v of %d x %v on CUDA device %d: %v", ErrRemote, c.rank, a.Coll, a.Count, a.DType, a.Device, err)
	}
	// The plans' in place is NCCL's layout: this rank's block of the
	// gathered or scattered buffer. With sendbuf = recvbuf the block
	// is at the start instead: move it there (ranks other than 0).
	in, out := cuda.DevicePtr(a.Send), cuda.DevicePtr(a.Recv)
	block := cuda.DevicePtr(int64(c.rank) * a.Count * int64(a.DType.Size()))
	bytes := uint64(a.Count) * uint64(a.DType.Size())
	switch {
	case a.Coll == algorithms.AllGather && in == out && block > 0:
		if err := rc.Copy(out+block, in, bytes, a.Stream); err != nil {
			return failed(err)
		}
		in = out + block
	case a.Coll == algorithms.ReduceScatter && in == out && block > 0:
		out = in + block
	}
	if err := rc.Enqueue(p, in, out, a.Stream); err != nil {
		return failed(err)
	}
	if out != cuda.DevicePtr(a.Recv) {
		if err := rc.Copy(cuda.DevicePtr(a.Recv), out, bytes, a.Stream); err != nil {
			return failed(err)
		}
	}
	return nil
}

// StagedArgs is a collective without a device path (all-to-all, gather,
// scatter) on CUDA buffers: the device buffers this rank has and their
// sizes in bytes (0 and 0 where it has none, like a scatter's send buffer
// off the root).
type StagedArgs struct {
	What                 string // the collective, for errors
	Send, Recv           uintptr
	SendBytes, RecvBytes uint64
	Device               int
	Stream               uintptr
}

// DeviceStaged runs a collective that has no device path on CUDA buffers
// through pinned host memory (cuda.RankComm.Staged): the send buffer is
// copied to the host after the work queued on a.Stream, issue starts the
// CPU collective on the host copies, and the result is copied back to the
// device. It returns when the result is in place, so it blocks the
// calling thread for the whole exchange; every byte crosses the host
// twice. Every rank must issue it in the same order as its other
// collectives, as always.
func (c *Comm) DeviceStaged(a StagedArgs, issue func(send, recv []byte) (*Request, error)) error {
	_, err := c.throughHost(a, issue, true)
	return err
}

// DeviceSend sends a.SendBytes of CUDA memory at a.Send through host
// memory: it copies them to the host after the work queued on a.Stream
// (waiting for the stream), hands a private copy to send (a CPU send,
// which may still be on its way when the next staged call reuses the
// pinned buffer) and returns send's request without waiting for it. So a
// device send, like a CPU one, never waits for its receiver.
func (c *Comm) DeviceSend(a StagedArgs, send func(host []byte) (*Request, error)) (*Request, error) {
	a.Recv, a.RecvBytes = 0, 0
	return c.throughHost(a, func(s, _ []byte) (*Request, error) {
		return send(append(make([]byte, 0, len(s)), s...))
	}, false)
}

// DeviceRecv receives a.RecvBytes into CUDA memory at a.Recv through host
// memory: recv (a CPU receive into a private host buffer) runs to its
// end, then the bytes are copied to the device on a.Stream (after the work
// queued there) and the stream is waited for. It blocks the calling thread
// until the message has arrived, so a rank must issue its sends before a
// receive that waits for a peer which itself receives first
// (batch_isend_irecv does). The request it returns is recv's, complete
// (its Source names the sender). The pinned buffer is not held while it
// waits: other threads' staged calls go on.
func (c *Comm) DeviceRecv(a StagedArgs, recv func(host []byte) (*Request, error)) (*Request, error) {
	a.Send, a.SendBytes = 0, 0
	if a.RecvBytes > 0 && a.Recv == 0 {
		return nil, fmt.Errorf("%w: rank %d: %s: null device receive buffer for %d bytes", ErrInvalidArgument, c.rank, a.What, a.RecvBytes)
	}
	rc, err := c.deviceComm(a.Device)
	if err != nil {
		return nil, err
	}
	if err := rc.HostWaitAllowed(a.Stream); err != nil {
		return nil, c.hostError(a, err)
	}
	if a.RecvBytes > 1<<40 {
		return nil, fmt.Errorf("%w: rank %d: %s: %d bytes is too large", ErrInvalidArgument, c.rank, a.What, a.RecvBytes)
	}
	host := make([]byte, a.RecvBytes)
	r, err := recv(host)
	if err != nil {
		return nil, err
	}
	if err := r.Wait(-1); err != nil {
		return nil, err
	}
	_, err = c.throughHost(a, func(_, pinned []byte) (*Request, error) {
		copy(pinned, host)
		return r, nil
	}, false)
	return r, err
}

// throughHost runs issue on host copies of a's device buffers (see
// DeviceStaged), waiting for its request when wait is set, and returns
// that request.
func (c *Comm) throughHost(a StagedArgs, issue func(send, recv []byte) (*Request, error), wait bool) (*Request, error) {
	c.mu.Lock()
	err := c.usable(a.What)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	for _, b := range []struct {
		p     uintptr
		n     uint64
		which string
	}{{a.Send, a.SendBytes, "send"}, {a.Recv, a.RecvBytes, "receive"}} {
		if b.n > 0 && b.p == 0 {
			return nil, fmt.Errorf("%w: rank %d: %s: null device %s buffer for %d bytes", ErrInvalidArgument, c.rank, a.What, b.which, b.n)
		}
	}
	rc, err := c.deviceComm(a.Device)
	if err != nil {
		return nil, err
	}
	var req *Request
	err = rc.Staged(cuda.DevicePtr(a.Send), cuda.DevicePtr(a.Recv), a.SendBytes, a.RecvBytes, a.Stream, func(send, recv []byte) error {
		r, err := issue(send, recv)
		if err != nil {
			return err
		}
		req = r
		if !wait {
			return nil
		}
		return r.Wait(-1)
	})
	if err != nil {
		return nil, c.hostError(a, err)
	}
	return req, nil
}

// hostError classifies the failure of an operation through host memory.
func (c *Comm) hostError(a StagedArgs, err error) error {
	switch {
	case errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrAborted) || errors.Is(err, ErrRemote) || errors.Is(err, ErrTimeout):
		return err // the CPU operation's, classified
	case errors.Is(err, cuda.ErrCapture):
		return fmt.Errorf("%w: %v", ErrNotSupported, err)
	}
	return fmt.Errorf("%w: rank %d: %s on CUDA device %d through host memory: %v", ErrSystem, c.rank, a.What, a.Device, err)
}

// DevicePlan is the plan a device collective with these arguments runs
// (the same on every rank), for tools that name it. It issues nothing.
func (c *Comm) DevicePlan(a DeviceArgs) (*algorithms.Plan, error) { return c.devicePlan(a) }

// devicePlanKey caches device plans (apart from the CPU ones) by what
// selects them, so that a repeated call does not choose again.
type devicePlanKey struct {
	coll  algorithms.Collective
	count int64
	dt    algorithms.DType
	op    algorithms.Op
	root  int
}

// devicePlan is the plan of a device collective (cached; see
// buildDevicePlan).
func (c *Comm) devicePlan(a DeviceArgs) (*algorithms.Plan, error) {
	v, err := c.plans.get(devicePlanKey{a.Coll, a.Count, a.DType, a.Op, a.Root}, func() (any, error) { return c.buildDevicePlan(a) })
	if err != nil {
		return nil, err
	}
	return v.(*algorithms.Plan), nil
}

// deviceChoiceInputs is what the cost model takes, besides the size, for
// a device collective: the device graph, its topology with GPU links
// (NVLink within a node, the network between nodes) and the algorithms
// and protocols that have device plans under GOTREE_ALGO and
// GOTREE_PROTO (LL not across nodes), with the channel limits.
func (c *Comm) deviceChoiceInputs(coll algorithms.Collective) (*algorithms.Graph, algorithms.CostTopo, algorithms.Constraints, error) {
	algos, err := algorithms.ParseAlgoSpec(c.cfg.Algo, coll)
	if err != nil {
		return nil, algorithms.CostTopo{}, algorithms.Constraints{}, err
	}
	protos, err := algorithms.ParseProtoSpec(c.cfg.Proto, coll)
	if err != nil {
		return nil, algorithms.CostTopo{}, algorithms.Constraints{}, err
	}
	protos &= 1<<algorithms.LL | 1<<algorithms.Simple // LL128 runs as Simple in the kernels
	g, err := c.deviceGraph()
	if err != nil {
		return nil, algorithms.CostTopo{}, algorithms.Constraints{}, err
	}
	topo := algorithms.TopoOfGraph(g, algorithms.NVLink, algorithms.Net)
	if topo.NNodes > 1 {
		protos &= 1 << algorithms.Simple
	}
	if coll != algorithms.AllReduce {
		algos &= 1 << algorithms.Ring
	}
	algos &^= 1<<algorithms.HalvingDoubling | 1<<algorithms.Direct | 1<<algorithms.Shared | 1<<algorithms.OneShot // no device plan
	if algos == 0 {
		// None left (0 would mean "all" to Choose): the ring, said once.
		c.devs.algoWarn.Do(func() {
			c.log.Warnf("GOTREE_ALGO=%q allows nothing that runs %v on CUDA tensors (device plans: the ring, and the tree for allreduce): using the ring", c.cfg.Algo, coll)
		})
		algos = 1 << algorithms.Ring
	}
	if protos == 0 {
		protos = 1 << algorithms.Simple
	}
	return g, topo, algorithms.Constraints{Algos: algos, Protos: protos, MinChannels: c.cfg.MinChannels, MaxChannels: c.devs.maxChannels}, nil
}

// deviceChoice is the device path's prediction for coll moving bytes
// (the ring on Simple where the model has none), its channels within the
// device graph's, with that graph and the model's inputs.
func (c *Comm) deviceChoice(coll algorithms.Collective, bytes int64) (*algorithms.Graph, algorithms.CostTopo, algorithms.Constraints, algorithms.Prediction, error) {
	g, topo, cons, err := c.deviceChoiceInputs(coll)
	if err != nil {
		return nil, topo, cons, algorithms.Prediction{}, err
	}
	pr, err := c.tuning.Choose(coll, topo, bytes, cons)
	if err != nil {
		pr = algorithms.Prediction{Algo: algorithms.Ring, Proto: algorithms.Simple, Channels: 1}
	}
	pr.Channels = min(max(pr.Channels, 1), g.Channels)
	return g, topo, cons, pr, nil
}

// buildDevicePlan picks the algorithm and protocol with NCCL's constants
// for GPU links (NVLink within a node, the network between nodes; LL does
// not cross nodes here) under GOTREE_ALGO, GOTREE_PROTO and the channel
// limits, and builds the plan with chunks that fit the kernels' FIFOs.
func (c *Comm) buildDevicePlan(a DeviceArgs) (*algorithms.Plan, error) {
	bytes := c.modelBytes(a.Coll, a.Count, a.DType)
	g, _, _, pr, err := c.deviceChoice(a.Coll, bytes)
	if err != nil {
		return nil, err
	}
	cfg := cuda.Config{}.Defaults()
	chunk := int64(cuda.MaxSlotsPerStep * cfg.SimpleSlotBytes)
	if pr.Proto == algorithms.LL {
		chunk = int64(cuda.MaxSlotsPerStep * cfg.LLSlotLines * 8)
	}
	req := algorithms.PlanRequest{Coll: a.Coll, Algo: pr.Algo, Proto: pr.Proto, Count: a.Count, DType: a.DType, Op: a.Op, Root: a.Root,
		ChunkBytes: chunk, Channels: pr.Channels, KeepChannels: c.cfg.MinChannels > 1}
	c.log.Infof("TUNING", "%v %d bytes on CUDA buffers: %v/%v on %d channels, predicted %.1f us", a.Coll, bytes, pr.Algo, pr.Proto, req.Channels, pr.TimeUs)
	return algorithms.BuildPlan(g, req)
}
