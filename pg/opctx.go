package pg

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gotree/gotree/backend"
)

// opCtx is one operation's context: the communicator's (cancelled when it
// fails) with the operation's deadline. Shared-memory waits only ask Err
// and Deadline; a real timer context is made only when something waits on
// Done (TCP receives, several streams, AfterFunc), so that a small call
// over shared memory does not pay for one: context.WithTimeout under a
// cancelable parent costs about 0.56 µs here, a quarter of a 4-byte
// allreduce between two processes.
type opCtx struct {
	parent   context.Context
	deadline time.Time
	// callerWaits answers backend.CallerWaitsKey: the operation runs on
	// the goroutine of a caller that blocks until it ends (and is small).
	callerWaits bool
	// byCaller answers backend.CallerThreadKey: the operation runs on
	// the goroutine of a caller from C that blocks until it ends
	// (Config.CallersFromC).
	byCaller bool

	mu     sync.Mutex
	timed  atomic.Pointer[timedCtx]
	closed bool
}

type timedCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newOpCtx(parent context.Context, timeout time.Duration) *opCtx {
	c := &opCtx{}
	c.init(parent, time.Now(), timeout)
	return c
}

// init makes c the context of an operation that started at start (an
// opCtx that lives inside its Request).
func (c *opCtx) init(parent context.Context, start time.Time, timeout time.Duration) {
	c.parent, c.deadline = parent, start.Add(timeout)
}

func (c *opCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// Done makes the timer context on first use.
func (c *opCtx) Done() <-chan struct{} { return c.real().Done() }

func (c *opCtx) real() context.Context {
	if t := c.timed.Load(); t != nil {
		return t.ctx
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.timed.Load(); t != nil {
		return t.ctx
	}
	ctx, cancel := context.WithDeadline(c.parent, c.deadline)
	if c.closed {
		cancel() // asked after release: already over
	}
	c.timed.Store(&timedCtx{ctx, cancel})
	return ctx
}

func (c *opCtx) Err() error {
	if t := c.timed.Load(); t != nil {
		return t.ctx.Err()
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// Value answers from the timer context once it exists, so that the
// context package recognises it as a cancel context (AfterFunc and
// WithCancel then need no goroutine of their own).
func (c *opCtx) Value(k any) any {
	if (k == backend.CallerWaitsKey && c.callerWaits) || (k == backend.CallerThreadKey && c.byCaller) {
		return true
	}
	if t := c.timed.Load(); t != nil {
		return t.ctx.Value(k)
	}
	return c.parent.Value(k)
}

// release stops the timer, if one was made.
func (c *opCtx) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if t := c.timed.Load(); t != nil {
		t.cancel()
	}
}
