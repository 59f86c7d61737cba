package algorithms

import (
	"fmt"
	"strconv"
	"strings"
)

// String prints the plan as text, one step per line:
//
//	plan allreduce ring nranks=2 count=8 dtype=int32 op=sum root=0 proto=Simple channels=1
//	rank 0
//	  channel 0
//	    stream 0
//	      Send               to 1 src in[4] n=4
//	      RecvReduceCopySend from 1 to 1 src in[0] dst out[0] n=4
//	      Recv               from 1 dst out[4] n=4
//
// Offsets and n are in elements. The format is for people and golden files;
// nothing parses it.
func (p *Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "plan %v %v nranks=%d count=%d dtype=%v op=%v root=%d proto=%v channels=%d\n",
		p.Coll, p.Algo, p.NRanks, p.Count, p.DType, p.Op, p.Root, p.Proto, p.Channels)
	for _, rp := range p.Ranks {
		fmt.Fprintf(&b, "rank %d\n", rp.Rank)
		for _, cp := range rp.Channels {
			fmt.Fprintf(&b, "  channel %d\n", cp.Channel)
			for si, st := range cp.Streams {
				fmt.Fprintf(&b, "    stream %d\n", si)
				for _, s := range st {
					b.WriteString("      ")
					b.WriteString(s.String())
					b.WriteByte('\n')
				}
			}
		}
	}
	return b.String()
}

func joinRanks(rs []int) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = strconv.Itoa(r)
	}
	return strings.Join(parts, ",")
}

// String prints one step: "RecvReduceSend from 3 to 1 src in[250] n=125";
// "src-at k" when the own operand is folded after the first k messages.
func (s Step) String() string {
	parts := []string{fmt.Sprintf("%-18s", s.Prim)}
	if len(s.RecvFrom) > 0 {
		parts = append(parts, "from "+joinRanks(s.RecvFrom))
	}
	if len(s.SendTo) > 0 {
		parts = append(parts, "to "+joinRanks(s.SendTo))
	}
	if len(s.ReadFrom) > 0 {
		parts = append(parts, "read "+joinRanks(s.ReadFrom))
	}
	if len(s.WriteTo) > 0 {
		parts = append(parts, "write "+joinRanks(s.WriteTo))
	}
	if s.Src.Buf != NoBuf {
		parts = append(parts, fmt.Sprintf("src %v[%d]", s.Src.Buf, s.Src.Off))
	}
	if s.PeerSrc.Buf != NoBuf {
		parts = append(parts, fmt.Sprintf("peers %v[%d]", s.PeerSrc.Buf, s.PeerSrc.Off))
	}
	if s.SrcAt != 0 {
		parts = append(parts, fmt.Sprintf("src-at %d", s.SrcAt))
	}
	if s.Dst.Buf != NoBuf {
		parts = append(parts, fmt.Sprintf("dst %v[%d]", s.Dst.Buf, s.Dst.Off))
	}
	parts = append(parts, fmt.Sprintf("n=%d", s.Count))
	return strings.Join(parts, " ")
}

// PlanStats counts one rank's traffic in a plan, in elements.
type PlanStats struct {
	Steps     int
	Sent      int64 // elements sent (one count per destination)
	Received  int64
	Reduced   int64 // elements combined by a reduction (one per received message)
	ReadLocal int64 // elements read from the rank's own buffers
	ReadPeer  int64 // elements read from peers' buffers or staging regions (ReadFrom of ReadReduceCopy, ReadCopy, PeerCopy)
	WritePeer int64 // elements written to peers' buffers (ReadReduceCopy's WriteTo)
	Written   int64 // elements written to the rank's own buffers
}

// Stats returns rank r's PlanStats.
func (p *Plan) Stats(r int) PlanStats {
	var s PlanStats
	for _, cp := range p.Ranks[r].Channels {
		for _, st := range cp.Streams {
			for _, step := range st {
				s.Steps++
				n := step.Count
				if step.Prim == Notify || step.Prim == Wait || step.Prim == Offer {
					continue // one descriptor message per peer, no elements
				}
				s.ReadPeer += n * int64(len(step.ReadFrom))
				s.WritePeer += n * int64(len(step.WriteTo))
				if step.Prim == ReadReduceCopy {
					s.Reduced += n * int64(len(step.ReadFrom))
				}
				s.Sent += n * int64(len(step.SendTo))
				s.Received += n * int64(len(step.RecvFrom))
				if step.Prim == RecvReduceSend || step.Prim == RecvReduceCopySend {
					s.Reduced += n * int64(len(step.RecvFrom))
				}
				if step.Src.Buf != NoBuf && step.Prim != PeerCopy { // a PeerCopy's Src is the peer's
					s.ReadLocal += n
				}
				if step.Dst.Buf != NoBuf {
					s.Written += n
				}
			}
		}
	}
	return s
}
