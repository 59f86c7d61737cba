//go:build linux

package backend

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Windows are buffers that the ranks of a host can map: memory from
// AllocWindow lives in a memfd (anonymous shared memory) instead of the
// process's private pages. A direct plan (Notify, Wait, ReadReduceCopy,
// Offer, ReadCopy) whose peer's buffer lies in a window maps that window
// once (through /proc/<pid>/fd/<fd>, the same permission process_vm_readv
// needs) and then reads and writes it with plain loads and stores: no
// system call per fragment and no copy through a scratch buffer. Buffers
// outside windows still move through process_vm_readv/writev. Nothing has
// to be agreed: the plan is the same either way, and each rank decides per
// peer buffer from the descriptor the peer announced.
//
// A window's mapping begins with one page of header (windowMagic, its id,
// its size); the caller's memory follows it.

// windowMagic begins every window's header page.
const windowMagic = 0x776f646e69774754 // "TGwindow", little-endian

// window is one of this process's windows.
type window struct {
	id   uint64
	fd   int
	mem  []byte // the whole mapping, header page first
	user []byte // what AllocWindow returned
}

// windowRef says where a buffer lies in its owner's window: the window's
// id, the owner's descriptor of its memfd, the mapping's size and the
// buffer's offset in it. A zero id: not in a window.
type windowRef struct {
	id, fd, size, off uint64
}

var ownWindows struct {
	sync.Mutex
	list []*window // sorted by address
}

// ErrWindowSize is returned for a window of no bytes or more than the
// address space allows.
var ErrWindowSize = errors.New("a window holds 1 byte to 64 TiB")

// AllocWindow returns size bytes of zeroed memory that the other ranks of
// this host can map (see the comment above). FreeWindow releases it.
func AllocWindow(size int64) ([]byte, error) { return newWindow(size, true) }

// AllocWindowUninit is AllocWindow without the zeroing of memory that a
// freed window held (SetWindowCache): its contents are undefined, as
// malloc's are. It serves allocators.
func AllocWindowUninit(size int64) ([]byte, error) { return newWindow(size, false) }

func newWindow(size int64, zero bool) ([]byte, error) {
	page := int64(unix.Getpagesize())
	if size < 1 || size > 1<<46 {
		return nil, fmt.Errorf("%w, not %d", ErrWindowSize, size)
	}
	if w := reuseWindow(size, page); w != nil {
		if zero {
			clear(w.user)
		}
		addOwnWindow(w)
		return w.user, nil
	}
	total := page + (size+page-1)/page*page
	fd, err := unix.MemfdCreate("gotree-window", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("gotree: creating a %d-byte window (memfd_create): %w", size, err)
	}
	if err := unix.Ftruncate(fd, total); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("gotree: sizing a %d-byte window: %w", size, err)
	}
	mem, err := unix.Mmap(fd, 0, int(total), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("gotree: mapping a %d-byte window: %w", size, err)
	}
	var id [8]byte
	for binary.LittleEndian.Uint64(id[:]) == 0 {
		_, _ = rand.Read(id[:])
	}
	w := &window{id: binary.LittleEndian.Uint64(id[:]), fd: fd, mem: mem, user: mem[page : page+size : page+size]}
	binary.LittleEndian.PutUint64(mem[0:], windowMagic)
	binary.LittleEndian.PutUint64(mem[8:], w.id)
	binary.LittleEndian.PutUint64(mem[16:], uint64(total))
	addOwnWindow(w)
	return w.user, nil
}

// addOwnWindow lists w among this process's windows.
func addOwnWindow(w *window) {
	ownWindows.Lock()
	i, _ := slices.BinarySearchFunc(ownWindows.list, addrOf(w.mem), func(v *window, a uint64) int { return cmpU64(addrOf(v.mem), a) })
	ownWindows.list = slices.Insert(ownWindows.list, i, w)
	ownWindows.Unlock()
}

// Freed windows kept for AllocWindow to hand out again (SetWindowCache):
// a window keeps its id, so the peers that mapped it reach it again
// through their cached mapping, and its pages stay allocated - no system
// calls, no page faults, no fresh mapping on either side.
var windowCache struct {
	sync.Mutex
	limit, bytes int64
	list         []*window // least recently freed first
	reused       int64     // allocations served from it
}

// SetWindowCache keeps up to limit bytes of freed windows (their whole
// mappings) for reuse; 0, the default, releases each at once. Lowering it
// releases the least recently freed beyond the new limit.
func SetWindowCache(limit int64) {
	windowCache.Lock()
	windowCache.limit = max(limit, 0)
	drop := trimWindowCache()
	windowCache.Unlock()
	releaseWindows(drop)
}

// trimWindowCache takes the least recently freed windows beyond the limit
// out of the cache. windowCache is locked.
func trimWindowCache() (drop []*window) {
	for windowCache.bytes > windowCache.limit {
		w := windowCache.list[0]
		windowCache.list[0] = nil // the array keeps no released window
		windowCache.list = windowCache.list[1:]
		windowCache.bytes -= int64(len(w.mem))
		drop = append(drop, w)
	}
	return drop
}

func releaseWindows(ws []*window) {
	for _, w := range ws {
		_ = unix.Munmap(w.mem)
		unix.Close(w.fd)
	}
}

// reuseWindowSlack is how much more room than asked for a cached window
// may have and still be handed out (a quarter, as size classes go).
const reuseWindowSlack = 4

// reuseWindow takes from the cache the smallest window that holds size
// bytes with at most a quarter (rounded up to pages) to spare, or nil.
func reuseWindow(size, page int64) *window {
	limit := (size + size/reuseWindowSlack + page - 1) / page * page
	windowCache.Lock()
	defer windowCache.Unlock()
	best := -1
	for i, w := range windowCache.list {
		room := int64(len(w.mem)) - page
		if room >= size && room <= limit && (best < 0 || room < int64(len(windowCache.list[best].mem))-page) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	w := windowCache.list[best]
	windowCache.list = slices.Delete(windowCache.list, best, best+1)
	windowCache.bytes -= int64(len(w.mem))
	windowCache.reused++
	w.user = w.mem[page : page+size : page+size]
	return w
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// FreeWindow releases the window whose memory begins at p (what
// AllocWindow returned): into the cache when SetWindowCache made room for
// it, else back to the system. Peer processes that mapped it keep their
// mapping, so a call of theirs still running on it cannot fault; its
// memory returns to the system once they unmap it too. (Ranks that are
// goroutines of this process use the window itself: like any buffer, it
// must outlive their calls.)
func FreeWindow(p unsafe.Pointer) error {
	ownWindows.Lock()
	// The window's mapping begins a page before p (the header).
	start := uint64(uintptr(p)) - uint64(unix.Getpagesize())
	i, found := slices.BinarySearchFunc(ownWindows.list, start, func(v *window, a uint64) int { return cmpU64(addrOf(v.mem), a) })
	if !found || unsafe.Pointer(unsafe.SliceData(ownWindows.list[i].user)) != p {
		ownWindows.Unlock()
		return fmt.Errorf("gotree: %p is not the start of a window (of gotree_mem_alloc or gotree.empty)", p)
	}
	w := ownWindows.list[i]
	ownWindows.list = slices.Delete(ownWindows.list, i, i+1)
	ownWindows.Unlock()
	windowCache.Lock()
	var drop []*window
	if int64(len(w.mem)) <= windowCache.limit {
		windowCache.list = append(windowCache.list, w)
		windowCache.bytes += int64(len(w.mem))
		drop = trimWindowCache()
	} else {
		drop = []*window{w}
	}
	windowCache.Unlock()
	releaseWindows(drop)
	return nil
}

// windowOf says where len bytes at b lie in one of this process's windows.
func windowOf(b []byte) windowRef {
	if len(b) == 0 {
		return windowRef{}
	}
	a := addrOf(b)
	ownWindows.Lock()
	defer ownWindows.Unlock()
	i, found := slices.BinarySearchFunc(ownWindows.list, a, func(v *window, a uint64) int { return cmpU64(addrOf(v.mem), a) })
	if !found {
		i-- // the last window that starts below a
	}
	if i < 0 {
		return windowRef{}
	}
	w := ownWindows.list[i]
	lo := addrOf(w.mem)
	if a < lo || a+uint64(len(b)) > lo+uint64(len(w.mem)) {
		return windowRef{}
	}
	return windowRef{id: w.id, fd: uint64(w.fd), size: uint64(len(w.mem)), off: a - lo}
}

// ownWindow returns this process's window with id, if any.
func ownWindow(id uint64) []byte {
	ownWindows.Lock()
	defer ownWindows.Unlock()
	for _, w := range ownWindows.list {
		if w.id == id {
			return w.mem
		}
	}
	return nil
}

// What direct plans did with the peers' windows (WindowUsage).
var (
	windowsUsed, windowsUnmapped atomic.Int64
	windowsOpened                atomic.Int64 // peers' windows mapped here (openWindow)
	windowLastErr                atomic.Pointer[string]
)

// WindowMaps counts the peers' windows this process has mapped so far. A
// call during which it grew paid for mappings that later calls on the same
// buffers do not (autotuning leaves such calls out of its samples).
func WindowMaps() int64 { return windowsOpened.Load() }

// windowFailed counts a peer's window that could not be mapped.
func windowFailed(err error) {
	windowsUnmapped.Add(1)
	s := err.Error()
	windowLastErr.Store(&s)
}

// WindowStats is this process's use of windows.
type WindowStats struct {
	Windows     int    // this process's windows now (AllocWindow, not yet freed)
	Bytes       int64  // their bytes
	Cached      int    // freed windows kept for reuse (SetWindowCache)
	CachedBytes int64  // their mappings' bytes
	Reused      int64  // allocations served from the cache so far
	Mapped      int64  // peers' buffers that calls found in windows and reached through a mapping
	Unmapped    int64  // peers' buffers in windows that could not be mapped, moved through process_vm_readv/writev instead
	LastError   string // why the last of those could not be mapped
}

// WindowUsage returns this process's use of windows so far.
func WindowUsage() WindowStats {
	st := WindowStats{Mapped: windowsUsed.Load(), Unmapped: windowsUnmapped.Load()}
	if p := windowLastErr.Load(); p != nil {
		st.LastError = *p
	}
	ownWindows.Lock()
	for _, w := range ownWindows.list {
		st.Windows++
		st.Bytes += int64(len(w.user))
	}
	ownWindows.Unlock()
	windowCache.Lock()
	st.Cached, st.CachedBytes, st.Reused = len(windowCache.list), windowCache.bytes, windowCache.reused
	windowCache.Unlock()
	return st
}

// selfPid is this process's pid: its own windows need no mapping (ranks
// that are goroutines of one process). Tests clear it to map their own
// windows the way a peer process does.
var selfPid = os.Getpid()

// peerWindowMax and peerWindowBytes bound the peers' windows a process
// keeps mapped; the least recently used ones not in use by a call are
// unmapped beyond either. A mapping costs page tables (2 MiB per GiB) and
// keeps the peer's memory alive after the peer freed it; mapping again
// costs a system call and its page table entries (262 us per 4 MiB here).
// A bench cycling 256 tensors of 256 KiB per rank through a direct plan
// on 4 ranks stays mapped (768 windows), and so do a model's DDP buckets
// up to 4 GiB of them per peer set.
const peerWindowMax = 1024

var peerWindowBytes int64 = 4 << 30 // a variable for tests

type peerWindowKey struct {
	pid int
	id  uint64
}

// peerWindow is a peer's window mapped here.
type peerWindow struct {
	mem  []byte
	base uint64 // its address in the peer
	refs int    // calls using it now
	used uint64 // peerWindows.tick at its last use
}

var peerWindows struct {
	sync.Mutex
	m     map[peerWindowKey]*peerWindow
	bytes int64 // their mappings' sizes
	tick  uint64
}

// mapWindow maps the window r of process pid (once, then from the cache)
// and returns it with a reference that release gives back. base is the
// window's address in pid: a window of pid cached here that overlaps it
// has been freed there, and is unmapped here when no call uses it. The
// window's header must carry r's id and size: anything else means that
// pid or fd name another process's memory (ranks in different PID
// namespaces).
func mapWindow(pid int, r windowRef, base uint64) (mem []byte, release func(), err error) {
	if pid == selfPid {
		if mem := ownWindow(r.id); mem != nil && uint64(len(mem)) == r.size {
			return mem, func() {}, nil
		}
		return nil, nil, fmt.Errorf("window %#x is not this process's", r.id)
	}
	k := peerWindowKey{pid, r.id}
	peerWindows.Lock()
	defer peerWindows.Unlock()
	peerWindows.tick++
	pw := peerWindows.m[k]
	if pw != nil && uint64(len(pw.mem)) != r.size {
		return nil, nil, fmt.Errorf("its window %#x was %d bytes, not %d", r.id, len(pw.mem), r.size)
	}
	if pw == nil {
		m, err := openWindow(pid, r)
		if err != nil {
			return nil, nil, err
		}
		if peerWindows.m == nil {
			peerWindows.m = map[peerWindowKey]*peerWindow{}
		}
		evictWindows(pid, base, r.size)
		pw = &peerWindow{mem: m, base: base}
		peerWindows.m[k] = pw
		peerWindows.bytes += int64(len(m))
	}
	pw.refs++
	pw.used = peerWindows.tick
	return pw.mem, func() {
		peerWindows.Lock()
		pw.refs--
		peerWindows.Unlock()
	}, nil
}

// evictWindows unmaps the windows of pid that overlap [base, base+size)
// in it (freed there), then the least recently used until there is room
// for one more of size bytes; never one in use. peerWindows is locked.
func evictWindows(pid int, base, size uint64) {
	for k, pw := range peerWindows.m {
		if k.pid == pid && pw.refs == 0 && pw.base < base+size && base < pw.base+uint64(len(pw.mem)) {
			unmapPeerWindow(k, pw)
		}
	}
	for len(peerWindows.m) >= peerWindowMax || (len(peerWindows.m) > 0 && peerWindows.bytes+int64(size) > peerWindowBytes) {
		var victim peerWindowKey
		var old *peerWindow
		for k, pw := range peerWindows.m {
			if pw.refs == 0 && (old == nil || pw.used < old.used) {
				victim, old = k, pw
			}
		}
		if old == nil {
			return // all in use: map beyond the bound
		}
		unmapPeerWindow(victim, old)
	}
}

// unmapPeerWindow unmaps a cached peer window. peerWindows is locked.
func unmapPeerWindow(k peerWindowKey, pw *peerWindow) {
	_ = unix.Munmap(pw.mem)
	delete(peerWindows.m, k)
	peerWindows.bytes -= int64(len(pw.mem))
}

// openWindow maps the window r of process pid through its descriptor and
// checks the header.
func openWindow(pid int, r windowRef) ([]byte, error) {
	name := fmt.Sprintf("/proc/%d/fd/%d", pid, r.fd)
	fd, err := unix.Open(name, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening its window %s: %w", name, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || uint64(st.Size) != r.size {
		return nil, fmt.Errorf("%s is not its %d-byte window", name, r.size)
	}
	// MAP_POPULATE: the page table entries in one go, not a fault per
	// page during the first call.
	mem, err := unix.Mmap(fd, 0, int(r.size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mapping its %d-byte window: %w", r.size, err)
	}
	if binary.LittleEndian.Uint64(mem[0:]) != windowMagic || binary.LittleEndian.Uint64(mem[8:]) != r.id || binary.LittleEndian.Uint64(mem[16:]) != r.size {
		_ = unix.Munmap(mem)
		return nil, fmt.Errorf("%s holds another window than %#x", name, r.id)
	}
	windowsOpened.Add(1)
	return mem, nil
}
