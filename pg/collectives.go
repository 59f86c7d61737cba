package pg

import (
	"context"
	"errors"
	"fmt"

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
	return c.enqueue(collArgs{coll: algorithms.AllReduce, count: count, dt: dt, op: op, in: send, out: recv})
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
	name    string           // overrides coll's name in messages
	plan    *algorithms.Plan // a prepared (point-to-point) plan
}

func (a collArgs) String() string {
	n := a.name
	if n == "" {
		n = a.coll.String()
	}
	return n
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
	desc := fmt.Sprintf("%s #%d (%d x %v", a, c.seq, a.count, a.dt)
	if a.coll == algorithms.AllReduce || a.coll == algorithms.Reduce || a.coll == algorithms.ReduceScatter {
		desc += ", " + a.op.String()
	}
	if a.coll == algorithms.Broadcast || a.coll == algorithms.Reduce || a.coll == algorithms.Gather || a.coll == algorithms.Scatter {
		desc += fmt.Sprintf(", root %d", a.root)
	}
	desc += ")"
	r := newRequest(desc, c.cfg.Timeout, func(c *Comm) error { return c.runColl(a, desc) })
	select {
	case c.queue <- r:
	default:
		return nil, fmt.Errorf("%w: rank %d: more than %d operations in flight", ErrInvalidArgument, c.rank, cap(c.queue))
	}
	return r, nil
}

func (c *Comm) algorithm(a collArgs) algorithms.Algorithm {
	if a.coll != algorithms.AllReduce {
		return algorithms.Ring
	}
	if f, _ := c.cfg.algoFor(a.coll); f != nil {
		return *f
	}
	return algorithms.Ring
}

func (c *Comm) runColl(a collArgs, desc string) error {
	if a.plan != nil {
		return c.execPlan(a.plan, a.in, a.out, desc)
	}
	req := algorithms.PlanRequest{
		Coll: a.coll, Algo: c.algorithm(a), Proto: algorithms.Simple,
		Count: a.count, DType: a.dt, Op: a.op, Root: a.root,
		ChunkBytes: int64(backend.DefaultSlots * c.cfg.SlotBytes / 2),
	}
	v, err := c.plans.get(req, func() (any, error) { return algorithms.BuildPlan(c.graph, req) })
	if err != nil {
		return fmt.Errorf("%w: rank %d: %s: no plan: %v", ErrInvalidArgument, c.rank, desc, err)
	}
	plan := v.(*algorithms.Plan)
	c.log.Infof("COLL", "%s: %v/%v, %d channels", desc, req.Algo, req.Proto, plan.Channels)
	if err := c.execPlan(plan, a.in, a.out, desc); err != nil {
		return err
	}
	if a.op == algorithms.Avg && (a.coll == algorithms.AllReduce || (a.coll == algorithms.Reduce && c.rank == a.root) || a.coll == algorithms.ReduceScatter) {
		reduce.Finalize(a.out, a.dt, a.op, c.nranks)
	}
	return nil
}

// execPlan runs this rank's part of plan under the communicator's timeout
// and names the operation in any error.
func (c *Comm) execPlan(plan *algorithms.Plan, in, out []byte, desc string) error {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.Timeout)
	defer cancel()
	err := backend.Exec(ctx, plan, c.rank, c, in, out, c.cfg.SlotBytes)
	if err == nil {
		return nil
	}
	kind := ErrRemote
	switch {
	case errors.Is(err, ErrTimeout) || errors.Is(err, ErrAborted) || errors.Is(err, ErrInvalidArgument):
		return fmt.Errorf("rank %d: %s failed: %w", c.rank, desc, err)
	case errors.Is(err, backend.ErrTimeout):
		kind = ErrTimeout
	case c.ctx.Err() != nil:
		kind = ErrAborted
	}
	return fmt.Errorf("%w: rank %d: %s failed: %v", kind, c.rank, desc, err)
}
