package main

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gotree/gotree/pg"
)

var errInvalidHandle = errors.New("invalid handle")

// handleTable maps opaque integer handles to Go objects (communicators and
// requests) and keeps each handle's last error text; handle 0 holds errors
// that have no handle. It is the package's only mutable state.
type handleTable struct {
	mu   sync.Mutex
	next int64
	objs map[int64]any
	errs map[int64]string
}

var table = &handleTable{objs: map[int64]any{}, errs: map[int64]string{}}

func (t *handleTable) add(v any) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	t.objs[t.next] = v
	return t.next
}

func (t *handleTable) remove(h int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.objs, h)
	delete(t.errs, h)
}

func (t *handleTable) get(h int64) (any, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.objs[h]
	return v, ok
}

func (t *handleTable) comm(h int64) (*pg.Comm, error) {
	v, ok := t.get(h)
	c, isComm := v.(*pg.Comm)
	if !ok || !isComm {
		return nil, fmt.Errorf("%w: %d is not a live communicator handle", errInvalidHandle, h)
	}
	return c, nil
}

func (t *handleTable) request(h int64) (*pg.Request, error) {
	v, ok := t.get(h)
	r, isReq := v.(*pg.Request)
	if !ok || !isReq {
		return nil, fmt.Errorf("%w: %d is not a live request handle", errInvalidHandle, h)
	}
	return r, nil
}

func (t *handleTable) setErr(h int64, msg string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.objs[h]; !ok {
		h = 0
	}
	t.errs[h] = msg
}

func (t *handleTable) err(h int64) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.errs[h]
}
