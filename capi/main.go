// Command capi is built with -buildmode=c-shared into libgotree.so: the C
// ABI declared in gotree.h. The public functions are thin C wrappers in
// gotree.c (they refuse to run in a forked child); they call the
// gotreego_* functions exported here, which validate every argument, map
// errors to status codes with a per-handle text, and never let a panic
// cross into C.
package main

/*
#include <stdint.h>
#include <string.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"time"
	"unsafe"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/pg"
)

func main() {}

// Version of the library.
const Version = "0.1.0"

// Status codes, as gotree_status_t.
const (
	stSuccess         = 0
	stInvalidArgument = 1
	stInvalidHandle   = 2
	stTimeout         = 3
	stAborted         = 4
	stRemote          = 5
	stNotSupported    = 6
	stSystem          = 7
	stInternal        = 8
	stInProgress      = 9
)

// statusOf maps an error to a status code.
func statusOf(err error) C.int {
	switch {
	case err == nil:
		return stSuccess
	case errors.Is(err, errInvalidHandle):
		return stInvalidHandle
	case errors.Is(err, pg.ErrInvalidArgument):
		return stInvalidArgument
	case errors.Is(err, pg.ErrTimeout):
		return stTimeout
	case errors.Is(err, pg.ErrAborted):
		return stAborted
	case errors.Is(err, pg.ErrRemote):
		return stRemote
	case errors.Is(err, pg.ErrNotSupported):
		return stNotSupported
	case errors.Is(err, pg.ErrSystem):
		return stSystem
	}
	return stInternal
}

// fail records err's text under handle and returns its status.
func fail(handle int64, err error) C.int {
	table.setErr(handle, err.Error())
	return statusOf(err)
}

// guard turns a panic into GOTREE_ERR_INTERNAL with the stack in the
// handle's error text. Use as: defer guard(handle, &st)
func guard(handle int64, st *C.int) {
	if r := recover(); r != nil {
		table.setErr(handle, fmt.Sprintf("gotree: internal error (please report): %v\n%s", r, debug.Stack()))
		*st = stInternal
	}
}

func copyOut(s string, buf *C.char, buflen C.int64_t) C.int64_t {
	if buf != nil && buflen > 0 {
		n := min(len(s), int(buflen)-1)
		dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(buflen))
		copy(dst, s[:n])
		dst[n] = 0
	}
	return C.int64_t(len(s))
}

//export gotreego_version
func gotreego_version(buf *C.char, buflen C.int64_t) C.int64_t {
	return copyOut(fmt.Sprintf("gotree %s (%s)", Version, runtime.Version()), buf, buflen)
}

//export gotreego_error_text
func gotreego_error_text(handle C.int64_t, buf *C.char, buflen C.int64_t) (n C.int64_t) {
	defer func() {
		if recover() != nil {
			n = 0
		}
	}()
	return copyOut(table.err(int64(handle)), buf, buflen)
}

//export gotreego_get_unique_id
func gotreego_get_unique_id(id unsafe.Pointer) (st C.int) {
	defer guard(0, &st)
	if id == nil {
		return fail(0, fmt.Errorf("%w: gotree_get_unique_id: id is NULL", pg.ErrInvalidArgument))
	}
	cfg, err := pg.LoadConfig(os.Getenv)
	if err != nil {
		return fail(0, fmt.Errorf("%w: %v", pg.ErrInvalidArgument, err))
	}
	uid, err := pg.NewUniqueID(cfg)
	if err != nil {
		return fail(0, err)
	}
	copy(unsafe.Slice((*byte)(id), pg.UniqueIDBytes), uid[:])
	return stSuccess
}

//export gotreego_comm_init_rank
func gotreego_comm_init_rank(comm *C.int64_t, id unsafe.Pointer, rank, nranks C.int, structSize C.int, timeoutMS C.int64_t, hostID *C.char) (st C.int) {
	defer guard(0, &st)
	switch {
	case comm == nil:
		return fail(0, fmt.Errorf("%w: gotree_comm_init_rank: comm is NULL", pg.ErrInvalidArgument))
	case id == nil:
		return fail(0, fmt.Errorf("%w: gotree_comm_init_rank: id is NULL", pg.ErrInvalidArgument))
	case structSize >= 0 && structSize < 4:
		return fail(0, fmt.Errorf("%w: gotree_comm_init_rank: opts->struct_size is %d; set it to sizeof(gotree_options_t)", pg.ErrInvalidArgument, structSize))
	}
	*comm = 0
	cfg, err := pg.LoadConfig(os.Getenv)
	if err != nil {
		return fail(0, fmt.Errorf("%w: %v", pg.ErrInvalidArgument, err))
	}
	if timeoutMS > 0 {
		cfg.Timeout = time.Duration(timeoutMS) * time.Millisecond
	}
	if hostID != nil {
		cfg.HostID = C.GoString(hostID)
	}
	var uid pg.UniqueID
	copy(uid[:], unsafe.Slice((*byte)(id), pg.UniqueIDBytes))
	c, err := pg.Init(uid, int(rank), int(nranks), cfg)
	if err != nil {
		return fail(0, err)
	}
	*comm = C.int64_t(table.add(c))
	return stSuccess
}

//export gotreego_comm_info
func gotreego_comm_info(h C.int64_t, rank, nranks *C.int) (st C.int) {
	defer guard(int64(h), &st)
	c, err := table.comm(int64(h))
	if err != nil {
		return fail(0, err)
	}
	if rank == nil && nranks == nil {
		return fail(int64(h), fmt.Errorf("%w: output pointer is NULL", pg.ErrInvalidArgument))
	}
	if rank != nil {
		*rank = C.int(c.Rank())
	}
	if nranks != nil {
		*nranks = C.int(c.Size())
	}
	return stSuccess
}

//export gotreego_comm_destroy
func gotreego_comm_destroy(h C.int64_t, abort C.int) (st C.int) {
	defer guard(int64(h), &st)
	c, err := table.comm(int64(h))
	if err != nil {
		return fail(0, err)
	}
	table.remove(int64(h))
	if abort != 0 {
		c.Abort()
		return stSuccess
	}
	if err := c.Destroy(); err != nil {
		return fail(0, err)
	}
	return stSuccess
}

const (
	collAllReduce = 0
	collBroadcast = 1
	collAllGather = 2
	collBarrier   = 3
)

// view makes a byte view of C memory, refusing NULL with a nonzero size.
func view(p unsafe.Pointer, count uint64, esize int, coll, name string) ([]byte, error) {
	if count == 0 {
		return []byte{}, nil
	}
	if count > (1<<62)/uint64(esize) {
		return nil, fmt.Errorf("%w: %s: count %d is too large", pg.ErrInvalidArgument, coll, count)
	}
	if p == nil {
		return nil, fmt.Errorf("%w: %s: %s is NULL but count is %d", pg.ErrInvalidArgument, coll, name, count)
	}
	return unsafe.Slice((*byte)(p), count*uint64(esize)), nil
}

//export gotreego_collective
func gotreego_collective(kind C.int, h C.int64_t, send, recv unsafe.Pointer, count C.uint64_t, dtype, op, root, device C.int, stream unsafe.Pointer, req *C.int64_t) (st C.int) {
	defer guard(int64(h), &st)
	names := [...]string{"gotree_allreduce", "gotree_broadcast", "gotree_allgather", "gotree_barrier"}
	if kind < 0 || int(kind) >= len(names) {
		return fail(int64(h), fmt.Errorf("%w: unknown collective %d", pg.ErrInvalidArgument, kind))
	}
	name := names[kind]
	c, err := table.comm(int64(h))
	if err != nil {
		return fail(0, fmt.Errorf("%s: %w", name, err))
	}
	if req == nil {
		return fail(int64(h), fmt.Errorf("%w: %s: request is NULL", pg.ErrInvalidArgument, name))
	}
	*req = 0
	if device != -1 {
		return fail(int64(h), fmt.Errorf("%w: %s: device %d: this build of gotree handles host memory only (device = GOTREE_DEVICE_CPU); the CUDA path is not available", pg.ErrNotSupported, name, device))
	}
	dt := algorithms.DType(dtype)
	var r *pg.Request
	if kind == collBarrier {
		r, err = c.Barrier()
	} else {
		if !dt.Valid() {
			return fail(int64(h), fmt.Errorf("%w: %s: unknown dtype %d", pg.ErrInvalidArgument, name, dtype))
		}
		n := uint64(count)
		recvCount := n
		if kind == collAllGather {
			recvCount = n * uint64(c.Size())
		}
		var sb, rb []byte
		if kind != collBroadcast || int(root) == c.Rank() {
			if sb, err = view(send, n, dt.Size(), name, "sendbuf"); err != nil {
				return fail(int64(h), err)
			}
		}
		if rb, err = view(recv, recvCount, dt.Size(), name, "recvbuf"); err != nil {
			return fail(int64(h), err)
		}
		switch kind {
		case collAllReduce:
			r, err = c.AllReduce(sb, rb, int64(n), dt, algorithms.Op(op))
		case collBroadcast:
			r, err = c.Broadcast(sb, rb, int64(n), dt, int(root))
		case collAllGather:
			r, err = c.AllGather(sb, rb, int64(n), dt)
		}
	}
	if err != nil {
		return fail(int64(h), err)
	}
	*req = C.int64_t(table.add(r))
	return stSuccess
}

//export gotreego_request_test
func gotreego_request_test(h C.int64_t, done *C.int) (st C.int) {
	defer guard(int64(h), &st)
	r, err := table.request(int64(h))
	if err != nil {
		return fail(0, err)
	}
	if done == nil {
		return fail(int64(h), fmt.Errorf("%w: gotree_request_test: done is NULL", pg.ErrInvalidArgument))
	}
	fin, rerr := r.Test()
	*done = 0
	if fin {
		*done = 1
		if rerr != nil {
			return fail(int64(h), rerr)
		}
	}
	return stSuccess
}

//export gotreego_request_wait
func gotreego_request_wait(h C.int64_t, timeoutMS C.int64_t) (st C.int) {
	defer guard(int64(h), &st)
	r, err := table.request(int64(h))
	if err != nil {
		return fail(0, err)
	}
	d := time.Duration(-1)
	if timeoutMS >= 0 {
		d = time.Duration(timeoutMS) * time.Millisecond
	}
	if err := r.Wait(d); err != nil {
		return fail(int64(h), err)
	}
	return stSuccess
}

//export gotreego_request_free
func gotreego_request_free(h C.int64_t) (st C.int) {
	defer guard(int64(h), &st)
	r, err := table.request(int64(h))
	if err != nil {
		return fail(0, err)
	}
	werr := r.Wait(-1)
	table.remove(int64(h))
	if werr != nil && errors.Is(werr, pg.ErrTimeout) {
		if fin, _ := r.Test(); !fin {
			return fail(0, werr)
		}
	}
	return stSuccess
}
