package algorithms

import "fmt"

// This file splits a message over channels and chunks, after NCCL's rules
// (src/enqueue.cc): work is cut in 16-byte cells, every channel carries at
// least 512 bytes of traffic, the number of channels drops for small
// messages while bytes < channels × threads × threshold, and chunks are
// aligned to the protocol's grain.

const (
	// CellBytes is the unit in which a message is cut over channels.
	CellBytes = 16
	// MinChannelBytes is the least traffic a channel is given.
	MinChannelBytes = 512
)

// GrainBytes is the chunk alignment of a protocol: LL 16 B, LL128 1920 B
// (120 bytes of data per 128-byte line × 16 lanes), Simple 512 B.
func GrainBytes(p Protocol) int64 {
	switch p {
	case LL:
		return 16
	case LL128:
		return 1920
	}
	return 512
}

// DefaultChunkBytes is the largest chunk (bytes of data per step) NCCL uses
// with its default buffers: Simple 512 KiB per step, ×4 steps for ring
// (chunkSteps 4); LL half of a 64 KiB step (32 KiB, flags take the other
// half); LL128 15/16 of a 614400-byte step (576000 B).
func DefaultChunkBytes(a Algorithm, p Protocol) int64 {
	switch p {
	case LL:
		return 32 << 10
	case LL128:
		return 614400 / 16 * 15
	}
	if a == Ring {
		return 4 * 512 << 10
	}
	return 512 << 10
}

// ncclThreads and ncclThreadThreshold are NCCL's default maxThreads and
// threadThresholds per protocol (ring LL's threshold is multiplied by the
// number of ranks).
func ncclThreads(p Protocol) int64 {
	if p == LL128 {
		return 640
	}
	return 512
}

func ncclThreadThreshold(a Algorithm, p Protocol, nRanks int) int64 {
	switch p {
	case LL:
		if a == Ring {
			return 8 * int64(nRanks)
		}
		return 8
	case LL128:
		return 8
	}
	return 64
}

// PartitionSpec describes what to split.
type PartitionSpec struct {
	Count    int64 // elements of the range cut over channels (allgather/reducescatter: one rank's block)
	ElemSize int   // bytes per element, >= 1
	// TrafficBytes is the message size NCCL's thresholds look at; 0 means
	// Count*ElemSize. Allgather and reducescatter pass NRanks*Count*ElemSize.
	TrafficBytes int64
	NRanks       int
	Algo         Algorithm
	Proto        Protocol
	MaxChannels  int   // channels available, >= 1
	ChunkBytes   int64 // 0: DefaultChunkBytes
	// KeepChannels skips NCCL's thread-threshold reduction (a test knob so
	// that small messages still spread over many channels); the 512-byte
	// floor per channel and the one-cell floor still apply.
	KeepChannels bool
}

// ChannelPart is one channel's contiguous slice of the range.
type ChannelPart struct {
	Channel int
	Off     int64 // first element
	Count   int64 // elements, > 0
}

// Partition is the result of PartitionMessage. All sizes are in elements.
type Partition struct {
	Parts      []ChannelPart // one per channel used, in channel order; empty for Count 0
	CellElems  int64         // elements per 16-byte cell (lcm(16, ElemSize)/ElemSize)
	GrainElems int64         // chunk alignment
	ChunkElems int64         // largest chunk per step, a multiple of GrainElems
}

// Channels is the number of channels used.
func (p Partition) Channels() int { return len(p.Parts) }

func gcd64(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// unitElems is the number of elements in the smallest whole number of
// elements that is a multiple of unitBytes bytes.
func unitElems(unitBytes int64, elemSize int) int64 {
	es := int64(elemSize)
	return unitBytes / gcd64(unitBytes, es)
}

func divUp64(a, b int64) int64 { return (a + b - 1) / b }

func roundUp64(a, b int64) int64 { return divUp64(a, b) * b }

// PartitionMessage splits s.Count elements over channels:
//
//  1. channels = MaxChannels, reduced by one while TrafficBytes <
//     channels × threads × threshold (NCCL's rule; threads 512, LL128 640;
//     threshold Simple 64, LL128 8, LL 8, ring LL 8×NRanks) unless
//     KeepChannels;
//  2. then reduced to at most TrafficBytes/512 (at least 1) and to at most
//     the number of 16-byte cells;
//  3. the cells are dealt out contiguously, the last channels getting one
//     cell more when they do not divide; the last channel's last cell may
//     be partial. For element sizes that divide 16 every channel then
//     carries at least 512 bytes of its own data when there are several.
//
// The chunk is ChunkBytes (or DefaultChunkBytes) in elements, rounded down
// to a multiple of the grain (GrainBytes in elements); a ChunkBytes below
// the grain is allowed (tests) and then becomes the grain, rounded to a
// whole cell.
func PartitionMessage(s PartitionSpec) (Partition, error) {
	if s.Count < 0 {
		return Partition{}, fmt.Errorf("gotree/algorithms: partition: negative count %d", s.Count)
	}
	if s.ElemSize < 1 {
		return Partition{}, fmt.Errorf("gotree/algorithms: partition: element size %d < 1", s.ElemSize)
	}
	if s.MaxChannels < 1 {
		return Partition{}, fmt.Errorf("gotree/algorithms: partition: %d channels < 1", s.MaxChannels)
	}
	if s.ChunkBytes < 0 {
		return Partition{}, fmt.Errorf("gotree/algorithms: partition: negative chunk size %d", s.ChunkBytes)
	}
	if s.Proto < LL || s.Proto > Simple {
		return Partition{}, fmt.Errorf("gotree/algorithms: partition: unknown protocol %v", s.Proto)
	}
	es := int64(s.ElemSize)
	p := Partition{
		CellElems:  unitElems(CellBytes, s.ElemSize),
		GrainElems: unitElems(GrainBytes(s.Proto), s.ElemSize),
	}
	chunkBytes := s.ChunkBytes
	if chunkBytes == 0 {
		chunkBytes = DefaultChunkBytes(s.Algo, s.Proto)
	}
	chunk := roundUp64(max(1, chunkBytes/es), p.CellElems)
	if chunk >= p.GrainElems {
		chunk = chunk / p.GrainElems * p.GrainElems
	} else {
		p.GrainElems = chunk
	}
	p.ChunkElems = chunk
	if s.Count == 0 {
		return p, nil
	}
	traffic := s.TrafficBytes
	if traffic <= 0 {
		traffic = s.Count * es
	}
	nc := int64(s.MaxChannels)
	if !s.KeepChannels {
		nt, th := ncclThreads(s.Proto), ncclThreadThreshold(s.Algo, s.Proto, max(1, s.NRanks))
		for nc >= 2 && traffic < nc*nt*th {
			nc--
		}
	}
	nc = min(nc, max(1, traffic/MinChannelBytes))
	cells := divUp64(s.Count, p.CellElems)
	nc = min(nc, cells)
	base, extra := cells/nc, cells%nc
	var cell int64
	for c := int64(0); c < nc; c++ {
		k := base
		if c >= nc-extra {
			k++
		}
		lo := cell * p.CellElems
		hi := min((cell+k)*p.CellElems, s.Count)
		p.Parts = append(p.Parts, ChannelPart{Channel: int(c), Off: lo, Count: hi - lo})
		cell += k
	}
	return p, nil
}
