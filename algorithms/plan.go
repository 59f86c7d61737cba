package algorithms

// Prim is one of NCCL's primitive operations. A step receives from zero or
// more peers, combines what it received with a local operand, writes the
// result locally and/or sends it on.
type Prim uint8

const (
	// Send sends Src to every peer in SendTo.
	Send Prim = iota
	// Recv receives from RecvFrom[0] into Dst.
	Recv
	// RecvReduceSend reduces Src with the data received from every peer in
	// RecvFrom and sends the result to SendTo without writing it locally.
	// The operands are folded left to right: the messages in RecvFrom
	// order with Src inserted at position SrcAt (0: Src first).
	RecvReduceSend
	// RecvReduceCopySend reduces Src with the received data, writes the
	// result to Dst and sends it to SendTo (which may be empty).
	RecvReduceCopySend
	// RecvCopySend receives from RecvFrom[0], writes Dst and forwards the
	// same bytes to SendTo.
	RecvCopySend
	// Copy copies Src to Dst locally.
	Copy

	// The primitives of single-copy plans (Direct), for ranks that can
	// read each other's memory: messages carry no data, only where this
	// rank's buffers are and how far it got.

	// Notify sends this rank's buffer descriptor to every peer in SendTo
	// (Count is 1: one small message per peer).
	Notify
	// Wait receives the descriptor of every peer in RecvFrom (Count 1).
	Wait
	// ReadReduceCopy reduces Src with the same range (Src's buffer and
	// offset) of the buffers of every peer in ReadFrom, in list order,
	// and writes the result to Dst, and to the same range (Dst's buffer
	// and offset) of the buffers of every peer in WriteTo. The peers'
	// descriptors must have arrived by a Wait before.
	ReadReduceCopy
	// Offer sends SendTo[0] a descriptor of the Count elements at Src of
	// this rank's buffers, for that peer's ReadCopy (single-copy
	// point-to-point between ranks that can read each other's memory).
	Offer
	// ReadCopy copies the Count elements that ReadFrom[0] offered (the
	// descriptor its Offer sent, received by a Wait before) into Dst. The
	// offer must be exactly Count elements.
	ReadCopy
	// PeerCopy copies the Count elements at Src of ReadFrom[0]'s staging
	// region (Src's buffer is Stage) into Dst: shared plans, whose ranks
	// map each other's staging regions.
	PeerCopy
)

var primNames = [...]string{"Send", "Recv", "RecvReduceSend", "RecvReduceCopySend", "RecvCopySend", "Copy",
	"Notify", "Wait", "ReadReduceCopy", "Offer", "ReadCopy", "PeerCopy"}

func (p Prim) String() string {
	if int(p) < len(primNames) {
		return primNames[p]
	}
	return "Prim?"
}

// Buf names a rank's buffer.
type Buf uint8

const (
	NoBuf  Buf = iota
	Input      // the send buffer
	Output     // the receive buffer (may alias Input for in-place calls)
	// Stage is the rank's staging region of a shared plan
	// (Plan.StageElems elements), which every rank of the host maps and
	// which never aliases Input or Output. A ReadReduceCopy whose peers'
	// range (Step.PeerRange) is in Stage reads the peers' staging
	// regions, not their buffers.
	Stage
)

func (b Buf) String() string {
	switch b {
	case Input:
		return "in"
	case Output:
		return "out"
	case Stage:
		return "stage"
	}
	return "-"
}

// Ref is an element offset into one of a rank's buffers.
type Ref struct {
	Buf Buf
	Off int64 // in elements
}

// Step is one primitive operation on Count elements. Peers are ranks of
// the communicator. Every message between two ranks on one channel is
// matched in order: the n-th send from a to b on channel c is the n-th
// receive of b from a on channel c.
type Step struct {
	Prim     Prim
	RecvFrom []int
	SendTo   []int
	Src      Ref // local operand (Send, reduce steps, Copy); for ReadReduceCopy also the range read from each peer
	Dst      Ref // where the result is written (Recv, *Copy*)
	Count    int64
	// ReadFrom lists the peers whose memory a ReadReduceCopy or ReadCopy
	// reads (no message passes).
	ReadFrom []int
	// WriteTo lists the peers whose memory a ReadReduceCopy also writes
	// its result to.
	WriteTo []int
	// SrcAt is where Src enters the fold of a RecvReduceSend or
	// RecvReduceCopySend: after the messages of RecvFrom[:SrcAt]. Plans
	// whose ranks each fold the same operands (OneShot) set it so that
	// every rank reduces in rank order and gets the same bits.
	SrcAt int
	// PeerSrc, when set, is the range a ReadReduceCopy reads of every
	// ReadFrom peer, where Src is this rank's own operand elsewhere: a
	// shared plan reduces its own input with the peers' staged chunks
	// (Stage). Unset, the peers' range is Src's (PeerRange).
	PeerSrc Ref
}

// PeerRange is the range of each ReadFrom peer's memory that s reads:
// PeerSrc where set, else Src.
func (s *Step) PeerRange() Ref {
	if s.PeerSrc.Buf != NoBuf {
		return s.PeerSrc
	}
	return s.Src
}

// Stream is an ordered list of steps run one after another. A channel may
// have several independent streams (tree-split: reduce-up and
// broadcast-down); no two streams of a channel use the same directed
// connection.
type Stream []Step

// ChannelPlan is one rank's work on one channel.
type ChannelPlan struct {
	Channel int
	Streams []Stream
}

// RankPlan is one rank's whole schedule.
type RankPlan struct {
	Rank     int
	Channels []ChannelPlan
}

// Plan is the complete schedule of one collective call for every rank.
type Plan struct {
	Coll     Collective
	Algo     Algorithm
	Proto    Protocol
	NRanks   int
	Count    int64 // the request's count: allreduce/broadcast/reduce the buffer, allgather each rank's input, reducescatter each rank's output (see BufferCounts)
	DType    DType
	Op       Op
	Root     int
	Channels int
	Ranks    []RankPlan
	// StageElems is the size of each rank's staging region (Stage) that
	// a shared plan uses, in elements; 0 for every other plan.
	StageElems int64
}

// TreeLinks are one rank's links in one channel's tree. -1 means none.
// Down has NCCL's three slots: up to two inter-node children and one
// intra-node child.
type TreeLinks struct {
	Up    int
	Down  [3]int
	Depth int
}

// RingLinks are one rank's neighbours in one channel's ring.
type RingLinks struct {
	Prev, Next int
}

// Graph is the connection graph of a communicator: for each channel, every
// rank's ring neighbours and tree links, plus each channel's ring order
// (starting at rank 0's position as NCCL prints it).
type Graph struct {
	NRanks    int
	NNodes    int
	Channels  int           // channels for rings; trees use the same count
	RingOrder [][]int       // [channel] ranks in ring order
	Rings     [][]RingLinks // [channel][rank]
	Trees     [][]TreeLinks // [channel][rank]

	// Added after the first version (zero when a Graph is parsed from a
	// log): the node index of every rank (nodes numbered by first
	// appearance) and the tree pattern BuildGraph used.
	NodeOf  []int
	Pattern Pattern
}
