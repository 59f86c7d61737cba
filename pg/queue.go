package pg

import "sync"

// opQueue is the worker's FIFO of issued operations. It is unbounded:
// issuing never fails and never blocks, however many operations are in
// flight. torch code that issues one asynchronous allreduce per parameter
// and waits for them all at the end has thousands outstanding (gloo
// queues them all; a fixed-size queue failed the 1025th), and what they
// hold is the caller's tensors, not the queue's entries.
type opQueue struct {
	mu     sync.Mutex
	items  []*Request
	head   int // items[head:] are queued
	closed bool
	wake   chan struct{} // one token: something was pushed or the queue closed
}

func newOpQueue() *opQueue {
	return &opQueue{wake: make(chan struct{}, 1)}
}

// push appends r; false once the queue is closed.
func (q *opQueue) push(r *Request) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, r)
	q.mu.Unlock()
	q.signal()
	return true
}

// close ends the queue: pop still returns what is queued, then false.
func (q *opQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

func (q *opQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// pop takes the oldest queued operation, blocking while there is none;
// false once the queue is closed and drained.
func (q *opQueue) pop() (*Request, bool) {
	for {
		q.mu.Lock()
		if q.head < len(q.items) {
			r := q.items[q.head]
			q.items[q.head] = nil
			q.head++
			// Keep the slice from growing without bound in a long-lived
			// queue: start over once drained, or move the rest down once
			// most of it is taken.
			if q.head == len(q.items) {
				q.items, q.head = q.items[:0], 0
			} else if q.head >= 64 && q.head*2 >= len(q.items) {
				n := copy(q.items, q.items[q.head:])
				clear(q.items[n:])
				q.items, q.head = q.items[:n], 0
			}
			q.mu.Unlock()
			return r, true
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return nil, false
		}
		<-q.wake
	}
}
