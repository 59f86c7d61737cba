//go:build linux

package backend

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ShmDir is where shared-memory segments are created.
const ShmDir = "/dev/shm"

// The layout of one direction of a shm link (all offsets in bytes; each
// counter on its own cache line):
//
//	0    tail      uint64  messages posted by the sender
//	128  head      uint64  messages consumed by the receiver
//	256  rxWait    uint32  1 while the receiver sleeps on tail
//	384  txWait    uint32  1 while the sender sleeps on head
//	512  live      uint64  the sender's call token while it is in a call
//	                       whose peers write into its buffers (guard.go)
//	640  writing   uint64  the sender's call token while it writes into the
//	                       receiver's buffers
//	768  sizes     [slots]uint32
//	     tags      [slots]uint32
//	hdr  data      [slots][slotBytes]byte, hdr rounded up to 4 KiB
//
// A segment holds two directions: creator→opener, then opener→creator.
// Waits spin briefly, yield, then sleep on a futex (the low word of tail
// or head), so that more ranks than cores still progress.
const (
	offTail   = 0
	offHead   = 128
	offRxWait = 256
	offTxWait = 384
	offLive   = 512
	offWrite  = 640
	offSizes  = 768
)

func shmHeaderBytes(slots int) int { return (offSizes + 8*slots + 4095) &^ 4095 }

func shmDirBytes(slots, slotBytes int) int { return shmHeaderBytes(slots) + slots*slotBytes }

// ShmSegmentBytes is the size of the segment of one link.
func ShmSegmentBytes(slots, slotBytes int) int { return 2 * shmDirBytes(slots, slotBytes) }

// ErrShmSpace reports that /dev/shm cannot hold a segment.
var ErrShmSpace = errors.New("not enough shared memory")

type shmDir struct {
	base      unsafe.Pointer
	slots     int
	slotBytes int
	idx       int // 0: creator to opener, 1: opener to creator
}

func (d shmDir) u64(off int) *uint64 { return (*uint64)(unsafe.Add(d.base, off)) }
func (d shmDir) u32(off int) *uint32 { return (*uint32)(unsafe.Add(d.base, off)) }
func (d shmDir) size(i int) *uint32  { return d.u32(offSizes + 4*i) }
func (d shmDir) tag(i int) *uint32   { return d.u32(offSizes + 4*d.slots + 4*i) }
func (d shmDir) slot(i int) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(d.base, shmHeaderBytes(d.slots)+i*d.slotBytes)), d.slotBytes)
}

// segment is one mapping of a shm file. Both ends of a link in the same
// process (ranks as goroutines: tests, one-process jobs) share one mapping
// instead of mapping the file twice: one address per word keeps the race
// detector's view of the atomics right, and halves the mappings.
type segment struct {
	name string
	mem  []byte
	refs int // guarded by segmentsMu
	// hb mirrors each direction's tail and head publications in Go memory.
	// The race detector does not see memory outside Go's heap, so without
	// these it cannot tell that a receive happens after its send when both
	// ends live in one process; in other processes they are simply unused.
	hb [2][2]atomic.Uint64 // [direction][0: tail, 1: head]
}

// segments are this process's own segments, by file name, until both ends
// have unmapped them. The package's only mutable state.
var (
	segmentsMu sync.Mutex
	segments   = map[string]*segment{}
)

func (g *segment) release() {
	segmentsMu.Lock()
	defer segmentsMu.Unlock()
	g.refs--
	if g.refs == 0 {
		delete(segments, g.name)
		_ = unix.Munmap(g.mem)
	}
}

type shmConn struct {
	peer, channel int
	seg           *segment
	tx, rx        shmDir
	ctrl          net.Conn
	maxMsg        int

	failErr atomic.Pointer[error]      // set once, when the link fails: its reason
	policy  atomic.Pointer[WaitPolicy] // nil: the zero policy

	// state counts the operations in flight (low bits) and has shmClosed
	// set once the link is closed: enter and exit are one atomic
	// operation each on every send and receive, not a lock. The segment
	// is unmapped when state becomes exactly shmClosed.
	state atomic.Int64

	mu       sync.Mutex // unmapped, drained
	unmapped bool
	borrowed bool
	drained  chan struct{} // a waiting Close's: closed once the segment is unmapped
}

const shmClosed = 1 << 40

// shmCloseWait bounds how long Close waits for the link's operations in
// flight (woken by its failure, they leave within microseconds) so that
// the segment is unmapped when Close returns: a communicator destroyed
// leaves no mapping behind that goes a moment later.
const shmCloseWait = time.Second

func futexWait(addr *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), uintptr(0 /*FUTEX_WAIT*/), uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

func futexWake(addr *uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), uintptr(1 /*FUTEX_WAKE*/), uintptr(1<<30), 0, 0, 0)
}

// CreateShmConn runs on the lower rank of a same-host pair: it creates a
// segment, tells the peer its name over ctrl (an authenticated socket
// that then serves as the liveness watch) and unlinks it once mapped by
// both.
func CreateShmConn(ctrl net.Conn, peer, channel, slots, slotBytes int, deadline time.Time) (Conn, error) {
	if slots <= 0 {
		slots = DefaultSlots
	}
	if slotBytes <= 0 {
		slotBytes = DefaultSlotBytes
	}
	size := ShmSegmentBytes(slots, slotBytes)
	f, name, err := createShmFile("gotree-", size, fmt.Sprintf("a %d KiB segment for the link with rank %d", size>>10, peer),
		fmt.Sprintf("Each same-host link needs %d KiB per channel; enlarge /dev/shm (docker run --shm-size=1g, or a bigger tmpfs), or lower GOTREE_BUFFSIZE / GOTREE_MAX_NCHANNELS", size>>10))
	if err != nil {
		return nil, &PeerError{peer, channel, "connect", err}
	}
	defer os.Remove(name)
	defer f.Close()
	s, err := mapShm(f, name, size, slots, slotBytes, true)
	if err != nil {
		return nil, &PeerError{peer, channel, "connect", err}
	}
	s.peer, s.channel, s.ctrl = peer, channel, ctrl
	msg := make([]byte, 10+len(name))
	copy(msg, "SHM1")
	binary.LittleEndian.PutUint16(msg[4:], uint16(slots))
	binary.LittleEndian.PutUint32(msg[6:], uint32(slotBytes))
	copy(msg[10:], name)
	_ = ctrl.SetDeadline(deadline)
	var ack [1]byte
	if err = writeCtl(ctrl, msg); err == nil {
		_, err = io.ReadFull(ctrl, ack[:])
	}
	_ = ctrl.SetDeadline(time.Time{})
	if err != nil || ack[0] != 1 {
		s.unmap()
		if err == nil {
			err = errors.New("peer could not map the segment")
		}
		return nil, &PeerError{peer, channel, "connect", fmt.Errorf("shared memory setup: %w", err)}
	}
	go s.watch()
	return s, nil
}

// createShmFile creates a new file prefix<pid>-<random> in ShmDir with
// size bytes allocated. A full /dev/shm is an error wrapping ErrShmSpace
// that says what did not fit, how much is free, and (remedy) what to do.
func createShmFile(prefix string, size int, what, remedy string) (*os.File, string, error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	name := filepath.Join(ShmDir, fmt.Sprintf("%s%d-%s", prefix, os.Getpid(), hex.EncodeToString(rnd[:])))
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, "", fmt.Errorf("creating %s: %w", name, err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(size)); err != nil {
		f.Close()
		os.Remove(name)
		var st unix.Statfs_t
		free := "unknown"
		if unix.Statfs(ShmDir, &st) == nil {
			free = fmt.Sprintf("%d MiB free of %d MiB", st.Bavail*uint64(st.Bsize)>>20, st.Blocks*uint64(st.Bsize)>>20)
		}
		return nil, "", fmt.Errorf("%w: %s does not fit in %s (%s; %v). %s", ErrShmSpace, what, ShmDir, free, err, remedy)
	}
	return f, name, nil
}

// OpenShmConn runs on the higher rank: it maps the segment the peer names
// over ctrl.
func OpenShmConn(ctrl net.Conn, peer, channel int, deadline time.Time) (Conn, error) {
	_ = ctrl.SetDeadline(deadline)
	defer ctrl.SetDeadline(time.Time{})
	msg, err := readCtl(ctrl, 4096)
	if err != nil {
		return nil, &PeerError{peer, channel, "connect", fmt.Errorf("shared memory setup: %w", err)}
	}
	if len(msg) < 10 || string(msg[:4]) != "SHM1" {
		return nil, &PeerError{peer, channel, "connect", fmt.Errorf("%w: bad shared memory offer", ErrProto)}
	}
	slots := int(binary.LittleEndian.Uint16(msg[4:]))
	slotBytes := int(binary.LittleEndian.Uint32(msg[6:]))
	name := string(msg[10:])
	if slots <= 0 || slots > 1024 || slotBytes <= 0 || slotBytes > 1<<28 || filepath.Dir(name) != ShmDir {
		ctrl.Write([]byte{0})
		return nil, &PeerError{peer, channel, "connect", fmt.Errorf("%w: shared memory offer out of bounds (%d slots of %d bytes at %q)", ErrProto, slots, slotBytes, name)}
	}
	size := ShmSegmentBytes(slots, slotBytes)
	s := sharedSegment(name, slots, slotBytes, size)
	if s == nil {
		f, err := os.OpenFile(name, os.O_RDWR, 0)
		if err != nil {
			ctrl.Write([]byte{0})
			return nil, &PeerError{peer, channel, "connect", fmt.Errorf("opening the peer's segment: %w (are both ranks really on one host? set GOTREE_HOST_ID if host ids collide)", err)}
		}
		defer f.Close()
		if st, err := f.Stat(); err != nil || st.Size() != int64(size) {
			ctrl.Write([]byte{0})
			return nil, &PeerError{peer, channel, "connect", fmt.Errorf("%w: segment %s has the wrong size", ErrProto, name)}
		}
		if s, err = mapShm(f, name, size, slots, slotBytes, false); err != nil {
			ctrl.Write([]byte{0})
			return nil, &PeerError{peer, channel, "connect", err}
		}
	}
	s.peer, s.channel, s.ctrl = peer, channel, ctrl
	if _, err := ctrl.Write([]byte{1}); err != nil {
		s.unmap()
		return nil, &PeerError{peer, channel, "connect", err}
	}
	go s.watch()
	return s, nil
}

func writeCtl(c net.Conn, b []byte) error {
	hdr := make([]byte, 4, 4+len(b))
	binary.LittleEndian.PutUint32(hdr, uint32(len(b)))
	_, err := c.Write(append(hdr, b...))
	return err
}

func readCtl(c net.Conn, limit int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.LittleEndian.Uint32(hdr[:]))
	if n > limit {
		return nil, fmt.Errorf("%w: control message of %d bytes", ErrProto, n)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(c, b)
	return b, err
}

func mapShm(f *os.File, name string, size, slots, slotBytes int, creator bool) (*shmConn, error) {
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping %d bytes of shared memory: %w", size, err)
	}
	g := &segment{name: name, mem: mem, refs: 1}
	if creator {
		segmentsMu.Lock()
		segments[name] = g
		segmentsMu.Unlock()
	}
	return newShmConn(g, slots, slotBytes, creator), nil
}

// sharedSegment returns a conn over this process's own mapping of name, or
// nil when another process created it.
func sharedSegment(name string, slots, slotBytes, size int) *shmConn {
	segmentsMu.Lock()
	defer segmentsMu.Unlock()
	g, ok := segments[name]
	if !ok || len(g.mem) != size {
		return nil
	}
	g.refs++
	return newShmConn(g, slots, slotBytes, false)
}

func newShmConn(g *segment, slots, slotBytes int, creator bool) *shmConn {
	d0 := shmDir{unsafe.Pointer(&g.mem[0]), slots, slotBytes, 0}
	d1 := shmDir{unsafe.Add(unsafe.Pointer(&g.mem[0]), shmDirBytes(slots, slotBytes)), slots, slotBytes, 1}
	s := &shmConn{seg: g, maxMsg: slotBytes}
	if creator {
		s.tx, s.rx = d0, d1
	} else {
		s.tx, s.rx = d1, d0
	}
	return s
}

// watch turns the control socket's end (the peer exited or closed) or an
// abort message on it into a link failure that wakes every wait at once.
func (s *shmConn) watch() {
	var b [1]byte
	_, err := s.ctrl.Read(b[:])
	switch {
	case err == nil && b[0] == 'A':
		_ = s.ctrl.SetReadDeadline(time.Now().Add(time.Second))
		why, rerr := readCtl(s.ctrl, maxAbortText)
		if rerr != nil {
			why = []byte("(reason lost)")
		}
		err = &RemoteAbortError{string(why)}
	case err == nil:
		err = fmt.Errorf("%w: unexpected data on the control socket", ErrProto)
	case errors.Is(err, io.EOF):
		err = fmt.Errorf("%w: peer closed the connection (process exited?)", ErrClosed)
	}
	s.fail(err)
}

func (s *shmConn) Abort(reason string) {
	if len(reason) > maxAbortText {
		reason = reason[:maxAbortText]
	}
	_ = s.ctrl.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	msg := make([]byte, 5, 5+len(reason))
	msg[0] = 'A'
	binary.LittleEndian.PutUint32(msg[1:], uint32(len(reason)))
	_, _ = s.ctrl.Write(append(msg, reason...))
	s.close(0)
}

func (s *shmConn) fail(err error) {
	s.failErr.CompareAndSwap(nil, &err) // the first reason stays
	if s.enterMapped() {
		futexWake(s.rx.u32(offTail))
		futexWake(s.tx.u32(offHead))
		s.exit()
	}
}

// failure implements failureReporter: the link's failure, polled until d
// has passed.
func (s *shmConn) failure(d time.Duration) error {
	for end := time.Now().Add(d); ; time.Sleep(time.Millisecond) {
		if p := s.failErr.Load(); p != nil {
			return *p
		}
		if time.Now().After(end) {
			return nil
		}
	}
}

func (s *shmConn) err(op string) error {
	e := ErrClosed
	if p := s.failErr.Load(); p != nil {
		e = *p
	}
	return &PeerError{s.peer, s.channel, op, e}
}

// enter counts an operation in flight on an open link (false: closed).
func (s *shmConn) enter() bool {
	for {
		v := s.state.Load()
		if v&shmClosed != 0 {
			return false
		}
		if s.state.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// enterMapped counts an operation in flight on a link that may be closed
// but is still mapped (fail's wake-ups).
func (s *shmConn) enterMapped() bool {
	for {
		v := s.state.Load()
		if v == shmClosed {
			return false // unmapped, or being unmapped
		}
		if s.state.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// exit ends an operation; the last to leave a closed link unmaps it.
func (s *shmConn) exit() {
	if s.state.Add(-1) == shmClosed {
		s.unmap()
	}
}

func (s *shmConn) unmap() {
	s.mu.Lock()
	s.unmapLocked()
	s.mu.Unlock()
}

func (s *shmConn) unmapLocked() {
	if !s.unmapped {
		s.unmapped = true
		s.seg.release()
	}
	if s.drained != nil {
		close(s.drained)
		s.drained = nil
	}
}

func (s *shmConn) MaxMessage() int { return s.maxMsg }

// guard implements guarded: the words live in the segment, which stays
// mapped until release. The peer is gone once its control socket closed
// (its process exited).
func (s *shmConn) guard() (guardWords, func(), bool) {
	if !s.enter() {
		return guardWords{}, nil, false
	}
	gone := func() bool {
		p := s.failErr.Load()
		return p != nil && errors.Is(*p, ErrClosed)
	}
	return guardWords{s.tx.u64(offLive), s.tx.u64(offWrite), s.rx.u64(offLive), s.rx.u64(offWrite), gone}, s.exit, true
}

// wait blocks until ready() holds, spinning, then yielding, then sleeping
// on the futex word w (whose sleeper flag is flag).
func (s *shmConn) wait(ctx context.Context, ready func() bool, w, flag *uint32) error {
	var pol WaitPolicy
	if p := s.policy.Load(); p != nil {
		pol = *p
	}
	if pollThenYield(ctx, ready, pol) {
		return nil
	}
	deadline, hasDL := ctx.Deadline()
	for {
		if s.failErr.Load() != nil {
			var ra *RemoteAbortError
			if p := s.failErr.Load(); p != nil && errors.As(*p, &ra) {
				return errFailed
			}
			if ready() {
				return nil
			}
			return errFailed
		}
		if err := ctx.Err(); err != nil {
			return ctxErr(ctx)
		}
		atomic.StoreUint32(flag, 1)
		v := atomic.LoadUint32(w)
		if ready() {
			atomic.StoreUint32(flag, 0)
			return nil
		}
		d := 100 * time.Millisecond
		if hasDL {
			d = min(d, time.Until(deadline))
		}
		if d > 0 {
			futexWait(w, v, d)
		}
		atomic.StoreUint32(flag, 0)
		if ready() {
			return nil
		}
	}
}

var errFailed = errors.New("link failed")

// prePolls is how many times a wait checks ready before anything else.
const prePolls = 256

// pollThenYield is what every shared-memory wait does before it sleeps:
// poll ready a few hundred times, busy-poll as pol allows, then yield the
// processor for ctx's yield phase. It reports whether ready held.
func pollThenYield(ctx context.Context, ready func() bool, pol WaitPolicy) bool {
	for i := 0; i < prePolls; i++ {
		if ready() {
			return true
		}
	}
	if pol.BusyPoll > 0 {
		switch busyPoll(ready, pol) {
		case pollCaught:
			return true
		case pollRanOut:
			// Did the peer need this CPU? Then the data is there as soon
			// as this thread has let it run once (busyGuard).
			yieldOnce()
			if ready() {
				busy.record(true, time.Since(pollEpoch))
				return true
			}
			busy.record(false, 0)
		}
	}
	return yieldUntil(ready, pol.YieldGoroutine, pol.yieldPhase(ctx))
}

// WaitPolicy says how a link's waits behave before they sleep on the
// futex (after a few hundred polls, and a yield phase of yieldSpin).
type WaitPolicy struct {
	// BusyPoll is how long to poll the peer's counters before yielding:
	// worth it when every rank of the host has a CPU of its own (a message
	// a few hundred nanoseconds away is then caught without a system
	// call), harmful when ranks share CPUs (the poller keeps the peer it
	// waits for off the CPU).
	BusyPoll time.Duration
	// Pollers is how many waits of this process may busy-poll at once
	// (its share of the host's CPUs; at least 1): a tree-split plan waits
	// on two streams per rank, and more pollers than CPUs starve the
	// peers they wait for.
	Pollers int
	// YieldGoroutine also yields the goroutine (runtime.Gosched) in the
	// yield phase: needed when other ranks of the link run as goroutines
	// of this process (they may be queued behind the waiter), costly
	// otherwise: on a goroutine locked to its thread (every call from C,
	// e.g. torch's) Gosched hands the thread over to another through a
	// futex sleep and wake each time (small allreduces 10x slower when
	// ranks share CPUs).
	YieldGoroutine bool
	// NoYield skips the yield phase, also a waiting caller's (see
	// callerYieldSpin), where yielding would not hand the processor to
	// the ranks that need it: they outnumber the CPUs and run in other
	// scheduler groups. Linux's autogroup gives every session a group of
	// its own, and torchrun starts every worker in a session of its own;
	// sched_yield then lets only this process's own threads go first, so
	// a yielding wait spins on a CPU that a peer's group would get if the
	// wait slept (4 ranks on 2 CPUs under torchrun, 256 KiB allreduce:
	// 116-148 us without the caller's 1 ms phase, 138-200 us with it).
	NoYield bool
}

// busyPollers counts this process's waits that are busy-polling now
// (WaitPolicy.Pollers bounds it): CPUs are a per-process resource.
var busyPollers atomic.Int32

// busy is this process's busyGuard: where its threads run is a property
// of the process, not of one link.
var busy busyGuard

// pollEpoch is the origin of the guard's times (monotonic).
var pollEpoch = time.Now()

// yieldOnce yields the processor once (a variable: tests stand in for
// the peer that runs meanwhile).
var yieldOnce = func() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// busyPoll polls ready for pol.BusyPoll unless pol.Pollers waits of this
// process are polling already or the guard has turned polling off.
func busyPoll(ready func() bool, pol WaitPolicy) pollResult {
	now := time.Since(pollEpoch)
	if !busy.allow(now) {
		return pollSkipped
	}
	defer busyPollers.Add(-1)
	if busyPollers.Add(1) > int32(max(pol.Pollers, 1)) {
		return pollSkipped
	}
	end := now + pol.BusyPoll
	for i := 1; ; i++ {
		if ready() {
			busy.record(false, 0)
			return pollCaught
		}
		if i%128 == 0 && time.Since(pollEpoch) > end {
			return pollRanOut
		}
	}
}

// pollResult is how a busy poll ended.
type pollResult int

const (
	pollSkipped pollResult = iota // not polled: other waits poll, or the guard is off
	pollCaught                    // ready held
	pollRanOut                    // polled for the whole BusyPoll in vain
)

// busyGuard turns busy polling off for a while where it keeps holding
// the CPU that the peer needs. A busy poll pays only when the peer runs on
// another CPU meanwhile; the policy grants it where the host has a CPU per
// rank, but the kernel may still put two ranks on one CPU for stretches of
// seconds (its load balancer; a cpuset changed after the communicator was
// made), and then every wait polls for the whole BusyPoll while its peer
// cannot run: 2 ranks pinned to one CPU after they started took 49-52 µs
// per 4-byte allreduce against 2-4 µs apart (docs/bench.md). The sign of
// it is a poll that ran out followed by data that is there as soon as
// the waiter has yielded once (the peer ran in its place). After
// busyMissLimit such waits in a row, polls are skipped for busyBackoff;
// the first one after that turns them off again if it shows the sign
// too. A poll that catches its data, or one whose peer was merely late
// (no data after the yield either: a rank still computing), clears the
// count.
//
// Turning polls off is not enough to part the ranks: two ranks that wait
// for each other on one CPU never both want to run, so the kernel's load
// balancer finds nothing to move, and waking a sleeper next to its waker
// keeps them together; 2 ranks on 2 CPUs then took 9 µs per small
// allreduce instead of 1.5 µs, for whole runs. So the waiter that trips
// the guard also leaves its CPU (leaveCPU).
type busyGuard struct {
	misses   atomic.Int32
	offUntil atomic.Int64 // time.Duration since pollEpoch
}

const (
	busyMissLimit = 16
	busyBackoff   = 20 * time.Millisecond
)

// allow reports whether a wait may busy-poll at now.
func (g *busyGuard) allow(now time.Duration) bool { return int64(now) >= g.offUntil.Load() }

// record counts a wait whose busy poll held the peer's CPU (shared, at
// now) or one that shows the peer has a CPU of its own (!shared).
func (g *busyGuard) record(shared bool, now time.Duration) {
	if !shared {
		if g.misses.Load() != 0 {
			g.misses.Store(0)
		}
		return
	}
	if g.misses.Add(1) >= busyMissLimit {
		g.offUntil.Store(int64(now + busyBackoff))
		g.misses.Store(busyMissLimit - 1)
		leaveCPU()
	}
}

// leaveCPU moves the calling thread to another CPU its affinity allows
// and gives the affinity back as it was: the kernel migrates a thread at
// once when its CPU leaves its mask, and leaves it where it is when the
// mask comes back. It reports whether the thread moved (not: one CPU
// allowed, or a system call failed). A variable: tests count the calls.
var leaveCPU = func() bool {
	runtime.LockOSThread() // the thread, not the goroutine, is what moves
	defer runtime.UnlockOSThread()
	cpu, ok := currentCPU()
	var orig unix.CPUSet
	if !ok || unix.SchedGetaffinity(0, &orig) != nil {
		return false
	}
	away := orig
	away.Clear(cpu)
	if away.Count() == 0 || unix.SchedSetaffinity(0, &away) != nil {
		return false
	}
	return unix.SchedSetaffinity(0, &orig) == nil
}

// currentCPU is the CPU the calling thread runs on (getcpu(2)).
func currentCPU() (int, bool) {
	var cpu uint32
	_, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0)
	return int(cpu), e == 0
}

// WaitTuner is a link whose waits follow a WaitPolicy (shared memory).
type WaitTuner interface {
	SetWaitPolicy(WaitPolicy)
}

// SetWaitPolicy implements WaitTuner.
func (s *shmConn) SetWaitPolicy(p WaitPolicy) { s.policy.Store(&p) }

// yieldUntil yields the processor, then checks ready, for spin (and at
// least 16 times); it reports whether ready came true. The thread
// yields; the goroutine too only with gosched (see WaitPolicy).
// sched_yield is a raw system call: it never blocks, and through Syscall
// the runtime's monitor would see the P sitting in system calls, take it
// away and wake another thread to run it (4 ranks on 2 CPUs, 64 MiB: 47 ms
// against 34 ms as a raw call). Shared-memory waits and the TCP receiver
// (readableSoon) both go through it before they sleep.
func yieldUntil(ready func() bool, gosched bool, spin time.Duration) bool {
	until := time.Now().Add(spin)
	for i := 0; i < 16 || time.Now().Before(until); i++ {
		if gosched {
			runtime.Gosched()
		}
		unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		if ready() {
			return true
		}
	}
	return false
}

// yieldSpin is how long a wait keeps yielding the processor before it
// sleeps on the futex. Yielding lets other runnable threads go first, so
// it costs little when the machine is oversubscribed; sleeping instead
// lets the (virtual) CPU go idle, and waking it again costs tens of
// microseconds, more than a small message's whole round trip.
//
// 50 µs suits waits of work that runs beside the caller's own (an
// asynchronous collective under a DDP backward pass): yielding longer
// there takes CPU time from the computation (4 ranks on 2 CPUs, DDP steps
// 7–15% slower with 1 ms).
var yieldSpin = 50 * time.Microsecond

// callerYieldSpin is the yield phase of waits on the thread of a caller
// that blocks until the operation ends (CallerWaitsKey): that thread has
// nothing else to run, and between back-to-back small calls a peer is
// often more than yieldSpin away only because its caller is still busy
// between calls (4 ranks on 2 CPUs through torch: a 4-byte allreduce took
// 230–350 µs with 50 µs, 100–170 µs with 1 ms, as sleeping lets the
// virtual CPUs halt and each wake costs tens of microseconds).
var callerYieldSpin = time.Millisecond

// CallerWaitsKey, as a key of an operation's context with any non-nil
// value, says that the operation runs on the thread of a caller that
// blocks until it ends (a synchronous call): its shared-memory waits yield
// the processor for callerYieldSpin instead of yieldSpin before they
// sleep.
var CallerWaitsKey any = callerWaitsKey{}

type callerWaitsKey struct{}

// yieldPhase is how long a wait of ctx's operation under p yields the
// processor before it sleeps.
func (p WaitPolicy) yieldPhase(ctx context.Context) time.Duration {
	switch {
	case p.NoYield:
		return 0
	case ctx != nil && ctx.Value(CallerWaitsKey) != nil:
		return callerYieldSpin
	}
	return yieldSpin
}

func (s *shmConn) Send(ctx context.Context, tag uint32, p []byte) error {
	buf, err := s.Acquire(ctx, len(p))
	if err != nil {
		return err
	}
	copy(buf, p)
	s.Post(tag, len(p))
	return nil
}

// Acquire waits for a free slot of the peer's FIFO and returns it, so that
// an executor can reduce straight into it; Post publishes it. Between the
// two the link is held as in flight.
func (s *shmConn) Acquire(ctx context.Context, n int) ([]byte, error) {
	if n > s.maxMsg {
		return nil, &PeerError{s.peer, s.channel, "send", fmt.Errorf("message of %d bytes exceeds the %d-byte slot", n, s.maxMsg)}
	}
	if !s.enter() {
		return nil, s.err("send")
	}
	tail := atomic.LoadUint64(s.tx.u64(offTail))
	head := s.tx.u64(offHead)
	ready := func() bool { return tail-atomic.LoadUint64(head) < uint64(s.tx.slots) }
	if err := s.wait(ctx, ready, s.tx.u32(offHead), s.tx.u32(offTxWait)); err != nil {
		s.exit()
		if err == errFailed {
			return nil, s.err("send")
		}
		return nil, &PeerError{s.peer, s.channel, "send", err}
	}
	s.seg.hb[s.tx.idx][1].Load()
	return s.tx.slot(int(tail % uint64(s.tx.slots)))[:n:n], nil
}

// Cancel releases the slot returned by the last Acquire unpublished.
func (s *shmConn) Cancel() { s.exit() }

// Post publishes the slot returned by the last Acquire with n bytes.
func (s *shmConn) Post(tag uint32, n int) {
	tail := atomic.LoadUint64(s.tx.u64(offTail))
	i := int(tail % uint64(s.tx.slots))
	atomic.StoreUint32(s.tx.size(i), uint32(n))
	atomic.StoreUint32(s.tx.tag(i), tag)
	s.seg.hb[s.tx.idx][0].Add(1)
	atomic.StoreUint64(s.tx.u64(offTail), tail+1)
	if atomic.LoadUint32(s.tx.u32(offRxWait)) != 0 {
		futexWake(s.tx.u32(offTail))
	}
	s.exit()
}

// awaitMessage waits until the peer has published a message (call names
// the caller in errors) and returns the head index. On success the link is
// left entered (the caller exits it); on failure it is not.
func (s *shmConn) awaitMessage(ctx context.Context, call string) (uint64, error) {
	if s.borrowed {
		return 0, &PeerError{s.peer, s.channel, "recv", fmt.Errorf("%w: %s called before Release", ErrProto, call)}
	}
	if !s.enter() {
		return 0, s.err("recv")
	}
	head := atomic.LoadUint64(s.rx.u64(offHead))
	tail := s.rx.u64(offTail)
	ready := func() bool { return atomic.LoadUint64(tail) != head }
	if err := s.wait(ctx, ready, s.rx.u32(offTail), s.rx.u32(offRxWait)); err != nil {
		s.exit()
		if err == errFailed {
			return 0, s.err("recv")
		}
		return 0, &PeerError{s.peer, s.channel, "recv", err}
	}
	return head, nil
}

func (s *shmConn) Recv(ctx context.Context) ([]byte, uint32, error) {
	head, err := s.awaitMessage(ctx, "Recv")
	if err != nil {
		return nil, 0, err
	}
	s.seg.hb[s.rx.idx][0].Load()
	i := int(head % uint64(s.rx.slots))
	n := int(atomic.LoadUint32(s.rx.size(i)))
	if n > s.rx.slotBytes {
		s.exit()
		return nil, 0, &PeerError{s.peer, s.channel, "recv", fmt.Errorf("%w: message size %d exceeds the slot", ErrProto, n)}
	}
	s.borrowed = true
	return s.rx.slot(i)[:n:n], atomic.LoadUint32(s.rx.tag(i)), nil
}

// Probe implements Prober: it waits like Recv but takes nothing.
func (s *shmConn) Probe(ctx context.Context) error {
	if _, err := s.awaitMessage(ctx, "Probe"); err != nil {
		return err
	}
	s.exit()
	return nil
}

func (s *shmConn) Release() {
	if !s.borrowed {
		return
	}
	s.borrowed = false
	head := s.rx.u64(offHead)
	s.seg.hb[s.rx.idx][1].Add(1)
	atomic.StoreUint64(head, atomic.LoadUint64(head)+1)
	if atomic.LoadUint32(s.rx.u32(offTxWait)) != 0 {
		futexWake(s.rx.u32(offHead))
	}
	s.exit()
}

func (s *shmConn) Close() error { return s.close(shmCloseWait) }

// close fails the link, closes its control socket and unmaps the segment,
// at once if nothing is in flight, else when the last operation leaves:
// close waits for that up to wait (Abort, which may run on a goroutine
// that has an operation in flight, does not wait).
func (s *shmConn) close(wait time.Duration) error {
	s.fail(ErrClosed)
	s.ctrl.Close()
	switch old := s.state.Or(shmClosed); {
	case old&shmClosed != 0:
		return nil // closed before
	case old == 0:
		s.unmap()
		return nil
	case wait <= 0:
		return nil // the last operation in flight unmaps it as it leaves
	}
	var drained chan struct{}
	s.mu.Lock()
	if !s.unmapped {
		if s.drained == nil {
			s.drained = make(chan struct{})
		}
		drained = s.drained
	}
	s.mu.Unlock()
	if drained != nil {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-drained:
		case <-t.C:
		}
	}
	return nil
}
