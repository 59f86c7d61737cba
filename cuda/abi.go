package cuda

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gotree/gotree/algorithms"
)

// The device tables of kernels/abi.cuh, encoded little-endian. The layout
// is checked against the C declarations by TestABILayout.

const (
	stepBytes    = 40
	channelBytes = 32
	connBytes    = 48
	argsBytes    = 80

	// NSlots is the number of FIFO slots per connection (GT_NSLOTS).
	NSlots = 8
	// MaxPeers is the most peers one step receives from or sends to.
	MaxPeers = 3
	// MaxConns is the most connections one rank has on one channel.
	MaxConns = 16
	// LLLineBytes is the size of an LL line (8 data bytes, two flags).
	LLLineBytes = 16

	roleRecv = 0
	roleSend = 1

	protoLL     = 0
	protoSimple = 2
)

// Kernel error codes (GtArgs.err).
const (
	KernelErrTimeout = 1
	KernelErrAbort   = 2
)

// ConnKey names one directed connection of a channel.
type ConnKey struct{ Channel, From, To int }

// ConnRef is one entry of a rank's connection table.
type ConnRef struct {
	Key  ConnKey
	Role int // roleRecv (Key.To is the rank) or roleSend (Key.From is)
}

// RankTables are one rank's encoded plan: the step array, one channel
// descriptor per channel of the plan, and the connection table whose
// device addresses the executor fills in (EncodeConns).
type RankTables struct {
	Rank     int
	Steps    []byte
	Channels []byte
	Conns    []ConnRef
	NSteps   int
	Streams  int // the most streams any channel has (1 or 2)
}

var le = binary.LittleEndian

// kernelPrims are the primitives the kernels run, indexed by Prim: how
// many receives and sends a step takes (least, most) and whether it has a
// source and a destination operand.
var kernelPrims = [...]struct {
	recvs, sends [2]int
	src, dst     bool
}{
	algorithms.Send:               {[2]int{0, 0}, [2]int{1, MaxPeers}, true, false},
	algorithms.Recv:               {[2]int{1, 1}, [2]int{0, 0}, false, true},
	algorithms.RecvReduceSend:     {[2]int{1, MaxPeers}, [2]int{1, MaxPeers}, true, false},
	algorithms.RecvReduceCopySend: {[2]int{1, MaxPeers}, [2]int{0, MaxPeers}, true, true},
	algorithms.RecvCopySend:       {[2]int{1, 1}, [2]int{1, MaxPeers}, false, true},
	algorithms.Copy:               {[2]int{0, 0}, [2]int{0, 0}, true, true},
}

// stepUses lists which operands a primitive has.
func stepUses(p algorithms.Prim) (src, dst bool) {
	if int(p) < len(kernelPrims) {
		return kernelPrims[p].src, kernelPrims[p].dst
	}
	return false, false
}

// kernelStep refuses a step the kernels would not run as the plan means
// it: they know the six message primitives of ring and tree plans, read
// and write only the input and output buffers, take a step's data from
// its source or else its first receive, fold the source first, and send
// and receive only what the primitive says.
func kernelStep(st *algorithms.Step) error {
	if int(st.Prim) >= len(kernelPrims) {
		return fmt.Errorf("%v steps have no kernel (the device runs ring and tree plans)", st.Prim)
	}
	recvs, sends := kernelPrims[st.Prim].recvs, kernelPrims[st.Prim].sends
	if n := len(st.RecvFrom); n < recvs[0] || n > recvs[1] {
		return fmt.Errorf("a %v step with %d receives (the kernels take %d to %d)", st.Prim, n, recvs[0], recvs[1])
	}
	if n := len(st.SendTo); n < sends[0] || n > sends[1] {
		return fmt.Errorf("a %v step with %d sends (the kernels take %d to %d)", st.Prim, n, sends[0], sends[1])
	}
	if len(st.ReadFrom) > 0 || len(st.WriteTo) > 0 {
		return fmt.Errorf("a %v step reads or writes peers' memory, which the kernels do not", st.Prim)
	}
	if st.SrcAt != 0 {
		return fmt.Errorf("a %v step folds its source after %d messages; the kernels fold it first", st.Prim, st.SrcAt)
	}
	src, dst := stepUses(st.Prim)
	for _, u := range []struct {
		used bool
		what string
		ref  algorithms.Ref
	}{{src, "source", st.Src}, {dst, "destination", st.Dst}} {
		if u.used && u.ref.Buf != algorithms.Input && u.ref.Buf != algorithms.Output {
			return fmt.Errorf("a %v step's %s is in the %v buffer; the kernels reach only the input and output", st.Prim, u.what, u.ref.Buf)
		}
	}
	return nil
}

// EncodeRank encodes rank's part of p. Offsets and counts become bytes.
// It fails on what the kernels cannot run: more than two streams in a
// channel, a step kernelStep refuses (MaxPeers peers at most), more than
// MaxConns connections in a channel.
func EncodeRank(p *algorithms.Plan, rank int) (*RankTables, error) {
	if rank < 0 || rank >= len(p.Ranks) {
		return nil, fmt.Errorf("gotree/cuda: rank %d not in plan of %d ranks", rank, len(p.Ranks))
	}
	es := int64(p.DType.Size())
	if es == 0 {
		return nil, fmt.Errorf("gotree/cuda: unknown dtype %v", p.DType)
	}
	t := &RankTables{Rank: rank, Channels: make([]byte, channelBytes*p.Channels), Streams: 1}
	byCh := map[int]*algorithms.ChannelPlan{}
	rp := &p.Ranks[rank]
	for i := range rp.Channels {
		byCh[rp.Channels[i].Channel] = &rp.Channels[i]
	}
	for c := 0; c < p.Channels; c++ {
		cd := t.Channels[c*channelBytes : (c+1)*channelBytes]
		le.PutUint32(cd[20:], uint32(len(t.Conns))) // firstConn
		cp := byCh[c]
		if cp == nil {
			continue
		}
		if len(cp.Streams) > 2 {
			return nil, fmt.Errorf("gotree/cuda: rank %d channel %d has %d streams; the kernels run at most 2", rank, c, len(cp.Streams))
		}
		first := len(t.Conns)
		idx := map[ConnKey]int{}
		conn := func(k ConnKey, role int) (byte, error) {
			if i, ok := idx[k]; ok {
				return byte(i - first), nil
			}
			if len(t.Conns)-first >= MaxConns {
				return 0, fmt.Errorf("gotree/cuda: rank %d channel %d uses more than %d connections", rank, c, MaxConns)
			}
			idx[k] = len(t.Conns)
			t.Conns = append(t.Conns, ConnRef{Key: k, Role: role})
			return byte(len(t.Conns) - 1 - first), nil
		}
		nstreams := 0
		for s, stream := range cp.Streams {
			le.PutUint32(cd[4*s:], uint32(t.NSteps))
			le.PutUint32(cd[8+4*s:], uint32(len(stream)))
			if len(stream) > 0 {
				nstreams = s + 1
			}
			for i := range stream {
				st := &stream[i]
				if st.Count <= 0 {
					return nil, fmt.Errorf("gotree/cuda: rank %d channel %d step %d has count %d", rank, c, i, st.Count)
				}
				if err := kernelStep(st); err != nil {
					return nil, fmt.Errorf("gotree/cuda: rank %d channel %d step %d: %w", rank, c, i, err)
				}
				b := make([]byte, stepBytes)
				b[0] = byte(st.Prim)
				b[1] = byte(len(st.RecvFrom))
				b[2] = byte(len(st.SendTo))
				useSrc, useDst := stepUses(st.Prim)
				if useSrc {
					b[3] = byte(st.Src.Buf)
					le.PutUint64(b[16:], uint64(st.Src.Off*es))
				}
				if useDst {
					b[4] = byte(st.Dst.Buf)
					le.PutUint64(b[24:], uint64(st.Dst.Off*es))
				}
				for j, peer := range st.RecvFrom {
					ci, err := conn(ConnKey{c, peer, rank}, roleRecv)
					if err != nil {
						return nil, err
					}
					b[5+j] = ci
				}
				for j, peer := range st.SendTo {
					ci, err := conn(ConnKey{c, rank, peer}, roleSend)
					if err != nil {
						return nil, err
					}
					b[8+j] = ci
				}
				le.PutUint64(b[32:], uint64(st.Count*es))
				t.Steps = append(t.Steps, b...)
				t.NSteps++
			}
		}
		// A channel whose only non-empty stream is the second keeps both,
		// so that stream indices match thread groups.
		le.PutUint32(cd[16:], uint32(nstreams))
		le.PutUint32(cd[24:], uint32(len(t.Conns)-first))
		if nstreams > t.Streams {
			t.Streams = nstreams
		}
	}
	return t, nil
}

// MaxSlotsPerStep is the most FIFO slots one step may fill: a ring rank
// sends a whole step ahead before it receives, and with the FIFO full both
// neighbours would wait for each other's credit. NCCL keeps a chunk to 4 of
// its 8 slots; so does gotree.
const MaxSlotsPerStep = NSlots / 2

// CheckSlices verifies that no step of p that uses a connection needs more
// than MaxSlotsPerStep slots of the given sizes (bytes of data per slot).
func CheckSlices(p *algorithms.Plan, simpleSlotBytes, llSlotLines int) error {
	slot := int64(simpleSlotBytes)
	if p.Proto == algorithms.LL {
		slot = int64(llSlotLines) * 8
	}
	limit := MaxSlotsPerStep * slot
	es := int64(p.DType.Size())
	for _, rp := range p.Ranks {
		for _, cp := range rp.Channels {
			for _, s := range cp.Streams {
				for _, st := range s {
					if len(st.RecvFrom)+len(st.SendTo) > 0 && st.Count*es > limit {
						return fmt.Errorf("gotree/cuda: rank %d channel %d: a %v step of %d bytes needs more than %d FIFO slots of %d bytes (use smaller chunks)",
							rp.Rank, cp.Channel, st.Prim, st.Count*es, MaxSlotsPerStep, slot)
					}
				}
			}
		}
	}
	return nil
}

// ConnMem is where one directed connection's FIFO lives (all device
// addresses; the receiver's memory except Head, the sender's).
type ConnMem struct {
	Simple, LL, Tail, Head DevicePtr
	Peer                   int
}

// EncodeConns encodes a rank's connection table given each connection's
// memory.
func EncodeConns(t *RankTables, mem func(ConnKey) ConnMem) []byte {
	out := make([]byte, connBytes*len(t.Conns))
	for i, c := range t.Conns {
		m := mem(c.Key)
		b := out[i*connBytes:]
		le.PutUint64(b[0:], uint64(m.Simple))
		le.PutUint64(b[8:], uint64(m.LL))
		le.PutUint64(b[16:], uint64(m.Tail))
		le.PutUint64(b[24:], uint64(m.Head))
		le.PutUint32(b[32:], uint32(c.Role))
		peer := c.Key.From
		if c.Role == roleSend {
			peer = c.Key.To
		}
		le.PutUint32(b[36:], uint32(peer))
	}
	return out
}

// KernelArgs is GtArgs.
type KernelArgs struct {
	In, Out, Steps, Channels, Conns DevicePtr
	Err, AbortFlag                  DevicePtr
	TimeoutNs                       uint64
	SimpleSlotBytes, LLSlotLines    uint32
	Proto                           uint32
	Group0Threads                   uint32
}

// Bytes encodes the arguments.
func (a *KernelArgs) Bytes() []byte {
	b := make([]byte, argsBytes)
	for i, v := range []uint64{uint64(a.In), uint64(a.Out), uint64(a.Steps), uint64(a.Channels), uint64(a.Conns),
		uint64(a.Err), uint64(a.AbortFlag), a.TimeoutNs} {
		le.PutUint64(b[8*i:], v)
	}
	le.PutUint32(b[64:], a.SimpleSlotBytes)
	le.PutUint32(b[68:], a.LLSlotLines)
	le.PutUint32(b[72:], a.Proto)
	le.PutUint32(b[76:], a.Group0Threads)
	return b
}

// GroupSplit returns the threads of stream 0 (reduce-up) when a block of
// `threads` threads runs a tree-split channel: NCCL's split, rounded to
// whole warps: Simple gives half, +64 when the half is at least 256; LL
// gives 70%.
func GroupSplit(proto algorithms.Protocol, threads int) int {
	var n int
	if proto == algorithms.Simple || proto == algorithms.LL128 {
		n = threads / 2
		if n >= 256 {
			n += 64
		}
	} else {
		n = threads * 7 / 10
	}
	n = n / 32 * 32
	return max(32, min(n, threads-32))
}

// Arg helpers for Function.Launch.

// ArgU64 is a 64-bit kernel parameter.
func ArgU64(v uint64) []byte { b := make([]byte, 8); le.PutUint64(b, v); return b }

// ArgU32 is a 32-bit kernel parameter.
func ArgU32(v uint32) []byte { b := make([]byte, 4); le.PutUint32(b, v); return b }

// ArgF64 is a double kernel parameter.
func ArgF64(v float64) []byte {
	b := make([]byte, 8)
	le.PutUint64(b, math.Float64bits(v))
	return b
}
