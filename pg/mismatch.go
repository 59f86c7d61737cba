package pg

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend"
)

// Agreement checks: ranks that issue a different collective, count, dtype,
// op, root or all-to-all split at the same sequence number must all fail
// in that call, with a text that names both views where they are known
// (docs/failures.md, "Mismatched collectives").
//
// Every data message carries the call's tag (opTag), and a receiver fails
// on a foreign tag. Where every rank's result depends on every other rank
// and data moves (allreduce, allgather, reducescatter, barrier with count
// > 0) that is enough: a rank forwards only what carried its own tag, so
// no rank completes unless all issued the same call. The other calls run a
// check before their data:
//
//   - ring check (broadcast, reduce, gather, scatter, all-to-all, and any
//     collective with count 0): on channel 0's ring, every rank sends a
//     header with its view of the call to both ring neighbours and
//     receives theirs, in floor(nranks/2) rounds; from the second round on
//     a message says "the sender's neighbours agreed so far", so after
//     round k a rank knows that every rank within k steps agrees with it,
//     and after floor(nranks/2) rounds, all do. Every rank sends before it
//     waits, whatever it issued, so no set of views can leave all ranks
//     waiting (ranks that disagree on the root, including views in which
//     nobody is the root, cannot wait on each other), and a rank whose
//     neighbour issued a collective without this check reads a header
//     where it expected data (or the reverse) and fails on the tag. Only
//     the last round's header from a neighbour that sends this rank no
//     channel-0 data is read after the data (the root of a broadcast
//     sends at once); all others come first on their link and are read
//     before the data.
//   - allreduce at a size where the cost model picks another algorithm in
//     place than out of place (Comm.planFor's placed; the same on every
//     rank, as it does not depend on the rank's own placement): the ring
//     check too, every header read before the data, since ranks that
//     disagree on the placement run different plans, and two plans can
//     leave each rank waiting on a link the other never writes. The
//     header carries the plan's algorithm, and the check compares it.
//     Every allreduce also mixes its plan's algorithm into its data tag
//     (planTag), so that a rank that reads a message of another plan names
//     it. (The settings that decide a plan besides the call are compared
//     once, in Init: sameChoiceSettings.)
//   - all-to-all, after the ring check: every pair exchanges headers on
//     the point-to-point links carrying what each sends to and expects
//     from the other; each rank then sends a verdict to every peer it
//     sends no data to, and receives one, after its data, from every peer
//     that sends it none. Data is sent only after a rank's own checks, so
//     it is a verdict too: a rank's call succeeds only once every peer has
//     checked all of its splits, so a pair that disagrees fails every
//     rank's call, not only its own two.
//
// Headers travel with hdrTag, a constant, so that a rank can read a peer's
// header whatever that peer issued and name both views; data receivers
// reject them like any foreign tag. A data tag that does not match is
// compared with the tags of nearby calls (other root, op, dtype,
// collective, sequence number) to name what the peer issued.

// hdrTag is the tag of agreement-check messages.
const hdrTag uint32 = 0x63687467 // "gthc"

// A header is hdrLen bytes, little-endian: kind, collective, dtype, op
// (one byte each), hdrMagic, then seq, count, root, send, recv and round
// (eight bytes each), the algorithm byte, and seven reserved zero bytes,
// which decodeHeader checks.
const (
	hdrLen   = 64
	hdrMagic = 0x63685467 // "gThc"
)

type hdrKind byte

const (
	hdrView    hdrKind = 1 // the sender's view of the call (first ring round, all-to-all pairs)
	hdrRound   hdrKind = 2 // ring round > 1: the sender's neighbours agreed in the rounds before
	hdrVerdict hdrKind = 3 // all-to-all: the sender checked all its pairs; they agree
)

// whyChoicesDiffer says how ranks come to run different plans for one call.
const whyChoicesDiffer = "in place on some ranks and out of place on others, or different GOTREE_ALGO, GOTREE_TUNING_FILE or channel settings"

// errMismatch marks an agreement-check failure.
var errMismatch = errors.New("the ranks issued different collectives, sizes, dtypes, ops or roots at this point")

// header is one rank's view of a call, as sent to a peer.
type header struct {
	kind       hdrKind
	coll       algorithms.Collective
	dt         algorithms.DType
	op         algorithms.Op
	seq        uint64
	count      int64
	root       int64
	send, recv int64 // all-to-all: elements the sender sends to / expects from the receiver
	round      int64 // ring check: the round
	algo       uint8 // the algorithm of the sender's plan + 1; 0: not compared (see collArgs.algo)
}

func (a collArgs) header(kind hdrKind) header {
	return header{kind: kind, coll: a.coll, dt: a.dt, op: a.op, seq: a.seq, count: a.count, root: int64(a.root), algo: a.algo}
}

func (h header) encode() []byte {
	b := make([]byte, hdrLen)
	b[0], b[1], b[2], b[3] = byte(h.kind), byte(h.coll), byte(h.dt), byte(h.op)
	le := binary.LittleEndian
	le.PutUint32(b[4:], hdrMagic)
	le.PutUint64(b[8:], h.seq)
	le.PutUint64(b[16:], uint64(h.count))
	le.PutUint64(b[24:], uint64(h.root))
	le.PutUint64(b[32:], uint64(h.send))
	le.PutUint64(b[40:], uint64(h.recv))
	le.PutUint64(b[48:], uint64(h.round))
	b[56] = h.algo
	return b
}

func decodeHeader(b []byte) (header, bool) {
	le := binary.LittleEndian
	if len(b) != hdrLen || le.Uint32(b[4:]) != hdrMagic {
		return header{}, false
	}
	for _, x := range b[57:] {
		if x != 0 { // reserved: encode writes zeros, so these are not our headers
			return header{}, false
		}
	}
	return header{
		kind: hdrKind(b[0]), coll: algorithms.Collective(b[1]), dt: algorithms.DType(b[2]), op: algorithms.Op(b[3]),
		seq: le.Uint64(b[8:]), count: int64(le.Uint64(b[16:])), root: int64(le.Uint64(b[24:])),
		send: int64(le.Uint64(b[32:])), recv: int64(le.Uint64(b[40:])), round: int64(le.Uint64(b[48:])),
		algo: b[56],
	}, true
}

// args is the call a header describes (for messages).
func (h header) args() collArgs {
	return collArgs{coll: h.coll, count: h.count, dt: h.dt, op: h.op, root: int(h.root), seq: h.seq}
}

func (c *Comm) sendHeader(ctx context.Context, ch, peer int, h header) error {
	l, err := c.Conn(ch, peer)
	if err != nil {
		return err
	}
	if err := l.Send(ctx, hdrTag, h.encode()); err != nil {
		if ch == p2pChannel {
			return err // point-to-point receives may run concurrently on this link
		}
		return peerReason(ctx, l, err)
	}
	return nil
}

// peerReason: a send fails when the peer has just aborted (over TCP the
// socket is closed once its abort frame is read, and the send reports
// only that); the reason waits on the receive side of the link. Return it
// when it is there within a moment, else err.
func peerReason(ctx context.Context, l backend.Conn, err error) error {
	ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	for i := 0; i < 8; i++ {
		_, _, rerr := l.Recv(ctx)
		if rerr == nil {
			l.Release() // an earlier message: the call has failed anyway
			continue
		}
		var ra *backend.RemoteAbortError
		if errors.As(rerr, &ra) {
			return rerr
		}
		break
	}
	return err
}

// recvHeader receives peer's next message on channel ch, which must be an
// agreement-check message of the given kind.
func (c *Comm) recvHeader(ctx context.Context, a collArgs, ch, peer int, kind hdrKind) (header, error) {
	l, err := c.Conn(ch, peer)
	if err != nil {
		return header{}, err
	}
	b, tag, err := l.Recv(ctx)
	if err != nil {
		return header{}, err
	}
	h, ok := decodeHeader(b)
	n := len(b)
	l.Release()
	if tag == hdrTag && ok && h.kind == kind {
		return h, nil
	}
	what := map[hdrKind]string{hdrView: "header", hdrRound: "round", hdrVerdict: "verdict"}[kind]
	switch {
	case tag != hdrTag:
		return header{}, fmt.Errorf("rank %d sent data of another operation (tag %08x) where this rank expected its agreement %s for %s%s: %w",
			peer, tag, what, a.describe(), c.explainTag(a, peer, tag), errMismatch)
	case !ok:
		return header{}, fmt.Errorf("rank %d sent a malformed agreement %s (%d bytes) for %s: %w", peer, what, n, a.describe(), errMismatch)
	default:
		return header{}, fmt.Errorf("rank %d sent an agreement message of kind %d for %s where this rank expected its %s for %s: %w",
			peer, h.kind, h.args().describe(), what, a.describe(), errMismatch)
	}
}

// compareView checks a peer's header against this rank's call.
func (c *Comm) compareView(a collArgs, peer int, h header) error {
	var diff []string
	if h.coll != a.coll {
		diff = append(diff, "collective")
	}
	if h.seq != a.seq {
		diff = append(diff, "sequence number")
	}
	if h.count != a.count && !(h.coll == algorithms.AllToAll && a.coll == algorithms.AllToAll) {
		diff = append(diff, "count")
	}
	if h.dt != a.dt {
		diff = append(diff, "dtype")
	}
	if h.op != a.op {
		diff = append(diff, "op")
	}
	if h.root != int64(a.root) {
		diff = append(diff, "root")
	}
	if len(diff) > 0 {
		verb := "differs"
		if len(diff) > 1 {
			verb = "differ"
		}
		return fmt.Errorf("rank %d issued %s where this rank issued %s (%s %s): %w",
			peer, h.args().describe(), a.describe(), strings.Join(diff, ", "), verb, errMismatch)
	}
	if h.algo != 0 && a.algo != 0 && h.algo != a.algo {
		// Same call, different plans: each rank's cost model chose alone.
		return fmt.Errorf("rank %d runs %s with the %v algorithm where this rank runs %v: the ranks' choices differ (%s): %w",
			peer, a.describe(), algorithms.Algorithm(h.algo-1), algorithms.Algorithm(a.algo-1), whyChoicesDiffer, errMismatch)
	}
	return nil
}

// compareSplits checks a peer's all-to-all header against this rank's
// splits.
func (c *Comm) compareSplits(a collArgs, peer int, h header) error {
	if peer < len(a.sendCounts) && peer < len(a.recvCounts) {
		if h.send != a.recvCounts[peer] {
			return fmt.Errorf("in %s rank %d sends %d x %v to rank %d, which expects %d from it (the all-to-all splits disagree): %w",
				a.describe(), peer, h.send, a.dt, c.rank, a.recvCounts[peer], errMismatch)
		}
		if h.recv != a.sendCounts[peer] {
			return fmt.Errorf("in %s rank %d sends %d x %v to rank %d, which expects %d from it (the all-to-all splits disagree): %w",
				a.describe(), c.rank, a.sendCounts[peer], a.dt, peer, h.recv, errMismatch)
		}
	}
	return nil
}

// ringAgree starts the ring check: floor(nranks/2) rounds of headers with
// both ring neighbours on channel 0. The last round's header from a
// neighbour that sends this rank no channel-0 data in this call (dataFrom
// false) is left for ringAgreeAfter, so that the data need not wait for
// it (the root of a broadcast sends at once); the headers from a
// neighbour that does send data are read before it, as they come first on
// that link. ringAgree returns the neighbours left for ringAgreeAfter.
// before runs it for a call that needsRingCheck lets go without, and
// reads every header before the data: the peers' plans may differ from
// this rank's, so dataFrom says nothing about them.
func (c *Comm) ringAgree(ctx context.Context, a collArgs, before bool, dataFrom func(peer int) bool) ([]int, error) {
	n := c.nranks
	if n < 2 || !before && !needsRingCheck(a) {
		return nil, nil
	}
	if before {
		dataFrom = func(int) bool { return true }
	}
	order := ringOrder(c.graph, 0)
	pos := -1
	for i, r := range order {
		if r == c.rank {
			pos = i
		}
	}
	if len(order) != n || pos < 0 {
		return nil, fmt.Errorf("%w: rank %d: channel 0 has no ring of %d ranks", ErrInvalidArgument, c.rank, n)
	}
	prev, next := order[(pos-1+n)%n], order[(pos+1)%n]
	neighbours := []int{prev, next}[:min(n-1, 2)] // n = 2: one peer, one message each way per round
	rounds := n / 2
	var later []int
	for k := 1; k <= rounds; k++ {
		h := a.header(hdrView)
		if k > 1 {
			h.kind = hdrRound
		}
		h.round = int64(k)
		for _, p := range neighbours {
			if err := c.sendHeader(ctx, 0, p, h); err != nil {
				return nil, err
			}
		}
		for _, p := range neighbours {
			if k == rounds && !dataFrom(p) {
				later = append(later, p)
				continue
			}
			if err := c.recvRound(ctx, a, p, k); err != nil {
				return nil, err
			}
		}
	}
	return later, nil
}

// ringAgreeAfter ends the ring check after the data: the last round's
// headers that ringAgree left.
func (c *Comm) ringAgreeAfter(ctx context.Context, a collArgs, later []int) error {
	for _, p := range later {
		if err := c.recvRound(ctx, a, p, c.nranks/2); err != nil {
			return err
		}
	}
	return nil
}

func (c *Comm) recvRound(ctx context.Context, a collArgs, p, k int) error {
	kind := hdrView
	if k > 1 {
		kind = hdrRound
	}
	got, err := c.recvHeader(ctx, a, 0, p, kind)
	if err != nil {
		return err
	}
	if err := c.compareView(a, p, got); err != nil {
		return err
	}
	if got.round != int64(k) {
		return fmt.Errorf("rank %d sent round %d of the agreement check of %s where this rank is at round %d: %w", p, got.round, got.args().describe(), k, errMismatch)
	}
	return nil
}

// recvsOnChannel reports whether rank receives data from peer on channel
// ch in plan.
func recvsOnChannel(p *algorithms.Plan, rank, ch, peer int) bool {
	for _, cp := range p.Ranks[rank].Channels {
		if cp.Channel != ch {
			continue
		}
		for _, s := range cp.Streams {
			for _, st := range s {
				if st.Count == 0 {
					continue
				}
				for _, f := range st.RecvFrom {
					if f == peer {
						return true
					}
				}
			}
		}
	}
	return false
}

// needsRingCheck: every call whose data alone does not prove that all
// ranks issued it (see the top of this file).
func needsRingCheck(a collArgs) bool {
	switch a.coll {
	case algorithms.Broadcast, algorithms.Reduce, algorithms.Gather, algorithms.Scatter, algorithms.AllToAll:
		return true
	}
	return a.count == 0
}

// ringOrder is channel ch's ring from rank 0 along Next.
func ringOrder(g *algorithms.Graph, ch int) []int {
	if ch < len(g.RingOrder) && len(g.RingOrder[ch]) == g.NRanks {
		return g.RingOrder[ch]
	}
	if ch >= len(g.Rings) || len(g.Rings[ch]) != g.NRanks {
		return nil
	}
	order := make([]int, 0, g.NRanks)
	for r, i := 0, 0; i < g.NRanks && r >= 0 && r < g.NRanks; i++ {
		order = append(order, r)
		r = g.Rings[ch][r].Next
	}
	return order
}

// p2pPeer is one peer of the all-to-all split check.
type p2pPeer struct {
	peer       int
	send, recv int64 // elements this rank sends to / expects from peer
	verdictOut bool  // this rank sends peer no data: send a verdict
	verdictIn  bool  // peer sends this rank no data: receive its verdict
}

// p2pPeers lists the peers of the all-to-all split check (none for other
// calls).
func (c *Comm) p2pPeers(a collArgs) []p2pPeer {
	if a.coll != algorithms.AllToAll {
		return nil
	}
	n := c.nranks
	es := int64(a.dt.Size())
	var out []p2pPeer
	for k := 1; k < n; k++ {
		p := (c.rank + k) % n
		s, r := a.sendCounts[p], a.recvCounts[p]
		// A single-copy pair exchanges descriptors both ways during the
		// data, after each side's check passed: no verdicts.
		direct := a.p2pOpt.Direct(p, s*es, r*es)
		out = append(out, p2pPeer{peer: p, send: s, recv: r, verdictOut: s == 0 && !direct, verdictIn: r == 0 && !direct})
	}
	return out
}

// p2pAgreeBefore runs before the data of an all-to-all: headers to every
// peer, then theirs, then verdicts to the peers that get no data from
// this rank.
func (c *Comm) p2pAgreeBefore(ctx context.Context, a collArgs, peers []p2pPeer) error {
	for _, p := range peers {
		h := a.header(hdrView)
		h.send, h.recv = p.send, p.recv
		if err := c.sendHeader(ctx, p2pChannel, p.peer, h); err != nil {
			return err
		}
	}
	for _, p := range peers {
		h, err := c.recvHeader(ctx, a, p2pChannel, p.peer, hdrView)
		if err != nil {
			return err
		}
		if err := c.compareView(a, p.peer, h); err != nil {
			return err
		}
		if err := c.compareSplits(a, p.peer, h); err != nil {
			return err
		}
	}
	for _, p := range peers {
		if p.verdictOut {
			if err := c.sendHeader(ctx, p2pChannel, p.peer, a.header(hdrVerdict)); err != nil {
				return err
			}
		}
	}
	return nil
}

// p2pAgreeAfter receives, after the data, the verdicts of the peers that
// sent this rank no data.
func (c *Comm) p2pAgreeAfter(ctx context.Context, a collArgs, peers []p2pPeer) error {
	for _, p := range peers {
		if !p.verdictIn {
			continue
		}
		h, err := c.recvHeader(ctx, a, p2pChannel, p.peer, hdrVerdict)
		if err != nil {
			return err
		}
		if err := c.compareView(a, p.peer, h); err != nil {
			return err
		}
	}
	return nil
}

// explainTag names the call a foreign data tag belongs to when it differs
// from a in one property (or the collective with its op and root): what
// peer issued. Empty when nothing nearby matches (a different count, say).
func (c *Comm) explainTag(a collArgs, peer int, got uint32) string {
	if got == hdrTag {
		return fmt.Sprintf("; rank %d sent an agreement-check header, so it issued a call that checks first (broadcast, reduce, gather, scatter, all-to-all, or any collective of count 0)", peer)
	}
	base := a
	base.name = ""
	if a.algo != 0 {
		mine, tag := algorithms.Algorithm(a.algo-1), opTag(a.coll, a.seq, a.count, a.dt, a.op, a.root)
		for al := algorithms.Ring; int(al) < algorithms.NumAlgorithms; al++ {
			if al != mine && planTag(tag, al) == got {
				return fmt.Sprintf("; the tag is that of the same call run with the %v algorithm, which rank %d chose where this rank chose %v (%s)", al, peer, mine, whyChoicesDiffer)
			}
		}
	}
	match := func(b collArgs) bool {
		for al := algorithms.Ring; int(al) < algorithms.NumAlgorithms; al++ {
			if planTag(opTag(b.coll, b.seq, b.count, b.dt, b.op, b.root), al) == got {
				return true
			}
		}
		return false
	}
	say := func(b collArgs) string {
		return fmt.Sprintf("; the tag is that of %s, which is what rank %d issued", b.describe(), peer)
	}
	maxRoot := min(c.nranks, 4096)
	for r := 0; r < maxRoot; r++ {
		b := base
		b.root = r
		if match(b) {
			return say(b)
		}
	}
	for d := 1; d <= 16; d++ {
		for _, s := range []uint64{a.seq + uint64(d), a.seq - uint64(d)} {
			b := base
			b.seq = s
			if s > 0 && match(b) {
				return say(b)
			}
		}
	}
	for dt := algorithms.DType(0); dt.Valid(); dt++ {
		b := base
		b.dt = dt
		if match(b) {
			return say(b)
		}
	}
	for op := algorithms.Op(0); op.Valid(); op++ {
		b := base
		b.op = op
		if match(b) {
			return say(b)
		}
	}
	for coll := algorithms.AllReduce; coll < algorithms.SendRecv; coll++ {
		for op := algorithms.Op(0); op.Valid(); op++ {
			for r := 0; r < min(maxRoot, 256); r++ {
				b := base
				b.coll, b.op, b.root = coll, op, r
				if match(b) {
					return say(b)
				}
			}
		}
	}
	return ""
}
