package pg

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
	"unsafe"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend"
)

// p2pChannel is the channel number of the links that point-to-point
// operations (send/recv, all-to-all, gather, scatter) use. They are made on
// first use: the lower rank dials the higher one's data listener, which
// stays open (authenticated) for the communicator's life.
const p2pChannel = 1 << 20

// devChannel is the channel number of the device path's channel ch
// (DeviceLink): links made on first use like the point-to-point ones.
func devChannel(ch int) int { return p2pChannel + 1 + ch }

// maxDevChannels bounds the device channels a peer may ask to connect.
const maxDevChannels = 64

// lazyChannel says whether a data connection on channel ch is one made
// after init: point-to-point, device or control (stall.go).
func lazyChannel(ch int) bool {
	return ch == ctrlChannel || ch >= p2pChannel && ch <= devChannel(maxDevChannels-1)
}

// p2pLinks are the links made on first use: the point-to-point channel's
// and the device path's (devChannel), by channel and peer.
type p2pLinks struct {
	mu      sync.Mutex
	links   map[linkKey]backend.Conn
	ready   map[linkKey]chan struct{} // closed when links[k] or errs[k] is set
	errs    map[linkKey]error
	dialing map[linkKey]bool
	closed  bool
	last    map[p2pKey]*Request // ordering of send/recv per peer and direction
	count   map[p2pKey]uint64   // sends/receives issued per peer and direction
}

type p2pKey struct {
	peer int
	send bool
}

func (p *p2pLinks) init() {
	p.links = map[linkKey]backend.Conn{}
	p.ready = map[linkKey]chan struct{}{}
	p.errs = map[linkKey]error{}
	p.dialing = map[linkKey]bool{}
	p.last = map[p2pKey]*Request{}
	p.count = map[p2pKey]uint64{}
}

func (p *p2pLinks) readyChan(k linkKey) chan struct{} {
	ch, ok := p.ready[k]
	if !ok {
		ch = make(chan struct{})
		p.ready[k] = ch
	}
	return ch
}

// set records the outcome of making link k (mu held).
func (p *p2pLinks) set(k linkKey, l backend.Conn, err error) {
	if _, done := p.links[k]; done {
		if l != nil {
			l.Close()
		}
		return
	}
	if err != nil {
		p.errs[k] = err
	} else if p.closed {
		l.Close()
		p.errs[k] = ErrAborted
	} else {
		p.links[k] = l
	}
	ch := p.readyChan(k)
	select {
	case <-ch:
	default:
		close(ch)
	}
}

func (p *p2pLinks) closeAll(reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.links == nil {
		return
	}
	p.closed = true
	for _, l := range p.links {
		closeLink(l, reason)
	}
}

// p2pLink returns the point-to-point link with peer, making it if needed.
func (c *Comm) p2pLink(peer int) (backend.Conn, error) { return c.p2pLinkOr(peer, nil) }

// p2pLinkOr is p2pLink that also gives up, with errStopped, when stop is
// closed while it waits for the peer to connect.
func (c *Comm) p2pLinkOr(peer int, stop <-chan struct{}) (backend.Conn, error) {
	return c.lazyLink(linkKey{p2pChannel, peer}, "point-to-point traffic", stop)
}

// lazyLink returns link k (a channel made on first use), making it if
// needed: the lower rank dials, the higher one's listener accepts.
func (c *Comm) lazyLink(k linkKey, what string, stop <-chan struct{}) (backend.Conn, error) {
	peer := k.peer
	if peer < 0 || peer >= c.nranks || peer == c.rank {
		return nil, fmt.Errorf("%w: rank %d: no link to rank %d for %s", ErrInvalidArgument, c.rank, peer, what)
	}
	p := &c.p2p
	p.mu.Lock()
	if l, ok := p.links[k]; ok {
		p.mu.Unlock()
		return l, nil
	}
	deadline := time.Now().Add(c.cfg.Timeout)
	if c.rank < peer && !p.dialing[k] {
		p.dialing[k] = true
		p.mu.Unlock()
		l, err := c.dialLazy(k, what, deadline)
		p.mu.Lock()
		p.set(k, l, err)
	}
	ch := p.readyChan(k)
	p.mu.Unlock()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
		return nil, fmt.Errorf("%w: rank %d: rank %d did not connect for %s within %v", ErrTimeout, c.rank, peer, what, c.cfg.Timeout)
	case <-stop:
		return nil, errStopped
	case <-c.ctx.Done():
		return nil, fmt.Errorf("%w: rank %d: %v", ErrAborted, c.rank, context_cause(c))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.errs[k]; err != nil {
		return nil, err
	}
	return p.links[k], nil
}

func context_cause(c *Comm) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failure != nil {
		return c.failure
	}
	return errors.New("communicator closed")
}

func (c *Comm) dialLazy(k linkKey, what string, deadline time.Time) (backend.Conn, error) {
	conn, err := c.dialData(c.secret, k.peer, int32(k.channel), deadline)
	if err != nil {
		return nil, fmt.Errorf("%w: rank %d: could not connect to rank %d at %s for %s: %v", ErrRemote, c.rank, k.peer, c.peers[k.peer].DataAddr, what, err)
	}
	l, err := c.makeLink(k, []*net.TCPConn{conn}, deadline)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("%w: rank %d: link to rank %d for %s: %v", ErrRemote, c.rank, k.peer, what, err)
	}
	return l, nil
}

// acceptP2P serves the data listener after init: authenticated lazy links
// (point-to-point and device channels) from lower ranks; anything else is
// refused and logged.
func (c *Comm) acceptP2P(secret [32]byte) {
	defer c.acceptWG.Done()
	ln := c.ln.(*net.TCPListener)
	_ = ln.SetDeadline(time.Time{})
	sem := make(chan struct{}, 256) // concurrent handshakes; strangers beyond it are refused at once
	for {
		conn, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || c.ctx.Err() != nil {
				return
			}
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			conn.Close() // a flood: refuse at once
			continue
		}
		go func() {
			defer func() { <-sem }()
			h, err := serverHandshake(conn, secret, time.Now().Add(min(c.cfg.Timeout, 3*time.Second)))
			if err != nil || h.Kind != kindData || !lazyChannel(int(h.Channel)) || int(h.Rank) >= c.rank || h.Rank < 0 {
				c.refusals.warn(c.log, "refused a connection from %v: %v", conn.RemoteAddr(), orKind(err, h))
				conn.Close()
				return
			}
			c.acceptedP2P(h, conn.(*net.TCPConn))
		}()
	}
}

func (c *Comm) acceptedP2P(h hello, conn *net.TCPConn) {
	k := linkKey{int(h.Channel), int(h.Rank)}
	l, err := c.makeLink(k, []*net.TCPConn{conn}, time.Now().Add(c.cfg.Timeout))
	if err != nil {
		conn.Close()
		err = fmt.Errorf("%w: rank %d: link from rank %d on channel %d: %v", ErrRemote, c.rank, k.peer, k.channel, err)
	}
	c.p2p.mu.Lock()
	if c.p2p.links == nil {
		c.p2p.mu.Unlock()
		if l != nil {
			l.Close()
		}
		return
	}
	c.p2p.set(k, l, err)
	l, ok := c.p2p.links[k]
	c.p2p.mu.Unlock()
	if ok && k.channel == ctrlChannel {
		c.startCtrlReader(k.peer, l) // the views a lower rank sends are read whether or not this rank stalls
	}
}

// AllToAll sends sendCounts[p] elements at sendDispls[p] of send to every
// rank p and receives recvCounts[p] elements from p at recvDispls[p] of
// recv (counts and displacements in elements).
func (c *Comm) AllToAll(send, recv []byte, sendCounts, sendDispls, recvCounts, recvDispls []int64, dt algorithms.DType) (*Request, error) {
	if !dt.Valid() {
		return nil, fmt.Errorf("%w: alltoall: unsupported dtype %v", ErrInvalidArgument, dt)
	}
	if len(sendCounts) != c.nranks {
		return nil, fmt.Errorf("%w: alltoall: %d send counts for %d ranks", ErrInvalidArgument, len(sendCounts), c.nranks)
	}
	if err := checkSplits("alltoall", "send", send, sendCounts, sendDispls, dt); err != nil {
		return nil, err
	}
	if err := checkSplits("alltoall", "recv", recv, recvCounts, recvDispls, dt); err != nil {
		return nil, err
	}
	sends, recvs, copies, err := algorithms.AllToAllTransfers(c.rank, sendCounts, sendDispls, recvCounts, recvDispls)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	var total int64
	for _, n := range sendCounts {
		total += n
	}
	return c.enqueueP2P(collArgs{coll: algorithms.AllToAll, count: total, dt: dt, in: send, out: recv,
		sendCounts: append([]int64(nil), sendCounts...), recvCounts: append([]int64(nil), recvCounts...)}, sends, recvs, copies)
}

// AllToAllEqual is AllToAll with count elements to and from every rank,
// block p of send to rank p and block p of recv from it.
func (c *Comm) AllToAllEqual(send, recv []byte, count int64, dt algorithms.DType) (*Request, error) {
	counts, displs := make([]int64, c.nranks), make([]int64, c.nranks)
	for p := range counts {
		counts[p], displs[p] = count, int64(p)*count
	}
	return c.AllToAll(send, recv, counts, displs, counts, displs, dt)
}

func checkSplits(coll, what string, b []byte, counts, displs []int64, dt algorithms.DType) error {
	if len(displs) != len(counts) {
		return fmt.Errorf("%w: %s: %d %s counts but %d displacements", ErrInvalidArgument, coll, len(counts), what, len(displs))
	}
	n := int64(len(b) / max(dt.Size(), 1))
	for p := range counts {
		if counts[p] < 0 || displs[p] < 0 || displs[p]+counts[p] > n {
			return fmt.Errorf("%w: %s: %s block for rank %d (%d elements at %d) does not fit a buffer of %d elements", ErrInvalidArgument, coll, what, p, counts[p], displs[p], n)
		}
	}
	return nil
}

// Gather collects every rank's count elements into root's recv, in rank
// order (recv holds nranks*count on root; ignored elsewhere).
func (c *Comm) Gather(send, recv []byte, count int64, dt algorithms.DType, root int) (*Request, error) {
	if err := c.checkRoot("gather", root); err != nil {
		return nil, err
	}
	if err := checkLen("gather", "sendbuf", send, count, dt); err != nil {
		return nil, err
	}
	var sends, recvs []algorithms.Transfer
	var copies []algorithms.LocalCopy
	if c.rank == root {
		if err := checkLen("gather", "recvbuf", recv, count*int64(c.nranks), dt); err != nil {
			return nil, err
		}
		for p := 0; p < c.nranks; p++ {
			if p == root {
				copies = append(copies, algorithms.LocalCopy{Src: 0, Dst: int64(p) * count, Count: count})
			} else {
				recvs = append(recvs, algorithms.Transfer{Peer: p, Off: int64(p) * count, Count: count})
			}
		}
	} else {
		sends = append(sends, algorithms.Transfer{Peer: root, Count: count})
	}
	return c.enqueueP2P(collArgs{coll: algorithms.Gather, count: count, dt: dt, root: root, in: send, out: recv}, sends, recvs, copies)
}

// Scatter sends block p of root's send (count elements each) to rank p's
// recv.
func (c *Comm) Scatter(send, recv []byte, count int64, dt algorithms.DType, root int) (*Request, error) {
	if err := c.checkRoot("scatter", root); err != nil {
		return nil, err
	}
	if err := checkLen("scatter", "recvbuf", recv, count, dt); err != nil {
		return nil, err
	}
	var sends, recvs []algorithms.Transfer
	var copies []algorithms.LocalCopy
	if c.rank == root {
		if err := checkLen("scatter", "sendbuf", send, count*int64(c.nranks), dt); err != nil {
			return nil, err
		}
		for p := 0; p < c.nranks; p++ {
			if p == root {
				copies = append(copies, algorithms.LocalCopy{Src: int64(p) * count, Dst: 0, Count: count})
			} else {
				sends = append(sends, algorithms.Transfer{Peer: p, Off: int64(p) * count, Count: count})
			}
		}
	} else {
		recvs = append(recvs, algorithms.Transfer{Peer: root, Count: count})
	}
	return c.enqueueP2P(collArgs{coll: algorithms.Scatter, count: count, dt: dt, root: root, in: send, out: recv}, sends, recvs, copies)
}

func (c *Comm) checkRoot(coll string, root int) error {
	if root < 0 || root >= c.nranks {
		return fmt.Errorf("%w: %s: root %d is outside [0, %d)", ErrInvalidArgument, coll, root, c.nranks)
	}
	return nil
}

// Send sends count elements to peer. Sends to one peer complete in issue
// order, independently of receives and of collectives.
func (c *Comm) Send(buf []byte, count int64, dt algorithms.DType, peer int) (*Request, error) {
	return c.sendRecv(true, buf, count, dt, peer)
}

// Recv receives count elements from peer (the peer's Send must have the
// same count and dtype).
func (c *Comm) Recv(buf []byte, count int64, dt algorithms.DType, peer int) (*Request, error) {
	return c.sendRecv(false, buf, count, dt, peer)
}

func (c *Comm) sendRecv(send bool, buf []byte, count int64, dt algorithms.DType, peer int) (*Request, error) {
	name := map[bool]string{true: "send", false: "recv"}[send]
	if !dt.Valid() {
		return nil, fmt.Errorf("%w: %s: unsupported dtype %v", ErrInvalidArgument, name, dt)
	}
	if peer < 0 || peer >= c.nranks || peer == c.rank {
		return nil, fmt.Errorf("%w: %s: peer %d must be another rank in [0, %d) (this is rank %d)", ErrInvalidArgument, name, peer, c.nranks, c.rank)
	}
	if err := checkLen(name, "buffer", buf, count, dt); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(name); err != nil {
		return nil, err
	}
	key := p2pKey{peer, send}
	if send {
		// Sends are numbered when issued; receives when they start (after
		// every earlier receive, including one from any source, is done).
		c.p2p.mu.Lock()
		c.p2p.count[key]++
		n := c.p2p.count[key]
		c.p2p.mu.Unlock()
		desc := fmt.Sprintf("send #%d to rank %d (%d x %v)", n, peer, count, dt)
		r := newRequest(desc, c.cfg.Timeout, nil)
		c.runP2P([]p2pKey{key}, r, func() error {
			return c.transferP2P(true, buf, count, dt, peer, n)
		})
		return r, nil
	}
	r := newRequest(fmt.Sprintf("recv from rank %d (%d x %v)", peer, count, dt), c.cfg.Timeout, nil)
	c.runP2P([]p2pKey{key}, r, func() error {
		return c.transferP2P(false, buf, count, dt, peer, c.p2p.next(key))
	})
	return r, nil
}

// next numbers the next receive from a peer (the n-th send from a to b
// pairs with b's n-th receive from a).
func (p *p2pLinks) next(key p2pKey) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.count[key]++
	return p.count[key]
}

// transferP2P runs the n-th send to (or receive from) peer.
func (c *Comm) transferP2P(send bool, buf []byte, count int64, dt algorithms.DType, peer int, n uint64) error {
	t := []algorithms.Transfer{{Peer: peer, Count: count}}
	var sends, recvs []algorithms.Transfer
	from, to, name, dir := c.rank, peer, "send", "to"
	if send {
		sends = t
	} else {
		recvs = t
		from, to, name, dir = peer, c.rank, "recv", "from"
	}
	plan, err := algorithms.LocalP2PPlan(algorithms.SendRecv, c.nranks, c.rank, p2pChannel, dt, sends, recvs, nil, algorithms.P2POptions{})
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalidArgument, name, err)
	}
	tag := opTag(algorithms.SendRecv, n, count, dt, 0, from*c.nranks+to)
	desc := fmt.Sprintf("%s #%d %s rank %d (%d x %v)", name, n, dir, peer, count, dt)
	return c.execPlan(plan, buf, buf, text(desc), tag)
}

// runP2P runs op for r once the operations issued before it on each of
// keys are done, and makes r the last one on each (c.mu held: issue order).
func (c *Comm) runP2P(keys []p2pKey, r *Request, op func() error) {
	if c.flight != nil {
		r.flightID = c.flight.issue(flightCall{text: r.desc})
	}
	prevs := c.p2p.claim(keys, r)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for _, prev := range prevs {
			<-prev.done
		}
		c.finishUnlessFailed(r, op)
		c.p2p.release(keys, r)
	}()
}

// claim makes r the last operation on each of keys and returns the ones
// it must wait for (c.mu held, so claims follow issue order).
func (p *p2pLinks) claim(keys []p2pKey, r *Request) []*Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	var prevs []*Request
	for _, k := range keys {
		if prev := p.last[k]; prev != nil {
			prevs = append(prevs, prev)
		}
		p.last[k] = r
	}
	return prevs
}

// release forgets r on the keys where it is still the last operation.
func (p *p2pLinks) release(keys []p2pKey, r *Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range keys {
		if p.last[k] == r {
			delete(p.last, k)
		}
	}
}

// allP2PKeys names every point-to-point link of this rank, both ways.
func (c *Comm) allP2PKeys() []p2pKey {
	keys := make([]p2pKey, 0, 2*(c.nranks-1))
	for p := 0; p < c.nranks; p++ {
		if p != c.rank {
			keys = append(keys, p2pKey{p, true}, p2pKey{p, false})
		}
	}
	return keys
}

// p2pOneStream is LocalP2PPlan's oneStream for these transfers:
// p2pOneStreamSlots FIFO slots where every peer is a shared-memory link,
// so that a small all-to-all, gather or scatter runs in one stream on the
// caller's goroutine; 0 (a stream per transfer) otherwise.
func (c *Comm) p2pOneStream(sends, recvs []algorithms.Transfer) int64 {
	for _, l := range [][]algorithms.Transfer{sends, recvs} {
		for _, t := range l {
			if !c.shmLink(t.Peer) {
				return 0
			}
		}
	}
	return int64(p2pOneStreamSlots * c.cfg.SlotBytes)
}

// p2pOneStreamSlots is LocalP2PPlan's oneStream in FIFO slots: half a
// link's slots. Within one call a link from r to p holds at most r's
// header of the call and then its data, so in a cycle of ranks that all
// send before they receive no send waits; a send may wait only for a peer
// still in the previous call, whose progress needs nothing of this one.
// 4 ranks on 2 CPUs, all_to_all_single through torch, against one slot
// (alternating, two rounds): 1 MiB 1006–1157 → 708–840 µs, 2 MiB
// 1872–2434 → 1421–1817 µs; 2 ranks 1 MiB 267–283 → 214–219 µs.
const p2pOneStreamSlots = backend.DefaultSlots / 2

// p2pDirectMin is the size from which a pair of ranks moves an
// all-to-all's blocks single-copy (the receiver reads the sender's block
// from its memory; LocalP2PPlan's DirectMin) where both may; below it the
// FIFO. Not gather and scatter: there one rank would do every copy (the
// root reads all blocks of a gather) where the FIFO splits the copying
// between sender and receiver; `gotree perf --nproc 4 --coll gather`,
// 16 MiB, 3 alternating runs: 1.6–1.7 ms FIFO, 2.5–3.3 ms single-copy
// (64 MiB 6.5–9.3 against 10.7–14.4; scatter within the spread).
// all_to_all_single through torch (`gotree.bench --coll alltoall --batch 500`, cold
// buffers), FIFO only against this bound, alternating, 3 runs each,
// medians in ms: 4 ranks (blocks of a quarter) 8 MiB 6.3–7.6 → 4.4–4.8,
// 16 MiB 13.6–20.3 → 7.7–13.2, 64 MiB 52–66 → 34–40 (with a 256 KiB
// bound); 2 ranks 4 MiB 1.5–2.2 → 1.0–1.2, 64 MiB 19–26 → 12–14; blocks
// of 256 KiB to 1 MiB within the spread, which is why the bound is not
// lower (on this VM a process_vm_readv copy runs at about 5 GB/s against
// 11–22 GB/s for memcpy: one such copy costs about what the FIFO's two
// cost on hot buffers, and wins on cold ones).
var p2pDirectMin int64 = 1 << 20

// p2pOptions are LocalP2PPlan's options for a collective of these
// transfers. Single-copy transfers (all-to-all only) need a pair of
// ranks that may read each other's memory (c.cmaPeers: same host, both
// able, the same on both sides) and an input that the call's output does not overlap (peers read
// the input while this rank writes its output); a rank whose buffers
// overlap copies its input first, so that the plan is the same on every
// rank.
func (c *Comm) p2pOptions(a *collArgs, sends, recvs []algorithms.Transfer) algorithms.P2POptions {
	opt := algorithms.P2POptions{OneStream: c.p2pOneStream(sends, recvs)}
	if c.cmaPeers != nil && a.coll == algorithms.AllToAll {
		opt = c.singleCopyOptions(opt.OneStream)
		if overlaps(a.in, a.out) {
			a.in = append([]byte(nil), a.in...)
		}
	}
	return opt
}

// singleCopyOptions are an all-to-all's LocalP2PPlan options with
// oneStream: single-copy from p2pDirectMin with the ranks of c.cmaPeers.
func (c *Comm) singleCopyOptions(oneStream int64) algorithms.P2POptions {
	return algorithms.P2POptions{OneStream: oneStream, DirectMin: p2pDirectMin, DirectWith: c.cmaPeers}
}

// AllToAllSingleCopyPeers lists the peers with which an all-to-all of
// count elements to and from every rank moves its blocks single-copy.
func (c *Comm) AllToAllSingleCopyPeers(count int64, dt algorithms.DType) []int {
	opt := c.singleCopyOptions(0)
	b := count * int64(dt.Size())
	var out []int
	for p := range c.nranks {
		if opt.Direct(p, b, b) {
			out = append(out, p)
		}
	}
	return out
}

// cmaPeersOf marks the ranks that rank and it may read each other's
// memory: the same host, shared memory between them, and both able to
// (rankInfo.CMA: it is false on every rank with GOTREE_SHM_DISABLE or
// GOTREE_CMA_DISABLE). nil where there is none.
func cmaPeersOf(table []rankInfo, rank int) []bool {
	var out []bool
	for p, r := range table {
		if p != rank && r.CMA && table[rank].CMA && r.HostID == table[rank].HostID {
			if out == nil {
				out = make([]bool, len(table))
			}
			out[p] = true
		}
	}
	return out
}

// overlaps says whether a and b share any byte.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// enqueueP2P queues a point-to-point collective on the ordered queue.
func (c *Comm) enqueueP2P(a collArgs, sends, recvs []algorithms.Transfer, copies []algorithms.LocalCopy) (*Request, error) {
	a.p2pOpt = c.p2pOptions(&a, sends, recvs)
	plan, err := algorithms.LocalP2PPlan(a.coll, c.nranks, c.rank, p2pChannel, a.dt, sends, recvs, copies, a.p2pOpt)
	if err != nil {
		return nil, fmt.Errorf("%w: %v: %v", ErrInvalidArgument, a.coll, err)
	}
	a.plan = plan
	return c.enqueue(a)
}

// p2pSummary names the peers a point-to-point plan reads from single-copy
// and those it receives from through the FIFO, for the COLL log.
func p2pSummary(p *algorithms.Plan, rank int) string {
	var direct, fifo []int
	for _, cp := range p.Ranks[rank].Channels {
		for _, st := range cp.Streams {
			for _, s := range st {
				switch s.Prim {
				case algorithms.ReadCopy:
					direct = append(direct, s.ReadFrom[0])
				case algorithms.Recv:
					fifo = append(fifo, s.RecvFrom[0])
				}
			}
		}
	}
	out := ""
	if len(direct) > 0 {
		out += fmt.Sprintf(", single-copy from ranks %v", direct)
	}
	if len(fifo) > 0 {
		out += fmt.Sprintf(", through the FIFO from ranks %v", fifo)
	}
	return out
}
