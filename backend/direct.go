package backend

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend/reduce"
)

// This file runs the steps of direct (single-copy) plans: Notify and Wait
// exchange buffer descriptors as small messages over the links;
// ReadReduceCopy reads the peers' buffers in place (readPeerMemory) and
// writes its result into theirs (writePeerMemory).

// memDesc is where a rank's buffers are: what Notify sends and Wait
// receives. The cookie (this process's processCookie: its address and
// value) lets the reader check that pid names the sender's process in its
// own PID namespace before it trusts any other address.
type memDesc struct {
	pid           int
	in, out       uint64 // addresses
	inLen, outLen int64  // bytes
	cookieAddr    uint64
	cookie        uint64
	inWin, outWin windowRef // where in and out lie in windows (window.go); zero: not in one
}

// memDescBytes is the size of an encoded memDesc.
const memDescBytes = 120

func (d memDesc) encode(b []byte) {
	for i, v := range [...]uint64{uint64(d.pid), d.in, uint64(d.inLen), d.out, uint64(d.outLen), d.cookieAddr, d.cookie,
		d.inWin.id, d.inWin.fd, d.inWin.size, d.inWin.off, d.outWin.id, d.outWin.fd, d.outWin.size, d.outWin.off} {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
}

func decodeMemDesc(b []byte) memDesc {
	u := func(i int) uint64 { return binary.LittleEndian.Uint64(b[8*i:]) }
	return memDesc{pid: int(u(0)), in: u(1), inLen: int64(u(2)), out: u(3), outLen: int64(u(4)), cookieAddr: u(5), cookie: u(6),
		inWin: windowRef{u(7), u(8), u(9), u(10)}, outWin: windowRef{u(11), u(12), u(13), u(14)}}
}

// peerBufs is a peer's memDesc as a stream received it, with the peer's
// buffers mapped here where they lie in windows.
type peerBufs struct {
	memDesc
	inMem, outMem []byte   // the peer's in and out buffers mapped; nil: through process_vm_readv/writev
	release       []func() // gives back the window mappings (runStream, at the end)
}

// peerUse says which of the peers' buffers a stream's direct steps touch:
// their inputs (read by a ReadReduceCopy or ReadCopy) and their outputs
// (written by a ReadReduceCopy's WriteTo). Only those are mapped (an
// allgather's 64 inputs per peer would otherwise push its outputs out of
// the cache of mappings) and, where they cannot be, checked for
// process_vm_readv/writev.
type peerUse struct{ in, out bool }

func peerUseOf(steps algorithms.Stream) peerUse {
	var u peerUse
	for i := range steps {
		st := &steps[i]
		u.in = u.in || (st.Prim == algorithms.ReadReduceCopy && len(st.ReadFrom) > 0) || st.Prim == algorithms.ReadCopy
		u.out = u.out || len(st.WriteTo) > 0
	}
	return u
}

// mapBuffers maps the peer's buffers that use names and that lie in
// windows. A window that cannot be mapped leaves its buffer to
// process_vm_readv/writev.
func (p *peerBufs) mapBuffers(use peerUse) {
	one := func(r windowRef, addr uint64, n int64) []byte {
		if r.id == 0 || n < 0 || r.off > r.size || uint64(n) > r.size-r.off {
			return nil
		}
		mem, release, err := mapWindow(p.pid, r, addr-r.off)
		if err != nil {
			windowFailed(err)
			return nil
		}
		windowsUsed.Add(1)
		p.release = append(p.release, release)
		return mem[r.off : r.off+uint64(n) : r.off+uint64(n)]
	}
	if use.in {
		p.inMem = one(p.inWin, p.in, p.inLen)
	}
	if use.out {
		p.outMem = one(p.outWin, p.out, p.outLen)
	}
}

// releaseAll gives back every window mapping of descs.
func releaseAll(descs map[int]*peerBufs) {
	for _, p := range descs {
		for _, r := range p.release {
			r()
		}
		p.release = nil
	}
}

// processCookie is a random value that identifies this process to peers
// that read its memory (memDesc). Set once at start; never written again.
var processCookie = func() *[8]byte {
	c := new([8]byte)
	_, _ = rand.Read(c[:])
	return c
}()

// ownDesc describes this rank's buffers.
func (x *executor) ownDesc() memDesc {
	return memDesc{pid: os.Getpid(), in: addrOf(x.in), inLen: int64(len(x.in)), out: addrOf(x.out), outLen: int64(len(x.out)),
		cookieAddr: addrOf(processCookie[:]), cookie: binary.LittleEndian.Uint64(processCookie[:]),
		inWin: windowOf(x.in), outWin: windowOf(x.out)}
}

// checkPeer reads the cookie a peer announced from the process its pid
// names: another value means another process (ranks in different PID
// namespaces), whose memory must not be read.
func (x *executor) checkPeer(d *memDesc, peer, ch int) error {
	var got [8]byte
	err := readPeerMemory(d.pid, d.cookieAddr, got[:])
	if err == nil && binary.LittleEndian.Uint64(got[:]) == d.cookie {
		return nil
	}
	if errors.Is(err, syscall.ESRCH) {
		// No such process: it announced itself a moment ago, so it aborted
		// and exited since (and said why), or its pid is another
		// namespace's.
		if ab := x.abortReason(ch, peer, "read"); ab != nil {
			return ab
		}
	}
	why := "it holds another value"
	if err != nil {
		why = err.Error()
	}
	return &PeerError{Peer: peer, Channel: ch, Op: "read", Err: fmt.Errorf("process %d here is not rank %d's process (reading its identity: %s): are the ranks in different PID namespaces? Set GOTREE_CMA_DISABLE=1 (or GOTREE_ALGO=^direct) to use the FIFO plans", d.pid, peer, why)}
}

// peerGoneWait bounds how long peerGone waits for a vanished peer's
// abort reason.
const peerGoneWait = 250 * time.Millisecond

// peerGone is the error for a peer whose process has exited: the reason it
// gave when it aborted, if its link delivers one soon (a rank that failed
// first exits at once, and its error names the rank that caused it), else
// that it exited.
func (x *executor) peerGone(ch, peer int, op string, pid int) error {
	if ab := x.abortReason(ch, peer, op); ab != nil {
		return ab
	}
	return &PeerError{Peer: peer, Channel: ch, Op: op, Err: fmt.Errorf("its process %d has exited: %w", pid, ErrClosed)}
}

// abortReason is the reason peer gave for aborting, as its link delivers
// it within peerGoneWait; nil if it gives none.
func (x *executor) abortReason(ch, peer int, op string) error {
	c, err := x.conn(ch, peer)
	if err != nil {
		return nil
	}
	f, ok := c.(failureReporter)
	if !ok {
		return nil
	}
	var ra *RemoteAbortError
	if why := f.failure(peerGoneWait); errors.As(why, &ra) {
		return &PeerError{Peer: peer, Channel: ch, Op: op, Err: ra}
	}
	return nil
}

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// peerRange returns where r's range of count elements lies in the peer's
// buffers, checked against the lengths the peer announced: its address
// there, and the mapped buffer (nil when the buffer is not in a window)
// with the range's offset in it.
func (x *executor) peerRange(d *peerBufs, peer int, r algorithms.Ref, count int64) (addr uint64, mem []byte, lo int64, err error) {
	base, size, mem := d.in, d.inLen, d.inMem
	if r.Buf == algorithms.Output {
		base, size, mem = d.out, d.outLen, d.outMem
	}
	lo, hi := r.Off*x.esize, (r.Off+count)*x.esize
	if lo < 0 || hi > size {
		return 0, nil, 0, fmt.Errorf("gotree/backend: the plan touches [%d,%d) bytes of rank %d's %v buffer, which has %d", lo, hi, peer, r.Buf, size)
	}
	return base + uint64(lo), mem, lo, nil
}

// peerAccess moves b to or from off bytes into the peer's range ref of a
// step, and names the peer and the remedy in errors. A read from a mapped
// window returns the window's bytes themselves instead of copying them
// into b; otherwise it fills b (readPeerMemory) and returns it. A write
// copies b into the window, or through writePeerMemory.
func (x *executor) peerAccess(st *algorithms.Step, descs map[int]*peerBufs, ch, peer int, ref algorithms.Ref, off int64, b []byte, write bool) ([]byte, error) {
	d := descs[peer]
	if d == nil {
		return nil, fmt.Errorf("gotree/backend: %v touches rank %d's memory before a Wait received where it is", st.Prim, peer)
	}
	a, mem, lo, err := x.peerRange(d, peer, ref, st.Count)
	if err != nil {
		return nil, err
	}
	if mem != nil {
		w := mem[lo+off : lo+off+int64(len(b))]
		if !write {
			return w, nil
		}
		if x.stream {
			reduce.CopyStream(w, b)
		} else {
			copy(w, b)
		}
		return b, nil
	}
	move, op, what := readPeerMemory, "read", "reading"
	if write {
		move, op, what = writePeerMemory, "write", "writing"
	}
	if err := move(d.pid, a+uint64(off), b); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return nil, x.peerGone(ch, peer, op, d.pid)
		}
		return nil, &PeerError{Peer: peer, Channel: ch, Op: op, Err: fmt.Errorf("%s %d bytes of its memory (process %d): %w; set GOTREE_CMA_DISABLE=1 (or GOTREE_ALGO=^direct) to use the FIFO plans", what, len(b), d.pid, err)}
	}
	return b, nil
}

// directStep runs a Notify, Wait, Offer, ReadCopy or ReadReduceCopy step.
// descs holds the descriptors the stream's Waits received, by peer.
func (x *executor) directStep(ctx context.Context, ch int, st *algorithms.Step, src, dst []byte, descs map[int]*peerBufs, use peerUse, scratch **[]byte) error {
	switch st.Prim {
	case algorithms.Notify, algorithms.Offer:
		var msg [memDescBytes]byte
		d := x.ownDesc()
		if st.Prim == algorithms.Offer {
			// The input range offered is all the reader may touch.
			d.in, d.inLen, d.inWin = addrOf(src), int64(len(src)), windowOf(src)
		}
		d.encode(msg[:])
		for _, peer := range st.SendTo {
			c, err := x.conn(ch, peer)
			if err != nil {
				return err
			}
			if err := c.Send(ctx, x.tag, msg[:]); err != nil {
				return err
			}
		}
		return nil
	case algorithms.Wait:
		for _, peer := range st.RecvFrom {
			c, err := x.conn(ch, peer)
			if err != nil {
				return err
			}
			b, err := x.recvExact(ctx, c, peer, ch, memDescBytes)
			if err != nil {
				return err
			}
			d := decodeMemDesc(b)
			c.Release()
			prev := descs[peer]
			if prev != nil && prev.memDesc == d {
				continue // a later round: the same buffers, already checked
			}
			p := &peerBufs{memDesc: d}
			p.mapBuffers(use)
			if prev != nil {
				p.release = append(p.release, prev.release...)
			}
			descs[peer] = p
			if (use.in && p.inMem == nil) || (use.out && p.outMem == nil) {
				// Some buffer moves through process_vm_readv/writev.
				if err := x.checkPeer(&d, peer, ch); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if st.Prim == algorithms.ReadCopy {
		return x.readOffer(st, descs, ch, dst)
	}
	if st.Prim != algorithms.ReadReduceCopy {
		return fmt.Errorf("gotree/backend: unknown primitive %v", st.Prim)
	}
	total := st.Count * x.esize
	fb := x.frag * x.esize
	// Fragment by fragment, so that the peers' data and the result stay in
	// cache: reduce each peer's fragment in (read into scratch, or straight
	// from its window), then copy the finished fragment into the peers'
	// outputs from the cache (streamed into mapped ones where the output is
	// streamed, x.stream).
	tmp := scratchFor(scratch, min(fb, total))
	for off := int64(0); off < total; off += fb {
		end := min(off+fb, total)
		t := tmp[:end-off]
		if len(st.ReadFrom) == 0 && addrOf(dst[off:end]) != addrOf(src[off:end]) {
			copy(dst[off:end], src[off:end]) // an allgather's block: nothing to reduce
		}
		for k, peer := range st.ReadFrom {
			b, err := x.peerAccess(st, descs, ch, peer, st.Src, off, t, false)
			if err != nil {
				return err
			}
			if k == 0 {
				reduce.Into3(dst[off:end], src[off:end], b, x.p.DType, x.p.Op)
			} else {
				reduce.Into(dst[off:end], b, x.p.DType, x.p.Op)
			}
		}
		for _, peer := range st.WriteTo {
			if err := x.guard.beginWrite(peer, ch); err != nil {
				return err
			}
			_, err := x.peerAccess(st, descs, ch, peer, st.Dst, off, dst[off:end], true)
			x.guard.endWrite(peer)
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// readOffer runs a ReadCopy: the block ReadFrom[0] offered, read from its
// memory into dst, which must be exactly its size.
func (x *executor) readOffer(st *algorithms.Step, descs map[int]*peerBufs, ch int, dst []byte) error {
	peer := st.ReadFrom[0]
	d := descs[peer]
	if d == nil {
		return fmt.Errorf("gotree/backend: ReadCopy from rank %d before a Wait received its offer", peer)
	}
	if d.inLen != int64(len(dst)) {
		return &MismatchError{Peer: peer, Channel: ch, WantTag: x.tag, GotTag: x.tag, WantBytes: int64(len(dst)), GotBytes: d.inLen}
	}
	if d.inMem != nil {
		copy(dst, d.inMem)
		return nil
	}
	if err := readPeerMemory(d.pid, d.in, dst); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return x.peerGone(ch, peer, "read", d.pid)
		}
		return &PeerError{Peer: peer, Channel: ch, Op: "read", Err: fmt.Errorf("reading the %d bytes it offered (process %d): %w; set GOTREE_CMA_DISABLE=1 to use the FIFO", len(dst), d.pid, err)}
	}
	return nil
}
