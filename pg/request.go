package pg

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Request is an issued operation. It completes exactly once.
type Request struct {
	desc     string
	args     *collArgs // describes the call when desc is empty (formatted on first use)
	descOnce sync.Once
	op       func(c *Comm) error // nil for a collective: runColl(args)
	timeout  time.Duration

	// A collective's arguments, context and stall record live in its
	// request, which runs it without a closure: one allocation where
	// there were five (a small allreduce between two processes takes
	// about 1.1-1.4 µs, and the collector's share grew with them).
	call    collArgs
	ctx     opCtx
	running runningCall
	started time.Time // when it began to run (finishUnlessFailed)

	done   chan struct{}
	err    error
	source int // the sending rank of a receive from any source

	flightID uint64 // its entry in the flight recorder (0: none)

	// Operations on the ordered queue: the worker runs them in order, but
	// a waiter that finds its operation not yet started and the one
	// before it finished runs it itself (claimed decides who), saving two
	// thread hand-offs on every synchronous call.
	comm    *Comm
	claimed atomic.Bool
	prev    atomic.Pointer[Request] // queued just before; nil once finished
	// byCaller: the operation runs on its waiter's goroutine (runHere), so
	// its waits may yield longer before they sleep (backend.CallerWaitsKey).
	byCaller bool
}

func newRequest(desc string, timeout time.Duration, op func(*Comm) error) *Request {
	return &Request{desc: desc, op: op, timeout: timeout, done: make(chan struct{}), source: -1}
}

// CompletedRequest is a request that has already finished without error
// (a device collective: the stream carries its completion).
func CompletedRequest(desc string) *Request {
	r := newRequest(desc, 0, nil)
	r.finish(nil)
	return r
}

func (r *Request) run(c *Comm) error {
	if r.op == nil {
		return c.runColl(r)
	}
	return r.op(c)
}

func (r *Request) finish(err error) {
	r.err = err
	r.prev.Store(nil) // keep no chain of finished requests alive
	close(r.done)
}

func (r *Request) finished() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// runHere runs a queued operation on the waiter's goroutine when it has
// not started and everything queued before it finished. It reports
// whether it did.
func (r *Request) runHere() bool {
	c := r.comm
	if c == nil || r.claimed.Load() {
		return false
	}
	if p := r.prev.Load(); p != nil && !p.finished() {
		return false
	}
	c.mu.Lock()
	if c.closed || !r.claimed.CompareAndSwap(false, true) {
		c.mu.Unlock()
		return false
	}
	c.wg.Add(1) // Destroy waits for it like for the worker
	c.mu.Unlock()
	defer c.wg.Done()
	r.byCaller = true
	c.runQueued(r)
	return true
}

// Source is the rank a receive from any source took its message from, once
// it finished successfully; -1 before and for every other request.
func (r *Request) Source() int {
	select {
	case <-r.done:
		if r.err == nil {
			return r.source
		}
	default:
	}
	return -1
}

// String describes the operation ("allreduce #3 (1000 x float32, sum)").
// A collective's description is formatted only when something asks for
// it (an error, a log line): most calls never need it.
func (r *Request) String() string {
	r.descOnce.Do(func() {
		if r.desc == "" && r.args != nil {
			r.desc = r.args.describe()
		}
	})
	return r.desc
}

// text is a fixed description.
type text string

func (t text) String() string { return string(t) }

// Test reports whether the request finished, and its error once it has.
func (r *Request) Test() (bool, error) {
	if r.comm != nil && !r.claimed.Load() {
		r.comm.undefer(r)
	}
	select {
	case <-r.done:
		return true, r.err
	default:
		return false, nil
	}
}

// waitGrace is how much longer than the communicator's timeout a default
// Wait lasts.
const waitGrace = 2 * time.Second

// Wait blocks until the request finishes or timeout passes; timeout < 0
// means the communicator's timeout plus waitGrace. A wait that runs out returns an error
// wrapping ErrTimeout and leaves the request running.
func (r *Request) Wait(timeout time.Duration) error {
	select {
	case <-r.done:
		return r.err
	default:
	}
	if timeout < 0 && r.runHere() {
		return r.err
	}
	if r.comm != nil && !r.claimed.Load() {
		r.comm.undefer(r)
	}
	if timeout < 0 {
		// The operation's own deadline (the communicator's timeout, counted
		// from when it starts) fires first and aborts the communicator with
		// a precise error; this is only the backstop.
		timeout = r.timeout + waitGrace
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-r.done:
		return r.err
	case <-t.C:
		return fmt.Errorf("%w: %s did not finish within %v", ErrTimeout, r, timeout)
	}
}

// Done is closed when the request finishes.
func (r *Request) Done() <-chan struct{} { return r.done }

// planCache keeps built plans per request shape.
type planCache struct {
	mu sync.Mutex
	m  map[any]any
}

const planCacheMax = 256

func (p *planCache) get(k any, build func() (any, error)) (any, error) {
	p.mu.Lock()
	if v, ok := p.m[k]; ok {
		p.mu.Unlock()
		return v, nil
	}
	p.mu.Unlock()
	v, err := build()
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.m == nil || len(p.m) >= planCacheMax {
		p.m = map[any]any{}
	}
	p.m[k] = v
	p.mu.Unlock()
	return v, nil
}
