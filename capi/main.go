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
#include "gotree.h"
*/
import "C"

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"time"
	"unsafe"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend"
	"github.com/gotree/gotree/pg"
)

func main() {}

// Version of the library.
const Version = pg.Version

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

//export gotreego_probe_handoff
func gotreego_probe_handoff(bytes C.int64_t, rounds C.int, us *C.double) (st C.int) {
	defer guard(0, &st)
	if us == nil {
		return fail(0, fmt.Errorf("%w: gotree_probe_handoff: us is NULL", pg.ErrInvalidArgument))
	}
	if bytes < 1 || bytes > 64<<20 || rounds < 1 || rounds > 1000 {
		return fail(0, fmt.Errorf("%w: gotree_probe_handoff: need 1 B to 64 MiB and 1 to 1000 rounds, got %d bytes and %d rounds", pg.ErrInvalidArgument, int64(bytes), int(rounds)))
	}
	d, err := backend.HandoffProbe(int(bytes), int(rounds))
	switch {
	case errors.Is(err, backend.ErrNoCPUPair):
		return fail(0, fmt.Errorf("%w: gotree_probe_handoff: %v", pg.ErrNotSupported, err))
	case err != nil:
		return fail(0, fmt.Errorf("%w: gotree_probe_handoff: %v", pg.ErrSystem, err))
	}
	*us = C.double(float64(d.Nanoseconds()) / 1e3)
	return stSuccess
}

//export gotreego_mem_alloc
func gotreego_mem_alloc(bytes C.int64_t, zero C.int, ptr *unsafe.Pointer) (st C.int) {
	defer guard(0, &st)
	name, alloc := "gotree_mem_alloc", backend.AllocWindow
	if zero == 0 {
		name, alloc = "gotree_mem_alloc_uninit", backend.AllocWindowUninit
	}
	if ptr == nil {
		return fail(0, fmt.Errorf("%w: %s: ptr is NULL", pg.ErrInvalidArgument, name))
	}
	b, err := alloc(int64(bytes))
	switch {
	case errors.Is(err, backend.ErrWindowSize):
		return fail(0, fmt.Errorf("%w: %s: %v", pg.ErrInvalidArgument, name, err))
	case err != nil:
		return fail(0, fmt.Errorf("%w: %s: %v", pg.ErrSystem, name, err))
	}
	*ptr = unsafe.Pointer(unsafe.SliceData(b))
	return stSuccess
}

//export gotreego_mem_free
func gotreego_mem_free(ptr unsafe.Pointer) (st C.int) {
	defer guard(0, &st)
	if ptr == nil {
		return fail(0, fmt.Errorf("%w: gotree_mem_free: ptr is NULL", pg.ErrInvalidArgument))
	}
	if err := backend.FreeWindow(ptr); err != nil {
		return fail(0, fmt.Errorf("%w: gotree_mem_free: %v", pg.ErrInvalidArgument, err))
	}
	return stSuccess
}

//export gotreego_mem_set_cache
func gotreego_mem_set_cache(bytes C.int64_t) (st C.int) {
	defer guard(0, &st)
	backend.SetWindowCache(int64(bytes))
	return stSuccess
}

//export gotreego_cpu_allocator_config
func gotreego_cpu_allocator_config(minBytes, cacheBytes *C.int64_t) (st C.int) {
	defer guard(0, &st)
	if minBytes == nil || cacheBytes == nil {
		return fail(0, fmt.Errorf("%w: gotree_cpu_allocator_config: min_bytes or cache_bytes is NULL", pg.ErrInvalidArgument))
	}
	cfg, err := pg.LoadConfig(os.Getenv)
	if err != nil {
		return fail(0, fmt.Errorf("%w: %v", pg.ErrInvalidArgument, err))
	}
	*minBytes, *cacheBytes = C.int64_t(cfg.CPUAllocator.MinBytes), C.int64_t(cfg.CPUAllocator.CacheBytes)
	return stSuccess
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
	cfg.CallersFromC = true
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

//export gotreego_comm_will_wait
func gotreego_comm_will_wait(h C.int64_t, on C.int) (st C.int) {
	defer guard(int64(h), &st)
	c, err := table.comm(int64(h))
	if err != nil {
		return fail(0, err)
	}
	c.WillWait(on != 0)
	return stSuccess
}

//export gotreego_comm_async_error
func gotreego_comm_async_error(h C.int64_t, status *C.int) (st C.int) {
	defer guard(int64(h), &st)
	c, err := table.comm(int64(h))
	if err != nil {
		return fail(0, err)
	}
	if status == nil {
		return fail(int64(h), fmt.Errorf("%w: gotree_comm_get_async_error: async_status is NULL", pg.ErrInvalidArgument))
	}
	ferr := c.Err()
	*status = statusOf(ferr)
	if ferr != nil {
		table.setErr(int64(h), ferr.Error())
	}
	return stSuccess
}

//export gotreego_comm_flight_record
func gotreego_comm_flight_record(h C.int64_t, buf *C.char, buflen C.int64_t, length *C.int64_t) (st C.int) {
	defer guard(int64(h), &st)
	c, err := table.comm(int64(h))
	if err != nil {
		return fail(0, err)
	}
	return jsonOut(h, "gotree_comm_flight_record", func() (any, error) { return c.FlightRecord(), nil }, buf, buflen, length)
}

//export gotreego_comm_describe
func gotreego_comm_describe(h C.int64_t, sizes *C.int64_t, nsizes C.int64_t, buf *C.char, buflen C.int64_t, length *C.int64_t) (st C.int) {
	defer guard(int64(h), &st)
	c, err := table.comm(int64(h))
	if err != nil {
		return fail(0, err)
	}
	if nsizes < 0 || (sizes == nil && nsizes > 0) {
		return fail(int64(h), fmt.Errorf("%w: gotree_comm_describe: %d sizes at %p", pg.ErrInvalidArgument, nsizes, sizes))
	}
	var bytes []int64 // nil: the default sizes
	if nsizes > 0 {
		bytes = slices.Clone(unsafe.Slice((*int64)(unsafe.Pointer(sizes)), int(nsizes)))
	}
	return jsonOut(h, "gotree_comm_describe", func() (any, error) { return c.Describe(bytes) }, buf, buflen, length)
}

// jsonOut copies what get returns, as JSON, into buf (NUL-terminated,
// truncated to buflen) and its full length into *length, for the
// functions named what.
func jsonOut(h C.int64_t, what string, get func() (any, error), buf *C.char, buflen C.int64_t, length *C.int64_t) C.int {
	if length == nil {
		return fail(int64(h), fmt.Errorf("%w: %s: len is NULL", pg.ErrInvalidArgument, what))
	}
	if buf == nil && buflen > 0 {
		return fail(int64(h), fmt.Errorf("%w: %s: buf is NULL but buflen is %d", pg.ErrInvalidArgument, what, buflen))
	}
	v, err := get()
	if err != nil {
		return fail(int64(h), err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fail(int64(h), fmt.Errorf("%w: %s: %v", pg.ErrSystem, what, err))
	}
	*length = copyOut(string(b), buf, buflen)
	return stSuccess
}

//export gotreego_comm_dump_flight_record
func gotreego_comm_dump_flight_record(h C.int64_t, reason *C.char) (st C.int) {
	defer guard(int64(h), &st)
	c, err := table.comm(int64(h))
	if err != nil {
		return fail(0, err)
	}
	why := ""
	if reason != nil {
		why = C.GoString(reason)
	}
	c.DumpFlightRecord(why)
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
	collAllReduce     = 0
	collBroadcast     = 1
	collAllGather     = 2
	collBarrier       = 3
	collReduce        = 4
	collReduceScatter = 5
	collAllToAll      = 6
	collGather        = 7
	collScatter       = 8
)

var collNames = [...]string{"gotree_allreduce", "gotree_broadcast", "gotree_allgather", "gotree_barrier",
	"gotree_reduce", "gotree_reduce_scatter", "gotree_alltoall", "gotree_gather", "gotree_scatter"}

// cpuOnly refuses device buffers for the operations without a device path
// or a host-staged one.
func cpuOnly(name string, device C.int) error {
	if device != -1 {
		return fmt.Errorf("%w: %s: device %d: CUDA buffers are supported by allreduce, broadcast, reduce, allgather, reduce_scatter, alltoall(v), gather, scatter, send and recv; %s takes host memory (device = GOTREE_DEVICE_CPU)", pg.ErrNotSupported, name, device, name)
	}
	return nil
}

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

// issue is the common shape of every entry point that starts an
// operation: find the communicator, check the request pointer and the
// device, run start, and hand back a request handle or the error's status.
func issue(h C.int64_t, req *C.int64_t, name string, device C.int, start func(c *pg.Comm) (*pg.Request, error)) C.int {
	c, err := table.comm(int64(h))
	if err != nil {
		return fail(0, fmt.Errorf("%s: %w", name, err))
	}
	if req == nil {
		return fail(int64(h), fmt.Errorf("%w: %s: request is NULL", pg.ErrInvalidArgument, name))
	}
	*req = 0
	if err := cpuOnly(name, device); err != nil {
		return fail(int64(h), err)
	}
	r, err := start(c)
	if err != nil {
		return fail(int64(h), err)
	}
	*req = C.int64_t(table.add(r))
	return stSuccess
}

// gotree.h's dtype values are algorithms.DType's: an index out of range
// (a compile error) otherwise. The last one also catches a new dtype that
// gotree.h lacks.
var _ = [1]int{}[(C.GOTREE_FLOAT32-int(algorithms.Float32))|(C.GOTREE_FLOAT64-int(algorithms.Float64))|
	(C.GOTREE_FLOAT16-int(algorithms.Float16))|(C.GOTREE_BFLOAT16-int(algorithms.BFloat16))|
	(C.GOTREE_INT8-int(algorithms.Int8))|(C.GOTREE_UINT8-int(algorithms.Uint8))|
	(C.GOTREE_INT16-int(algorithms.Int16))|(C.GOTREE_INT32-int(algorithms.Int32))|
	(C.GOTREE_INT64-int(algorithms.Int64))|(C.GOTREE_BOOL-int(algorithms.Bool))|
	(C.GOTREE_COMPLEX64-int(algorithms.Complex64))|(C.GOTREE_COMPLEX128-int(algorithms.Complex128))|
	(C.GOTREE_UINT16-int(algorithms.Uint16))|(C.GOTREE_UINT32-int(algorithms.Uint32))|
	(C.GOTREE_UINT64-int(algorithms.Uint64))|(C.GOTREE_FLOAT8_E4M3-int(algorithms.Float8E4M3))|
	(C.GOTREE_FLOAT8_E5M2-int(algorithms.Float8E5M2))|(C.GOTREE_FLOAT8_E5M2+1-algorithms.NumDTypes)]

// checkDType refuses an unknown element type.
func checkDType(name string, dtype C.int) (algorithms.DType, error) {
	dt := algorithms.DType(dtype)
	if !dt.Valid() {
		return dt, fmt.Errorf("%w: %s: unknown dtype %d", pg.ErrInvalidArgument, name, dtype)
	}
	return dt, nil
}

//export gotreego_collective
func gotreego_collective(kind C.int, h C.int64_t, send, recv unsafe.Pointer, count C.uint64_t, dtype, op, root, device C.int, stream unsafe.Pointer, req *C.int64_t) (st C.int) {
	defer guard(int64(h), &st)
	if kind < 0 || int(kind) >= len(collNames) {
		return fail(int64(h), fmt.Errorf("%w: unknown collective %d", pg.ErrInvalidArgument, kind))
	}
	name := collNames[kind]
	if device != -1 && stagedKinds[int(kind)] {
		return issueDevice(h, req, name, func(c *pg.Comm) error {
			return stagedCollective(c, int(kind), name, uintptr(send), uintptr(recv), uint64(count), algorithms.DType(dtype), algorithms.Op(op), int(root), int(device), uintptr(stream))
		})
	}
	if device != -1 {
		return issueDevice(h, req, name, func(c *pg.Comm) error {
			return deviceCollective(c, int(kind), name, uintptr(send), uintptr(recv), uint64(count), algorithms.DType(dtype), algorithms.Op(op), int(root), int(device), uintptr(stream))
		})
	}
	return issue(h, req, name, device, func(c *pg.Comm) (*pg.Request, error) {
		return issueCollective(c, int(kind), name, send, recv, uint64(count), algorithms.DType(dtype), algorithms.Op(op), int(root))
	})
}

// deviceKinds maps the collectives with a device path to theirs.
var deviceKinds = map[int]algorithms.Collective{collAllReduce: algorithms.AllReduce, collBroadcast: algorithms.Broadcast,
	collAllGather: algorithms.AllGather, collReduce: algorithms.Reduce, collReduceScatter: algorithms.ReduceScatter}

// stagedKinds are the collectives that run on CUDA buffers through host
// memory (pg.Comm.DeviceStaged): they have no device path.
var stagedKinds = map[int]bool{collAllToAll: true, collGather: true, collScatter: true}

// stagedCollective runs a collective of stagedKinds on CUDA buffers
// through host memory: the CPU collective (issueCollective) on host copies
// of the buffers this rank has. It returns when the result is in place.
func stagedCollective(c *pg.Comm, kind int, name string, send, recv uintptr, n uint64, dt algorithms.DType, op algorithms.Op, root, device int, stream uintptr) error {
	if !dt.Valid() {
		return fmt.Errorf("%w: %s: unknown dtype %d", pg.ErrInvalidArgument, name, int(dt))
	}
	if n > 1<<40 {
		return fmt.Errorf("%w: %s: count %d is too large", pg.ErrInvalidArgument, name, n)
	}
	if err := checkRoot(c, kind, name, root); err != nil {
		return err
	}
	b := collBuffers(kind, n, c.Size(), c.Rank(), root)
	esize := uint64(dt.Size())
	a := pg.StagedArgs{What: name, Device: device, Stream: stream}
	if b.needSend {
		a.Send, a.SendBytes = send, b.sendN*esize
	}
	if b.needRecv {
		a.Recv, a.RecvBytes = recv, b.recvN*esize
	}
	return c.DeviceStaged(a, func(sb, rb []byte) (*pg.Request, error) {
		return issueCollective(c, kind, name, unsafe.Pointer(unsafe.SliceData(sb)), unsafe.Pointer(unsafe.SliceData(rb)), n, dt, op, root)
	})
}

// issueDevice runs enqueue (a collective on CUDA buffers, queued on the
// caller's stream before it returns) and hands back a request that is
// already complete: completion is the stream's business.
func issueDevice(h C.int64_t, req *C.int64_t, name string, enqueue func(c *pg.Comm) error) C.int {
	return issue(h, req, name, -1, func(c *pg.Comm) (*pg.Request, error) {
		if err := enqueue(c); err != nil {
			return nil, err
		}
		return pg.CompletedRequest(name), nil
	})
}

// deviceCollective checks one collective on CUDA buffers and enqueues it.
// Buffers are as for issueCollective; in place is either NCCL's layout
// (allgather sendbuf = recvbuf + rank*count, reduce_scatter recvbuf =
// sendbuf + rank*count) or sendbuf = recvbuf (the block at the start).
func deviceCollective(c *pg.Comm, kind int, name string, send, recv uintptr, n uint64, dt algorithms.DType, op algorithms.Op, root, device int, stream uintptr) error {
	coll, ok := deviceKinds[kind]
	if !ok {
		return cpuOnly(name, C.int(device))
	}
	if !dt.Valid() {
		return fmt.Errorf("%w: %s: unknown dtype %d", pg.ErrInvalidArgument, name, int(dt))
	}
	if n > 1<<40 {
		return fmt.Errorf("%w: %s: count %d is too large", pg.ErrInvalidArgument, name, n)
	}
	isRoot := root == c.Rank()
	switch {
	case kind == collBroadcast && !isRoot:
		send = recv // not read
	case kind == collReduce && !isRoot:
		recv = send // not written
	}
	return c.DeviceCollective(pg.DeviceArgs{Coll: coll, Send: send, Recv: recv, Count: int64(n), DType: dt, Op: op, Root: root, Device: device, Stream: stream})
}

// checkRoot refuses a root outside the communicator for the collectives
// that have one.
func checkRoot(c *pg.Comm, kind int, name string, root int) error {
	if kind == collBroadcast || kind == collReduce || kind == collGather || kind == collScatter {
		if root < 0 || root >= c.Size() {
			return fmt.Errorf("%w: %s: root %d is outside [0, %d)", pg.ErrInvalidArgument, name, root, c.Size())
		}
	}
	return nil
}

// buffers is which buffers of a collective a rank has, and their sizes
// in elements (the table at issueCollective).
type buffers struct {
	sendN, recvN       uint64
	needSend, needRecv bool
}

func collBuffers(kind int, n uint64, size, rank, root int) buffers {
	all := n * uint64(size)
	isRoot := root == rank
	b := buffers{sendN: n, recvN: n}
	switch kind {
	case collAllGather:
		b.recvN = all
	case collReduceScatter:
		b.sendN = all
	case collAllToAll:
		b.sendN, b.recvN = all, all
	case collGather:
		b.recvN = all
	case collScatter:
		b.sendN = all
	}
	b.needSend = !(kind == collBroadcast || kind == collScatter) || isRoot
	b.needRecv = !(kind == collReduce || kind == collGather) || isRoot
	return b
}

// issueCollective checks the buffers of one collective and issues it.
// Which buffers exist on which rank, and their sizes in elements:
//
//	allreduce, reduce-on-root      send n, recv n
//	broadcast                      send n (root only), recv n
//	allgather                      send n, recv nranks*n
//	reduce (not root)              send n
//	reduce_scatter                 send nranks*n, recv n
//	alltoall                       send nranks*n, recv nranks*n
//	gather                         send n, recv nranks*n (root only)
//	scatter                        send nranks*n (root only), recv n
func issueCollective(c *pg.Comm, kind int, name string, send, recv unsafe.Pointer, n uint64, dt algorithms.DType, op algorithms.Op, root int) (*pg.Request, error) {
	if kind == collBarrier {
		return c.Barrier()
	}
	if !dt.Valid() {
		return nil, fmt.Errorf("%w: %s: unknown dtype %d", pg.ErrInvalidArgument, name, int(dt))
	}
	if err := checkRoot(c, kind, name, root); err != nil {
		return nil, err
	}
	b := collBuffers(kind, n, c.Size(), c.Rank(), root)
	var sb, rb []byte
	var err error
	if b.needSend {
		if sb, err = view(send, b.sendN, dt.Size(), name, "sendbuf"); err != nil {
			return nil, err
		}
	}
	if b.needRecv {
		if rb, err = view(recv, b.recvN, dt.Size(), name, "recvbuf"); err != nil {
			return nil, err
		}
	}
	cnt := int64(n)
	switch kind {
	case collAllReduce:
		return c.AllReduce(sb, rb, cnt, dt, op)
	case collBroadcast:
		return c.Broadcast(sb, rb, cnt, dt, root)
	case collAllGather:
		return c.AllGather(sb, rb, cnt, dt)
	case collReduce:
		return c.Reduce(sb, rb, cnt, dt, op, root)
	case collReduceScatter:
		return c.ReduceScatter(sb, rb, cnt, dt, op)
	case collAllToAll:
		return c.AllToAllEqual(sb, rb, cnt, dt)
	case collGather:
		return c.Gather(sb, rb, cnt, dt, root)
	case collScatter:
		return c.Scatter(sb, rb, cnt, dt, root)
	}
	return nil, fmt.Errorf("%w: unknown collective %d", pg.ErrInvalidArgument, kind)
}

//export gotreego_alltoallv
func gotreego_alltoallv(h C.int64_t, send unsafe.Pointer, sendCounts, sendDispls *C.uint64_t, recv unsafe.Pointer, recvCounts, recvDispls *C.uint64_t, dtype, device C.int, stream unsafe.Pointer, req *C.int64_t) (st C.int) {
	defer guard(int64(h), &st)
	const name = "gotree_alltoallv"
	// vals (counts and displacements) and ends (the elements each buffer
	// must hold), checked.
	parse := func(c *pg.Comm) (dt algorithms.DType, vals [][]int64, ends [2]uint64, err error) {
		if dt, err = checkDType(name, dtype); err != nil {
			return
		}
		n := c.Size()
		arrays := []struct {
			p    *C.uint64_t
			what string
		}{{sendCounts, "sendcounts"}, {sendDispls, "sdispls"}, {recvCounts, "recvcounts"}, {recvDispls, "rdispls"}}
		vals = make([][]int64, 4)
		for i, a := range arrays {
			if a.p == nil {
				return dt, nil, ends, fmt.Errorf("%w: %s: %s is NULL", pg.ErrInvalidArgument, name, a.what)
			}
			src := unsafe.Slice((*uint64)(unsafe.Pointer(a.p)), n)
			vals[i] = make([]int64, n)
			for p, v := range src {
				if v > 1<<56 {
					return dt, nil, ends, fmt.Errorf("%w: %s: %s[%d] = %d is too large", pg.ErrInvalidArgument, name, a.what, p, v)
				}
				vals[i][p] = int64(v)
			}
		}
		for p := 0; p < n; p++ {
			ends[0] = max(ends[0], uint64(vals[0][p]+vals[1][p]))
			ends[1] = max(ends[1], uint64(vals[2][p]+vals[3][p]))
		}
		return dt, vals, ends, nil
	}
	if device != -1 {
		return issueDevice(h, req, name, func(c *pg.Comm) error {
			dt, vals, ends, err := parse(c)
			if err != nil {
				return err
			}
			esize := uint64(dt.Size())
			a := pg.StagedArgs{What: name, Send: uintptr(send), Recv: uintptr(recv), SendBytes: ends[0] * esize, RecvBytes: ends[1] * esize, Device: int(device), Stream: uintptr(stream)}
			return c.DeviceStaged(a, func(sb, rb []byte) (*pg.Request, error) {
				return c.AllToAll(sb, rb, vals[0], vals[1], vals[2], vals[3], dt)
			})
		})
	}
	return issue(h, req, name, device, func(c *pg.Comm) (*pg.Request, error) {
		dt, vals, ends, err := parse(c)
		if err != nil {
			return nil, err
		}
		sb, err := view(send, ends[0], dt.Size(), name, "sendbuf")
		if err != nil {
			return nil, err
		}
		rb, err := view(recv, ends[1], dt.Size(), name, "recvbuf")
		if err != nil {
			return nil, err
		}
		return c.AllToAll(sb, rb, vals[0], vals[1], vals[2], vals[3], dt)
	})
}

//export gotreego_p2p
func gotreego_p2p(isSend C.int, h C.int64_t, buf unsafe.Pointer, count C.uint64_t, dtype, peer, device C.int, stream unsafe.Pointer, req *C.int64_t) (st C.int) {
	defer guard(int64(h), &st)
	name := map[bool]string{true: "gotree_send", false: "gotree_recv"}[isSend != 0]
	if device != -1 {
		// CUDA buffers go through host memory (pg.Comm.DeviceSend,
		// DeviceRecv): a send returns once its bytes are on the host, a
		// receive once they are on the device.
		return issue(h, req, name, -1, func(c *pg.Comm) (*pg.Request, error) {
			dt, err := checkDType(name, dtype)
			if err != nil {
				return nil, err
			}
			if uint64(count) > (1<<40)/uint64(dt.Size()) {
				return nil, fmt.Errorf("%w: %s: count %d is too large", pg.ErrInvalidArgument, name, count)
			}
			n := int64(count)
			a := pg.StagedArgs{What: name, Device: int(device), Stream: uintptr(stream)}
			bytes := uint64(n) * uint64(dt.Size())
			switch {
			case isSend != 0:
				a.Send, a.SendBytes = uintptr(buf), bytes
				return c.DeviceSend(a, func(b []byte) (*pg.Request, error) { return c.Send(b, n, dt, int(peer)) })
			case int(peer) == pg.AnySource:
				a.Recv, a.RecvBytes = uintptr(buf), bytes
				return c.DeviceRecv(a, func(b []byte) (*pg.Request, error) { return c.RecvAny(b, n, dt) })
			}
			a.Recv, a.RecvBytes = uintptr(buf), bytes
			return c.DeviceRecv(a, func(b []byte) (*pg.Request, error) { return c.Recv(b, n, dt, int(peer)) })
		})
	}
	return issue(h, req, name, device, func(c *pg.Comm) (*pg.Request, error) {
		dt, err := checkDType(name, dtype)
		if err != nil {
			return nil, err
		}
		b, err := view(buf, uint64(count), dt.Size(), name, "buf")
		if err != nil {
			return nil, err
		}
		switch {
		case isSend != 0:
			return c.Send(b, int64(count), dt, int(peer))
		case int(peer) == pg.AnySource: // GOTREE_ANY_SOURCE
			return c.RecvAny(b, int64(count), dt)
		}
		return c.Recv(b, int64(count), dt, int(peer))
	})
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

//export gotreego_request_source
func gotreego_request_source(h C.int64_t, source *C.int) (st C.int) {
	defer guard(int64(h), &st)
	r, err := table.request(int64(h))
	if err != nil {
		return fail(0, err)
	}
	if source == nil {
		return fail(int64(h), fmt.Errorf("%w: gotree_request_source: source is NULL", pg.ErrInvalidArgument))
	}
	*source = C.int(r.Source())
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
