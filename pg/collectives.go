package pg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend"
	"github.com/gotree/gotree/backend/reduce"
)

// The collective API. Buffers are byte views of the caller's memory (for
// the C ABI, C memory); they must stay valid until the request completes.
// send and recv may be the same memory (in place).

// AllReduce reduces count elements over all ranks into every rank's recv.
func (c *Comm) AllReduce(send, recv []byte, count int64, dt algorithms.DType, op algorithms.Op) (*Request, error) {
	if err := algorithms.Supports(op, dt); err != nil {
		return nil, fmt.Errorf("%w: allreduce: %v", ErrInvalidArgument, err)
	}
	if op == algorithms.PremulSum {
		return nil, fmt.Errorf("%w: allreduce: premul_sum needs a factor; not accepted by this entry point", ErrNotSupported)
	}
	if err := checkLen("allreduce", "sendbuf", send, count, dt); err != nil {
		return nil, err
	}
	if err := checkLen("allreduce", "recvbuf", recv, count, dt); err != nil {
		return nil, err
	}
	return c.enqueue(collArgs{coll: algorithms.AllReduce, count: count, dt: dt, op: op, in: send, out: recv, inPlace: backend.SameMemory(send, recv)})
}

// Broadcast copies root's send into every rank's recv.
func (c *Comm) Broadcast(send, recv []byte, count int64, dt algorithms.DType, root int) (*Request, error) {
	if !dt.Valid() {
		return nil, fmt.Errorf("%w: broadcast: unsupported dtype %v", ErrInvalidArgument, dt)
	}
	if root < 0 || root >= c.nranks {
		return nil, fmt.Errorf("%w: broadcast: root %d is outside [0, %d)", ErrInvalidArgument, root, c.nranks)
	}
	if c.rank == root {
		if err := checkLen("broadcast", "sendbuf", send, count, dt); err != nil {
			return nil, err
		}
	}
	if err := checkLen("broadcast", "recvbuf", recv, count, dt); err != nil {
		return nil, err
	}
	return c.enqueue(collArgs{coll: algorithms.Broadcast, count: count, dt: dt, root: root, in: send, out: recv})
}

// AllGather concatenates every rank's count elements into recv, in rank
// order (recv holds nranks*count elements).
func (c *Comm) AllGather(send, recv []byte, count int64, dt algorithms.DType) (*Request, error) {
	if !dt.Valid() {
		return nil, fmt.Errorf("%w: allgather: unsupported dtype %v", ErrInvalidArgument, dt)
	}
	if err := checkLen("allgather", "sendbuf", send, count, dt); err != nil {
		return nil, err
	}
	if err := checkLen("allgather", "recvbuf", recv, count*int64(c.nranks), dt); err != nil {
		return nil, err
	}
	return c.enqueue(collArgs{coll: algorithms.AllGather, count: count, dt: dt, in: send, out: recv})
}

// Reduce reduces count elements over all ranks into root's recv (recv is
// not written elsewhere).
func (c *Comm) Reduce(send, recv []byte, count int64, dt algorithms.DType, op algorithms.Op, root int) (*Request, error) {
	if err := algorithms.Supports(op, dt); err != nil {
		return nil, fmt.Errorf("%w: reduce: %v", ErrInvalidArgument, err)
	}
	if err := c.checkRoot("reduce", root); err != nil {
		return nil, err
	}
	if err := checkLen("reduce", "sendbuf", send, count, dt); err != nil {
		return nil, err
	}
	if c.rank == root {
		if err := checkLen("reduce", "recvbuf", recv, count, dt); err != nil {
			return nil, err
		}
	} else {
		recv = nil // the ring reduce writes only the root's output
	}
	return c.enqueue(collArgs{coll: algorithms.Reduce, count: count, dt: dt, op: op, root: root, in: send, out: recv})
}

// ReduceScatter reduces nranks*count elements over all ranks and leaves
// block r (count elements) on rank r.
func (c *Comm) ReduceScatter(send, recv []byte, count int64, dt algorithms.DType, op algorithms.Op) (*Request, error) {
	if err := algorithms.Supports(op, dt); err != nil {
		return nil, fmt.Errorf("%w: reducescatter: %v", ErrInvalidArgument, err)
	}
	if err := checkLen("reducescatter", "sendbuf", send, count*int64(c.nranks), dt); err != nil {
		return nil, err
	}
	if err := checkLen("reducescatter", "recvbuf", recv, count, dt); err != nil {
		return nil, err
	}
	return c.enqueue(collArgs{coll: algorithms.ReduceScatter, count: count, dt: dt, op: op, in: send, out: recv})
}

// Barrier completes once every rank has entered it.
func (c *Comm) Barrier() (*Request, error) {
	b := make([]byte, 1)
	return c.enqueue(collArgs{coll: algorithms.AllReduce, count: 1, dt: algorithms.Uint8, op: algorithms.Max, in: b, out: b, name: "barrier"})
}

func checkLen(coll, name string, b []byte, count int64, dt algorithms.DType) error {
	if count < 0 {
		return fmt.Errorf("%w: %s: count %d is negative", ErrInvalidArgument, coll, count)
	}
	want := count * int64(dt.Size())
	if int64(len(b)) != want {
		return fmt.Errorf("%w: %s: %s holds %d bytes, want %d (%d x %v)", ErrInvalidArgument, coll, name, len(b), want, count, dt)
	}
	return nil
}

type collArgs struct {
	coll    algorithms.Collective
	count   int64
	dt      algorithms.DType
	op      algorithms.Op
	root    int
	in, out []byte
	name    string                 // overrides coll's name in messages
	plan    *algorithms.Plan       // a prepared (point-to-point) plan
	tag     uint32                 // names this call on the wire (opTag)
	seq     uint64                 // the call's sequence number on the communicator
	inPlace bool                   // in and out are the same memory (the cost model's choice depends on it)
	algo    uint8                  // the algorithm of its ring or tree plan + 1, once planned (the ring check compares it); 0: none
	pick    *algorithms.Prediction // autotuning's choice for this call (tunedChoice); nil: the model's (choice)

	// all-to-all: elements sent to / expected from each rank (the
	// agreement check compares them pairwise)
	sendCounts, recvCounts []int64
	// point-to-point plans: which pairs move single-copy (the agreement
	// check needs no verdict from a peer whose descriptors arrive anyway)
	p2pOpt algorithms.P2POptions
}

// planTag is the data tag of a call that runs a plan of algorithm algo:
// the call's tag for the ring, mixed with the algorithm for the others, so
// that ranks whose cost models chose differently (in place on some ranks
// only, different GOTREE_ALGO) fail on each other's first message instead
// of exchanging data that fits by chance.
func planTag(tag uint32, algo algorithms.Algorithm) uint32 {
	return tag ^ uint32(algo)*0x9e3779b1
}

// opTag hashes what every rank must agree on for one operation: the kind,
// the sequence number, the count, the dtype, the op and the root. Every
// message of the operation carries it. A word at a time, each mixed in by
// a multiply and a fold of the high half (murmur3's finalizer constant):
// FNV-1a over the 48 bytes took 3.6% of a small allreduce's CPU.
func opTag(coll algorithms.Collective, seq uint64, count int64, dt algorithms.DType, op algorithms.Op, root int) uint32 {
	if coll == algorithms.AllToAll {
		count = 0 // uneven splits: each rank's total differs; sizes are checked per message
	}
	h := uint64(0x9e3779b97f4a7c15)
	for _, v := range [...]uint64{uint64(coll), seq, uint64(count), uint64(dt), uint64(op), uint64(root)} {
		h ^= v
		h *= 0xff51afd7ed558ccd
		h ^= h >> 32
	}
	return uint32(h)
}

func (a collArgs) String() string {
	n := a.name
	if n == "" {
		n = a.coll.String()
	}
	return n
}

// describe names the call in messages: "allreduce #6 (4194304 x float32,
// sum)", "broadcast #2 (1000 x float32, root 1)".
func (a collArgs) describe() string {
	desc := fmt.Sprintf("%s #%d (%d x %v", a, a.seq, a.count, a.dt)
	if a.coll.Reduces() {
		desc += ", " + a.op.String()
	}
	if a.coll == algorithms.Broadcast || a.coll == algorithms.Reduce || a.coll == algorithms.Gather || a.coll == algorithms.Scatter {
		desc += fmt.Sprintf(", root %d", a.root)
	}
	return desc + ")"
}

// usable reports why no new operation may start (c.mu held).
func (c *Comm) usable(what string) error {
	if c.closed {
		return fmt.Errorf("%w: rank %d: %s issued after the communicator was destroyed", ErrInvalidArgument, c.rank, what)
	}
	if c.failure != nil {
		return fmt.Errorf("%w: rank %d: %s refused: %v", ErrAborted, c.rank, what, c.failure)
	}
	return nil
}

func (c *Comm) enqueue(a collArgs) (*Request, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(a.String()); err != nil {
		return nil, err
	}
	c.seq++
	a.seq = c.seq
	a.tag = opTag(a.coll, c.seq, a.count, a.dt, a.op, a.root)
	r := newRequest("", c.cfg.Timeout, nil)
	r.call = a
	r.args = &r.call
	var keys []p2pKey
	if a.plan != nil {
		// All-to-all, gather and scatter share the point-to-point links
		// with send and recv: they run after the sends and receives issued
		// before them, and those issued later wait for them.
		keys = c.allP2PKeys()
		prevs := c.p2p.claim(keys, r)
		r.op = func(c *Comm) error {
			defer c.p2p.release(keys, r)
			for _, prev := range prevs {
				<-prev.done
			}
			return c.runColl(r)
		}
	}
	if err := c.queueRequest(r); err != nil {
		c.p2p.release(keys, r) // never runs: later sends and receives must not wait for it
		return nil, err
	}
	return r, nil
}

// modelBytes is the message size the cost model takes for a call: the
// whole gathered or scattered buffer for allgather and reducescatter.
func (c *Comm) modelBytes(coll algorithms.Collective, count int64, dt algorithms.DType) int64 {
	bytes := count * int64(dt.Size())
	if coll == algorithms.AllGather || coll == algorithms.ReduceScatter {
		bytes *= int64(c.nranks)
	}
	return bytes
}

// choiceKey caches the cost model's choice per collective and size in the
// plan cache.
type choiceKey struct {
	coll    algorithms.Collective
	bytes   int64
	inPlace bool
}

// choice is the cost model's prediction (algorithm, protocol, channels)
// for a call under GOTREE_ALGO, GOTREE_PROTO and GOTREE_MIN/MAX_NCHANNELS,
// calibrated by GOTREE_TUNING_FILE (built-in values without it). Ranks on
// one host talk over shm, others over tcp. The CPU executor runs only the
// Simple protocol, so a GOTREE_PROTO without Simple is ignored here.
func (c *Comm) choice(a collArgs) algorithms.Prediction {
	bytes := c.modelBytes(a.coll, a.count, a.dt)
	if a.coll != algorithms.AllReduce {
		// Only allreduce's ranks check before the data that they chose
		// alike (planFor): the others choose as out of place, whatever
		// the call, so that ranks that place it differently still agree.
		a.inPlace = false
	}
	v, err := c.plans.get(choiceKey{a.coll, bytes, a.inPlace}, func() (any, error) {
		pr, err := c.predictChoice(a.coll, bytes, a.inPlace)
		if err == nil {
			c.log.Infof("TUNING", "%v %d bytes%s: %v/%v on %d channels, predicted %.1f us", a.coll, bytes, map[bool]string{true: " in place"}[a.inPlace], pr.Algo, pr.Proto, pr.Channels, pr.TimeUs)
		}
		return pr, err
	})
	if err != nil {
		c.log.Tracef("TUNING", "%v %d bytes: no prediction (%v); ring", a.coll, bytes, err)
		return algorithms.Prediction{Coll: a.coll, Algo: algorithms.Ring, Proto: algorithms.Simple, Bytes: bytes}
	}
	return v.(algorithms.Prediction)
}

// predictChoice is choice's prediction for coll moving bytes (the cost
// model's size), uncached: the model under the communicator's settings,
// or the ring (once said) where those allow nothing that runs here.
func (c *Comm) predictChoice(coll algorithms.Collective, bytes int64, inPlace bool) (algorithms.Prediction, error) {
	topo, cons, err := c.choiceInputs(coll, bytes, inPlace)
	if err != nil {
		return algorithms.Prediction{}, err
	}
	tu := c.tuning
	pr := algorithms.Prediction{}
	err = algorithms.ErrNoChoice
	if cons.Algos != 0 { // (0 would mean "all" to Choose)
		pr, err = tu.Choose(coll, topo, bytes, cons)
	}
	if errors.Is(err, algorithms.ErrNoChoice) && cons.Algos != algorithms.AllAlgos {
		// Only algorithms this communicator cannot run are allowed (hd
		// across hosts): the ring, once said.
		c.algoWarn.Do(func() {
			switch coll {
			case algorithms.AllGather, algorithms.ReduceScatter:
				c.log.Warnf("GOTREE_ALGO=%q allows nothing that runs %v here (%d ranks on %d hosts): it has the ring, and hd for ranks within one host: using the ring", c.cfg.Algo, coll, c.nranks, topo.NNodes)
				return
			case algorithms.Broadcast, algorithms.Reduce:
				c.log.Warnf("GOTREE_ALGO=%q allows nothing that runs %v: it has only the ring: using the ring", c.cfg.Algo, coll)
				return
			}
			c.log.Warnf("GOTREE_ALGO=%q allows nothing that runs here for %v (%d ranks on %d hosts; hd runs only within one host, direct only within one host whose ranks may read each other's memory, oneshot only within one host for up to 8 ranks and messages up to %d bytes and one FIFO slot, shared only within one host whose ranks mapped each other's staging regions): using the ring", c.cfg.Algo, coll, c.nranks, topo.NNodes, min(int64(c.cfg.SlotBytes), algorithms.OneShotMaxBytes))
		})
		cons.Algos = 1 << algorithms.Ring
		pr, err = tu.Choose(coll, topo, bytes, cons)
	}
	return pr, err
}

// choiceInputs is what the cost model takes, besides the size, for a
// call of coll moving bytes: the communicator's topology with its
// transports, and the algorithms (GOTREE_ALGO less what cannot run here,
// one-shot only within one FIFO slot), protocols and channels it may
// choose from.
func (c *Comm) choiceInputs(coll algorithms.Collective, bytes int64, inPlace bool) (algorithms.CostTopo, algorithms.Constraints, error) {
	algos, err := algorithms.ParseAlgoSpec(c.cfg.Algo, coll)
	if err != nil {
		return algorithms.CostTopo{}, algorithms.Constraints{}, err
	}
	switch coll {
	case algorithms.AllReduce:
	case algorithms.AllGather, algorithms.ReduceScatter:
		algos &= 1<<algorithms.Ring | 1<<algorithms.HalvingDoubling | 1<<algorithms.Direct
		if algos.Has(algorithms.Direct) && c.sharedBlocks(bytes) {
			algos = 1 << algorithms.Direct
		} else if algos != 1<<algorithms.Direct {
			algos &^= 1 << algorithms.Direct // only where GOTREE_ALGO asks for it alone
		}
	default:
		algos &= 1 << algorithms.Ring
	}
	if !c.direct {
		algos &^= 1 << algorithms.Direct // other hosts, or memory nobody may read
	}
	if !c.sharedOn {
		algos &^= 1 << algorithms.Shared // other hosts, no shared memory, or no staging regions
	}
	if bytes > int64(c.cfg.SlotBytes) {
		algos &^= 1 << algorithms.OneShot // a message must fit one slot (GOTREE_BUFFSIZE / 8)
	}
	intra := algorithms.Shm
	if c.cfg.ShmDisable {
		intra = algorithms.TCP
	}
	topo := algorithms.TopoOfGraph(c.graph, intra, algorithms.TCP)
	return topo, algorithms.Constraints{Algos: algos, Protos: 1 << algorithms.Simple,
		MinChannels: c.cfg.MinChannels, MaxChannels: c.cfg.MaxChannels, InPlace: inPlace}, nil
}

// sharedBlocks reports whether GOTREE_CPU_ALLOCATOR=shared puts each
// rank's block of an allgather or reduce-scatter moving bytes in a shared
// buffer, where direct plans may run: through mappings they ran 1.4-2.8x
// the ring's and hd's speed at 1-64 MiB on 4 ranks here, through
// process_vm_readv/writev slower than them, and the model (calibrated on
// the latter) never picks them.
func (c *Comm) sharedBlocks(bytes int64) bool {
	lo := c.cfg.CPUAllocator.MinBytes
	return c.direct && lo > 0 && bytes/int64(c.nranks) >= lo
}

// runColl runs a collective; byCaller says it runs on the goroutine of a
// caller that waits for it.
// callerYieldMaxBytes bounds the calls whose waits yield the processor
// longer before they sleep when the caller waits for them
// (backend.CallerWaitsKey). Above it a peer that is late is busy moving
// data, and a sleeping waiter leaves it the CPU sooner: 4 ranks on 2
// CPUs through torch, back-to-back synchronous allreduces with the long
// yield against without, alternated, 3 runs each: 4 B 160 against
// 365–381 µs, 256 KiB 475–691 against 587–818 µs, 1 MiB 1563–1661
// against 1404–1846 µs, 4 MiB 6328–7348 against 4576–6867 µs.
const callerYieldMaxBytes = 256 << 10

// testHookRunColl, when set (by tests), sees each collective as it starts.
var testHookRunColl func(a collArgs, callerWaits bool)

// runColl runs the collective of r (r.args).
func (c *Comm) runColl(r *Request) error {
	a, desc, byCaller := *r.args, r, r.byCaller
	// One deadline for the whole call: data and agreement check.
	start := r.started
	if start.IsZero() {
		start = time.Now()
	}
	ctx := &r.ctx
	ctx.init(c.ctx, start, c.cfg.Timeout)
	ctx.callerWaits = byCaller && a.count*int64(a.dt.Size()) <= callerYieldMaxBytes
	ctx.byCaller = byCaller && c.cfg.CallersFromC
	if testHookRunColl != nil {
		testHookRunColl(a, ctx.callerWaits)
	}
	defer ctx.release()
	explain := func(peer int, tag uint32) string { return c.explainTag(a, peer, tag) }
	if a.plan != nil {
		if c.log.Enabled(LevelInfo, "COLL") {
			c.log.Infof("COLL", "%s: point-to-point%s", desc, p2pSummary(a.plan, c.rank))
		}
		// The whole ring check first: the links of the split check and
		// the data are made (or waited for) only once all issued this.
		if _, err := c.ringAgree(ctx, a, false, func(int) bool { return true }); err != nil {
			return c.collFailed(desc, err)
		}
		var peers []p2pPeer
		if c.nranks > 1 {
			peers = c.p2pPeers(a)
			if err := c.p2pAgreeBefore(ctx, a, peers); err != nil {
				return c.collFailed(desc, err)
			}
		}
		if err := c.execPlanCtx(ctx, a.plan, a.in, a.out, desc, a.tag, explain); err != nil {
			return err
		}
		if err := c.p2pAgreeAfter(ctx, a, peers); err != nil {
			return c.collFailed(desc, err)
		}
		return nil
	}
	var slot tuneSlot
	a.pick, slot = c.tunedChoice(a)
	plan, placed, err := c.planFor(a)
	if err != nil {
		return fmt.Errorf("%w: rank %d: %s: no plan: %v", ErrInvalidArgument, c.rank, desc, err)
	}
	if c.log.Enabled(LevelInfo, "COLL") {
		c.log.Infof("COLL", "%s: %v/%v, %d channels", desc, plan.Algo, plan.Proto, plan.Channels)
	}
	a.algo = uint8(plan.Algo) + 1
	a.tag = planTag(a.tag, plan.Algo)
	c.flight.planned(r.flightID, plan.Algo)
	call := &r.running
	call.seq, call.tag, call.desc, call.algo = a.seq, a.tag, desc, plan.Algo
	c.stallEnter(call)
	defer c.stallLeave(call)
	var t0 time.Time
	startUs, maps := 0.0, int64(0)
	if slot.cand >= 0 { // exploring: its time counts for autotuning
		t0, startUs, maps = time.Now(), HostClockUs(), backend.WindowMaps()
	}
	later, err := c.ringAgree(ctx, a, placed, func(peer int) bool { return recvsOnChannel(plan, c.rank, 0, peer) })
	if err != nil {
		return c.collFailed(desc, err)
	}
	if err := c.execPlanCtx(ctx, plan, a.in, a.out, desc, a.tag, explain); err != nil {
		return err
	}
	if err := c.ringAgreeAfter(ctx, a, later); err != nil {
		return c.collFailed(desc, err)
	}
	var took time.Duration
	if slot.cand >= 0 {
		took = time.Since(t0)
	}
	if err := c.tuneRecord(ctx, slot, startUs, took, slot.cand >= 0 && backend.WindowMaps() != maps, a.seq, desc); err != nil {
		return err
	}
	if a.op == algorithms.Avg && (a.coll == algorithms.AllReduce || (a.coll == algorithms.Reduce && c.rank == a.root) || a.coll == algorithms.ReduceScatter) {
		reduce.Finalize(a.out, a.dt, a.op, c.nranks)
	}
	return nil
}

// planFor is the plan of a ring or tree collective (cached per request):
// the cost model's algorithm and channel count for its size, or
// autotuning's (a.pick). placed says that the other placement (in place
// or not) of the same call may run another algorithm: the ranks must
// then check that they agree on it before the data (see mismatch.go).
func (c *Comm) planFor(a collArgs) (plan *algorithms.Plan, placed bool, err error) {
	key := lastPlanKey{coll: a.coll, count: a.count, dt: a.dt, op: a.op, root: a.root, inPlace: a.inPlace, pick: -1}
	if a.pick != nil {
		key.pick, key.pickChannels = a.pick.Algo, a.pick.Channels
	}
	if lp := c.lastPlan.Load(); lp != nil && lp.key == key {
		return lp.plan, lp.placed, nil // a training loop repeats its calls: skip the cache's locks and hashing
	}
	plan, err = c.buildPlanFor(a)
	if err != nil {
		return nil, false, err
	}
	if a.coll == algorithms.AllReduce {
		other := a
		other.inPlace = !a.inPlace
		// Autotuned sizes run one algorithm whatever the placement.
		placed = a.pick == nil && c.choice(other).Algo != plan.Algo
	}
	c.lastPlan.Store(&lastPlan{key, plan, placed})
	return plan, placed, nil
}

// lastPlan is the most recent call's plan, by what selects it.
type lastPlan struct {
	key    lastPlanKey
	plan   *algorithms.Plan
	placed bool
}

type lastPlanKey struct {
	coll    algorithms.Collective
	count   int64
	dt      algorithms.DType
	op      algorithms.Op
	root    int
	inPlace bool
	// autotuning's algorithm and channels (-1: the model's)
	pick         algorithms.Algorithm
	pickChannels int
}

func (c *Comm) buildPlanFor(a collArgs) (*algorithms.Plan, error) {
	pr := c.choice(a)
	if a.pick != nil {
		pr = *a.pick
	}
	chunk := int64(backend.DefaultSlots * c.cfg.SlotBytes / 2) // half a link's FIFO (GOTREE_BUFFSIZE)
	if pr.Algo == algorithms.Shared {
		// Shared plans move chunks through the staging regions, not the
		// links: their chunk is what the regions were made for (stage.go),
		// whatever GOTREE_BUFFSIZE says.
		chunk = algorithms.SharedStageBytes
	}
	req := algorithms.PlanRequest{
		Coll: a.coll, Algo: pr.Algo, Proto: algorithms.Simple,
		Count: a.count, DType: a.dt, Op: a.op, Root: a.root,
		ChunkBytes:    chunk,
		FragmentBytes: int64(c.cfg.SlotBytes), // Exec's fragBytes (execPlanCtx)
		// The model's channel count (within GOTREE_MIN/MAX_NCHANNELS);
		// a minimum above one keeps that many even for small messages.
		Channels:     min(max(pr.Channels, 0), c.graph.Channels),
		KeepChannels: c.cfg.MinChannels > 1,
	}
	v, err := c.plans.get(req, func() (any, error) { return algorithms.BuildPlan(c.graph, req) })
	if err != nil {
		return nil, err
	}
	return v.(*algorithms.Plan), nil
}

// PlanOf returns the plan that a call of allreduce, broadcast, reduce,
// allgather or reducescatter with these arguments runs on this
// communicator (the same on every rank), in place (an allreduce whose
// send and receive buffers are the same memory) or not, for tools that
// explain or bound a run (gotree perf's memory-traffic column). It issues
// nothing.
func (c *Comm) PlanOf(coll algorithms.Collective, count int64, dt algorithms.DType, op algorithms.Op, root int, inPlace bool) (*algorithms.Plan, error) {
	if coll > algorithms.ReduceScatter {
		return nil, fmt.Errorf("%w: %v has no ring or tree plan", ErrInvalidArgument, coll)
	}
	a := collArgs{coll: coll, count: count, dt: dt, op: op, root: root, inPlace: inPlace && coll == algorithms.AllReduce}
	a.pick = c.decidedChoice(tuneKey(a))
	p, _, err := c.planFor(a)
	if err != nil {
		return nil, fmt.Errorf("%w: rank %d: %v: no plan: %v", ErrInvalidArgument, c.rank, coll, err)
	}
	return p, nil
}

// execPlan runs this rank's part of plan under the communicator's timeout
// and names the operation in any error. Any failure aborts the
// communicator: its links may hold messages of the failed operation.
func (c *Comm) execPlan(plan *algorithms.Plan, in, out []byte, desc fmt.Stringer, tag uint32) error {
	ctx := newOpCtx(c.ctx, c.cfg.Timeout)
	defer ctx.release()
	return c.execPlanCtx(ctx, plan, in, out, desc, tag, nil)
}

// execPlanCtx is execPlan under ctx; explain, when set, adds what a peer
// that sent a foreign tag issued to the error.
func (c *Comm) execPlanCtx(ctx context.Context, plan *algorithms.Plan, in, out []byte, desc fmt.Stringer, tag uint32, explain func(peer int, tag uint32) string) error {
	frag := c.cfg.SlotBytes
	if plan.Algo == algorithms.Direct {
		frag = c.directFrag
	}
	if plan.StageElems > 0 {
		if !c.enterStages() {
			return fmt.Errorf("%w: rank %d: %v: the staging regions are closed", ErrAborted, c.rank, desc)
		}
		defer c.exitStages()
	}
	err := backend.Exec(ctx, plan, c.rank, c, in, out, frag, tag)
	if err == nil {
		return nil
	}
	var mm *backend.MismatchError
	if explain != nil && errors.As(err, &mm) && mm.GotTag != mm.WantTag {
		if s := explain(mm.Peer, mm.GotTag); s != "" {
			err = fmt.Errorf("%w%s", err, s)
		}
	}
	// A send to a peer that has just aborted may report only a closed
	// socket; its reason waits on the link's receive side. (Not on the
	// point-to-point channel: its receives may be running elsewhere.)
	var pe *backend.PeerError
	var ra *backend.RemoteAbortError
	if errors.As(err, &pe) && pe.Op == "send" && pe.Channel != p2pChannel && !errors.As(err, &ra) {
		if l, lerr := c.Conn(pe.Channel, pe.Peer); lerr == nil {
			err = peerReason(ctx, l, err)
		}
	}
	return c.collFailed(desc, err)
}

// collFailed classifies err, the failure of the call desc, aborts the
// communicator with it and returns it.
func (c *Comm) collFailed(desc fmt.Stringer, err error) error {
	if f := c.Err(); errors.Is(f, errStallMismatch) {
		return f // the stall check failed the communicator: the call's own error is only the abort
	}
	var mm *backend.MismatchError
	var kind error // nil: err is classified already
	switch {
	case errors.Is(err, ErrTimeout) || errors.Is(err, ErrAborted) || errors.Is(err, ErrInvalidArgument):
	case errors.As(err, &mm) || errors.Is(err, errMismatch):
		kind = ErrInvalidArgument
	case errors.Is(err, backend.ErrTimeout):
		kind = ErrTimeout
	case c.ctx.Err() != nil:
		kind = ErrAborted
	default:
		kind = ErrRemote
	}
	note := ""
	if kind == ErrTimeout || kind == nil && errors.Is(err, ErrTimeout) {
		note = c.stallNote()
	}
	if kind == nil {
		err = fmt.Errorf("rank %d: %s failed: %w%s", c.rank, desc, err, note)
	} else {
		err = fmt.Errorf("%w: rank %d: %s failed: %v%s", kind, c.rank, desc, err, note)
	}
	c.fail(err)
	return err
}
