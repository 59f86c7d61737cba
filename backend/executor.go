package backend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"golang.org/x/sync/errgroup"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend/reduce"
)

// Conns finds the link with a peer on a channel.
type Conns interface {
	Conn(channel, peer int) (Conn, error)
}

// Stages gives the staging regions of the ranks of a host, which every
// one of them maps (shared plans; shared.go). Exec asks the Conns it is
// given for them when a plan needs them.
type Stages interface {
	// Stage is rank's staging region as this process maps it
	// (StageRegionBytes: a header, then the plans' data); nil when there
	// is none.
	Stage(rank int) []byte
	// StagePolicy is how waits on the regions' counters behave before
	// they sleep: that of the host's shared-memory links.
	StagePolicy() WaitPolicy
}

// Exec runs one rank's part of a plan. in and out are the rank's input and
// output buffers (they may be the same memory for in-place calls). Each
// stream of each channel runs in its own goroutine; the first error cancels
// the others and is returned. Messages are cut into fragments of at most
// fragBytes (a multiple of the element size is used), identically on both
// ends, so fragBytes must be the same on every rank and no larger than
// any Conn's MaxMessage.
//
// Exec does not apply Finalize (AVG); the caller does, once.
//
// Every message is sent with tag and every received message must carry
// it; otherwise Exec fails with a *MismatchError.
func Exec(ctx context.Context, p *algorithms.Plan, rank int, conns Conns, in, out []byte, fragBytes int, tag uint32) error {
	if rank < 0 || rank >= len(p.Ranks) {
		return fmt.Errorf("gotree/backend: rank %d outside plan of %d ranks", rank, len(p.Ranks))
	}
	esize := p.DType.Size()
	if esize == 0 {
		return fmt.Errorf("gotree/backend: plan has unsupported dtype %v", p.DType)
	}
	fragElems := int64(fragBytes / esize)
	if fragElems <= 0 {
		return fmt.Errorf("gotree/backend: fragment of %d bytes is smaller than one %v element", fragBytes, p.DType)
	}
	if p.Algo == algorithms.OneShot && p.Count > fragElems {
		// Every rank sends before it receives: a message cut in more
		// fragments than the links have free slots would wait forever.
		return fmt.Errorf("gotree/backend: one-shot plan of %d bytes does not fit one %d-byte fragment (the links' slot size); one-shot runs messages up to %d bytes",
			p.Count*int64(esize), fragElems*int64(esize), algorithms.OneShotMaxBytes)
	}
	rp := &p.Ranks[rank]
	nstreams := 0
	for _, ch := range rp.Channels {
		for _, s := range ch.Streams {
			if len(s) > 0 {
				nstreams++
			}
		}
	}
	x := executor{p: p, conns: conns, in: in, out: out, esize: int64(esize), frag: fragElems, tag: tag,
		stream: len(out) >= StreamOutputBytes && !SameMemory(in, out)}
	if p.StageElems > 0 {
		if err := x.useStages(rank); err != nil {
			return err
		}
	}
	cg, err := x.enterCall(rank)
	if err != nil {
		return err
	}
	x.guard = cg
	err = x.run(ctx, rp, nstreams)
	if lerr := cg.leave(); lerr != nil {
		err = errors.Join(err, lerr)
	}
	return err
}

// CallerThreadKey, as a key of an operation's context with any non-nil
// value, says that the operation runs on the goroutine of a caller from C
// (the C ABI, torch) that blocks until it ends (a synchronous call): a
// cgo callback's goroutine, which the Go runtime keeps on the caller's
// thread, so that each time it waits for another goroutine its processor
// passes to another thread and back. A Go caller's goroutine (gotree
// perf) moves freely and is not marked.
var CallerThreadKey any = callerThreadKey{}

type callerThreadKey struct{}

// striper is a Conn that moves a message of n bytes through goroutines of
// its own (tcpConn: the parts on its extra sockets).
type striper interface {
	striped(n int64) bool
}

// run runs the rank's streams: the only one on this goroutine, several in
// goroutines of their own. The only one runs in a goroutine of its own too
// where this goroutine is a waiting caller's and the stream moves
// messages through a link's own goroutines (stripesOnCaller).
func (x *executor) run(ctx context.Context, rp *algorithms.RankPlan, nstreams int) error {
	if nstreams == 1 && !x.stripesOnCaller(ctx, rp) {
		// Common small case: no goroutine.
		for _, ch := range rp.Channels {
			for _, s := range ch.Streams {
				if len(s) > 0 {
					return x.runStream(ctx, ch.Channel, s)
				}
			}
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, ch := range rp.Channels {
		for _, s := range ch.Streams {
			if len(s) == 0 {
				continue
			}
			ch, s := ch.Channel, s
			g.Go(func() error { return x.runStream(gctx, ch, s) })
		}
	}
	return g.Wait()
}

// stripesOnCaller reports whether ctx's operation runs on a waiting
// caller's goroutine (CallerThreadKey) and a step of rp sends or receives
// a fragment that a link moves through goroutines of its own (striper).
// The caller's goroutine would then wait for those goroutines at every
// such fragment, and from C each wait hands the processor to another
// thread and back: across 2 network namespaces through torch, forced
// ring on one channel, 1 MiB took 2.60-2.92 ms with the stream on the
// caller's goroutine and 1.45-1.52 ms in one of its own, 256 KiB 834-918
// against 570-631 µs, while 64 KiB (32 KiB messages, one socket) took
// 76-80 against 122-145 µs and over shared memory the caller's goroutine
// was faster at every size (docs/crossover/netns/run-2026-12-06b).
func (x *executor) stripesOnCaller(ctx context.Context, rp *algorithms.RankPlan) bool {
	if ctx.Value(CallerThreadKey) == nil {
		return false
	}
	type link struct{ ch, peer int }
	var seen [4]link // links found not to stripe such fragments (a stream has a few peers)
	nseen := 0
	for _, ch := range rp.Channels {
		for _, s := range ch.Streams {
			for i := range s {
				st := &s[i]
				frag := min(st.Count, x.frag) * x.esize
				if frag < StripeMin {
					continue // no link stripes it
				}
				for _, peers := range [2][]int{st.RecvFrom, st.SendTo} {
					for _, peer := range peers {
						l := link{ch.Channel, peer}
						if slices.Contains(seen[:nseen], l) {
							continue
						}
						c, err := x.conns.Conn(ch.Channel, peer)
						if err != nil {
							continue // the step itself reports it
						}
						if sc, ok := c.(striper); ok && sc.striped(frag) {
							return true
						}
						if nseen < len(seen) {
							seen[nseen] = l
							nseen++
						}
					}
				}
			}
		}
	}
	return false
}

type executor struct {
	p           *algorithms.Plan
	conns       Conns
	in, out     []byte
	esize       int64
	frag        int64
	tag         uint32
	stream      bool       // write results to out with non-temporal stores (StreamOutputBytes)
	guard       *callGuard // writes into peers' buffers (direct plans); nil: none
	stages      Stages     // the host's staging regions (shared plans); nil: none
	stage       []byte     // this rank's staging region past its header: the plan's StageElems elements
	stageSeq    *uint32    // this rank's round counter, in its region's header
	stageSleep  *uint32    // set while a peer sleeps on stageSeq
	stagePolicy WaitPolicy // how waits on the peers' counters behave
}

// StreamOutputBytes is the output size from which an out-of-place call
// writes its results into the output with non-temporal stores
// (reduce.CopyStream): a plain store would first read every line of a
// cold output from memory only to overwrite it. A reduce-and-forward step
// then reduces into the next peer's FIFO slot and streams that to the
// output, instead of writing the output and copying it to the slot. In
// place, the output's lines were read (as input) earlier in the call and
// may still be cached, where streaming them out measured slower.
const StreamOutputBytes = 8 << 20

// MismatchError reports that a peer sent a message of another operation
// (or of another size) than this rank expected: the ranks issued
// different collectives, counts, dtypes, ops or roots at the same point.
type MismatchError struct {
	Peer, Channel int
	WantTag       uint32
	GotTag        uint32
	WantBytes     int64
	GotBytes      int64
}

func (e *MismatchError) Error() string {
	if e.WantTag != e.GotTag {
		return fmt.Sprintf("gotree/backend: rank %d sent a message of a different operation on channel %d (tag %08x, expected %08x): the ranks issued different collectives, sizes, dtypes, ops or roots at this point", e.Peer, e.Channel, e.GotTag, e.WantTag)
	}
	return fmt.Sprintf("gotree/backend: rank %d sent a %d-byte message on channel %d where %d bytes were expected: the ranks disagree on the size of this operation", e.Peer, e.Channel, e.GotBytes, e.WantBytes)
}

func (x *executor) buf(r algorithms.Ref, count int64) ([]byte, error) {
	var b []byte
	switch r.Buf {
	case algorithms.Input:
		b = x.in
	case algorithms.Output:
		b = x.out
	case algorithms.Stage:
		b = x.stage
	default:
		return nil, fmt.Errorf("gotree/backend: step needs a buffer but names none")
	}
	lo, hi := r.Off*x.esize, (r.Off+count)*x.esize
	if lo < 0 || hi > int64(len(b)) {
		return nil, fmt.Errorf("gotree/backend: step range [%d,%d) bytes outside %v buffer of %d bytes", lo, hi, r.Buf, len(b))
	}
	return b[lo:hi:hi], nil
}

func (x *executor) conn(ch, peer int) (Conn, error) { return x.conns.Conn(ch, peer) }

// scratchPool holds the fragment buffers of reduce-and-forward steps over
// links that take no writes in place (TCP): a stream takes one when it
// first needs it and puts it back when it ends, so calls allocate none.
var scratchPool sync.Pool

// scratchFor returns n bytes of a stream's scratch buffer *s, first taking
// one of at least n bytes from scratchPool (or making one) when *s is
// missing or smaller.
func scratchFor(s **[]byte, n int64) []byte {
	if *s == nil || int64(cap(**s)) < n {
		if *s != nil {
			scratchPool.Put(*s)
		}
		if p, ok := scratchPool.Get().(*[]byte); ok && int64(cap(*p)) >= n {
			*s = p
		} else {
			b := make([]byte, n)
			*s = &b
		}
	}
	return (**s)[:n]
}

func (x *executor) runStream(ctx context.Context, ch int, steps algorithms.Stream) error {
	var scratch *[]byte
	var descs map[int]*peerBufs // direct plans: the peers' buffers, from Wait steps
	var use peerUse             // and which of them the stream touches
	rounds := 0                 // shared plans: Notify steps so far
	var recvBuf, sendBuf [4]Conn
	defer func() {
		if scratch != nil {
			scratchPool.Put(scratch)
		}
		releaseAll(descs)
	}()
	dt, op := x.p.DType, x.p.Op
	for i := range steps {
		st := &steps[i]
		if st.Count == 0 {
			continue
		}
		var src, dst []byte
		var err error
		if st.Src.Buf != algorithms.NoBuf {
			if src, err = x.buf(st.Src, st.Count); err != nil {
				return err
			}
		}
		if st.Dst.Buf != algorithms.NoBuf {
			if dst, err = x.buf(st.Dst, st.Count); err != nil {
				return err
			}
		}
		if st.Prim == algorithms.Copy {
			if !SameMemory(src, dst) {
				copy(dst, src)
			}
			continue
		}
		if x.stages != nil && (st.Prim == algorithms.Notify || st.Prim == algorithms.Wait) {
			if st.Prim == algorithms.Notify {
				rounds++
			}
			if err := x.sharedRound(ctx, ch, st, rounds == 1); err != nil {
				return err
			}
			continue
		}
		if st.Prim == algorithms.PeerCopy || (st.Prim == algorithms.ReadReduceCopy && st.PeerRange().Buf == algorithms.Stage) {
			if err := x.sharedStep(st, src, dst); err != nil {
				return err
			}
			continue
		}
		switch st.Prim {
		case algorithms.Notify, algorithms.Wait, algorithms.ReadReduceCopy, algorithms.Offer, algorithms.ReadCopy:
			if descs == nil {
				descs, use = map[int]*peerBufs{}, peerUseOf(steps)
			}
			if err := x.directStep(ctx, ch, st, src, dst, descs, use, &scratch); err != nil {
				return err
			}
			continue
		}
		recvs, sends := recvBuf[:0], sendBuf[:0] // a step has a few peers: no allocation
		for _, peer := range st.RecvFrom {
			c, err := x.conn(ch, peer)
			if err != nil {
				return err
			}
			recvs = append(recvs, c)
		}
		for _, peer := range st.SendTo {
			c, err := x.conn(ch, peer)
			if err != nil {
				return err
			}
			sends = append(sends, c)
		}
		total := st.Count * x.esize
		fb := x.frag * x.esize
		for off := int64(0); off < total; off += fb {
			end := min(off+fb, total)
			var payload []byte
			switch st.Prim {
			case algorithms.Send:
				payload = src[off:end]
			case algorithms.Recv, algorithms.RecvCopySend:
				var slot []byte
				var direct DirectSender
				if x.stream {
					if slot, direct, err = directSlot(ctx, sends, end-off); err != nil {
						return err
					}
				}
				b, err := x.recvExact(ctx, recvs[0], st.RecvFrom[0], ch, end-off)
				if err != nil {
					if direct != nil {
						direct.Cancel()
					}
					return err
				}
				if x.stream {
					reduce.CopyStream(dst[off:end], b)
				} else {
					copy(dst[off:end], b)
				}
				if direct != nil {
					copy(slot, b) // forward from the FIFO, not from the streamed output
					recvs[0].Release()
					direct.Post(x.tag, len(slot))
					continue
				}
				recvs[0].Release()
				payload = dst[off:end]
			case algorithms.RecvReduceSend, algorithms.RecvReduceCopySend:
				var acc []byte
				var direct DirectSender
				if st.Prim == algorithms.RecvReduceSend || x.stream {
					// Reduce straight into the peer's FIFO slot when the
					// link allows it: no scratch copy (RecvReduceSend), or
					// the output streamed from the slot afterwards.
					if acc, direct, err = directSlot(ctx, sends, end-off); err != nil {
						return err
					}
				}
				own := src[off:end]
				copyOut := false
				switch {
				case direct != nil:
				case st.Prim == algorithms.RecvReduceSend: // no output to reduce into
					acc = scratchFor(&scratch, fb)[:end-off]
				case st.SrcAt >= 2 && SameMemory(dst[off:end], own):
					// In place, the first two messages' reduction would
					// overwrite the own operand before its turn.
					acc, copyOut = scratchFor(&scratch, fb)[:end-off], true
				default:
					acc = dst[off:end]
				}
				// Fold the operands left to right: the messages in
				// RecvFrom order with own at position SrcAt. The first
				// operand waits for the second (one Into3, no copy); a
				// message is released once folded.
				folded, first, held := 0, []byte(nil), Conn(nil)
				add := func(b []byte, c Conn) {
					folded++
					switch folded {
					case 1:
						first, held = b, c
						return
					case 2:
						reduce.Into3(acc, first, b, dt, op)
						if held != nil {
							held.Release()
						}
					default:
						reduce.Into(acc, b, dt, op)
					}
					if c != nil {
						c.Release()
					}
				}
				for j, c := range recvs {
					if j == st.SrcAt {
						add(own, nil)
					}
					b, err := x.recvExact(ctx, c, st.RecvFrom[j], ch, end-off)
					if err != nil {
						if direct != nil {
							direct.Cancel()
						}
						return err
					}
					add(b, c)
				}
				if st.SrcAt >= len(recvs) {
					add(own, nil)
				}
				if folded == 1 {
					copy(acc, first)
				}
				if copyOut {
					copy(dst[off:end], acc)
				}
				if direct != nil {
					if st.Prim == algorithms.RecvReduceCopySend {
						reduce.CopyStream(dst[off:end], acc)
					}
					direct.Post(x.tag, len(acc))
					continue
				}
				payload = acc
			default:
				return fmt.Errorf("gotree/backend: unknown primitive %v", st.Prim)
			}
			for _, c := range sends {
				if err := c.Send(ctx, x.tag, payload); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// directSlot acquires n bytes of the FIFO of a step's only send when that
// link takes writes in place (DirectSender); with any other link, or
// several sends, it returns no sender.
func directSlot(ctx context.Context, sends []Conn, n int64) ([]byte, DirectSender, error) {
	if len(sends) != 1 {
		return nil, nil, nil
	}
	ds, ok := sends[0].(DirectSender)
	if !ok {
		return nil, nil, nil
	}
	slot, err := ds.Acquire(ctx, int(n))
	if err != nil {
		return nil, nil, err
	}
	return slot, ds, nil
}

func (x *executor) recvExact(ctx context.Context, c Conn, peer, ch int, n int64) ([]byte, error) {
	b, tag, err := c.Recv(ctx)
	if err != nil {
		return nil, err
	}
	if tag != x.tag || int64(len(b)) != n {
		c.Release()
		return nil, &MismatchError{Peer: peer, Channel: ch, WantTag: x.tag, GotTag: tag, WantBytes: n, GotBytes: int64(len(b))}
	}
	return b, nil
}

// SameMemory reports whether a and b are the same bytes (an in-place call).
func SameMemory(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}
