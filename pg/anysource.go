package pg

import (
	"context"
	"errors"
	"fmt"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend"
)

// errStopped ends a wait that another outcome made unnecessary.
var errStopped = errors.New("stopped")

// AnySource is the peer argument that receives from whichever rank sends
// first.
const AnySource = -1

// RecvAny receives count elements from whichever rank's send arrives first;
// the request's Source names that rank once it finished. It is ordered
// with receives: it starts after every receive issued before it (from any
// peer) finished, and receives issued after it wait for it. The message
// taken is the one the chosen peer would have matched with its next
// receive, so per-peer order holds.
func (c *Comm) RecvAny(buf []byte, count int64, dt algorithms.DType) (*Request, error) {
	const name = "recv from any source"
	if !dt.Valid() {
		return nil, fmt.Errorf("%w: %s: unsupported dtype %v", ErrInvalidArgument, name, dt)
	}
	if c.nranks < 2 {
		return nil, fmt.Errorf("%w: %s: rank %d is alone in its communicator: no rank could send", ErrInvalidArgument, name, c.rank)
	}
	if count == 0 {
		// Zero-element sends put nothing on the wire, so there is no
		// message to tell which rank sent one.
		return nil, fmt.Errorf("%w: %s: rank %d: a receive of 0 elements must name its source rank (zero-element sends carry no message)", ErrInvalidArgument, name, c.rank)
	}
	if err := checkLen(name, "buffer", buf, count, dt); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(name); err != nil {
		return nil, err
	}
	keys := make([]p2pKey, 0, c.nranks-1)
	for p := 0; p < c.nranks; p++ {
		if p != c.rank {
			keys = append(keys, p2pKey{p, false})
		}
	}
	r := newRequest(fmt.Sprintf("%s (%d x %v)", name, count, dt), c.cfg.Timeout, nil)
	r.source = -1
	c.runP2P(keys, r, func() error {
		peer, err := c.firstReady(keys)
		if err != nil {
			return err
		}
		r.source = peer
		return c.transferP2P(false, buf, count, dt, peer, c.p2p.next(p2pKey{peer, false}))
	})
	return r, nil
}

// firstReady waits, within the communicator's timeout, until a message
// from one of keys' peers is ready, and returns the lowest such rank
// among those that were found ready together. Every probe has returned
// when it does, so the chosen link is free for the receive.
func (c *Comm) firstReady(keys []p2pKey) (int, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.Timeout)
	defer cancel()
	type result struct {
		peer int
		err  error
	}
	results := make(chan result, len(keys))
	for _, k := range keys {
		go func(peer int) {
			l, err := c.p2pLinkOr(peer, ctx.Done())
			if err == nil {
				p, ok := l.(backend.Prober)
				if !ok {
					err = fmt.Errorf("%w: rank %d: the link to rank %d cannot wait for a message without taking it", ErrRemote, c.rank, peer)
				} else {
					err = p.Probe(ctx)
				}
			}
			results <- result{peer, err}
		}(k.peer)
	}
	chosen, firstErr := -1, error(nil)
	for range keys {
		res := <-results
		if res.err == nil {
			if chosen < 0 || res.peer < chosen {
				chosen = res.peer
			}
			cancel()
			continue
		}
		// A link that failed before any message arrived fails the receive;
		// errors from probes stopped by the choice or the deadline do not.
		timedOut := errors.Is(res.err, ErrTimeout) || errors.Is(res.err, backend.ErrTimeout)
		if chosen < 0 && firstErr == nil && ctx.Err() == nil && !timedOut && !errors.Is(res.err, errStopped) {
			firstErr = res.err
			cancel()
		}
	}
	if chosen >= 0 {
		return chosen, nil
	}
	if firstErr == nil {
		if c.ctx.Err() != nil {
			return -1, fmt.Errorf("%w: rank %d: recv from any source: %v", ErrAborted, c.rank, context_cause(c))
		}
		err := fmt.Errorf("%w: rank %d: recv from any source: no rank sent a message within %v", ErrTimeout, c.rank, c.cfg.Timeout)
		c.fail(err)
		return -1, err
	}
	err := fmt.Errorf("%w: rank %d: recv from any source: %v", ErrRemote, c.rank, firstErr)
	c.fail(err)
	return -1, err
}
