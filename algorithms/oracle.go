package algorithms

import (
	"fmt"
	"slices"
)

// RunOracle executes p for every rank in one process over in-memory
// buffers and returns each rank's output buffer. It is the reference every
// other executor is checked against, and it defines what a step does:
//
//   - Send: send Src[0:Count] to every peer in SendTo.
//   - Recv: write the message from RecvFrom[0] to Dst.
//   - RecvReduceSend / RecvReduceCopySend: fold left to right with
//     ReduceInto(acc, next, dtype, op) the messages of RecvFrom in list
//     order with Src[0:Count] inserted at position SrcAt (0: start from a
//     copy of Src), then (…CopySend) write acc to Dst, and send acc to
//     every peer in SendTo.
//   - RecvCopySend: write the message from RecvFrom[0] to Dst and forward
//     the same bytes to SendTo.
//   - Copy: copy Src to Dst (executors may skip it when both are the same
//     memory).
//   - Notify / Wait: a message without data to / from each peer.
//   - ReadReduceCopy: start from a copy of Src, reduce into it the same
//     range of each ReadFrom peer's buffers as they are at that moment,
//     in list order, and write it to Dst, and to the range Dst of each
//     WriteTo peer's buffers.
//   - PeerCopy: copy the range Src of ReadFrom[0]'s staging region to Dst.
//
// Staging regions (shared plans) start zeroed.
//
// Plans reduce Avg and PremulSum as Sum. After all steps, an executor calls
// Finalize(output, dtype, op, NRanks) once on each rank's output that holds
// a reduction: every rank for allreduce and reducescatter, the root for
// reduce. Premultiplication for PremulSum is the caller's business, before
// the plan runs.
//
// inputs[r] must hold the rank's input (BufferCounts elements of p.DType;
// for broadcast a non-root input may be nil). With inPlace the output
// aliases the input as in NCCL and PyTorch: the same buffer for allreduce,
// broadcast and reduce; for allgather the input is rank r's block of the
// output; for reducescatter the output is rank r's block of the input.
// Out of place, outputs start zeroed (a non-root reduce output stays so).
// The inputs are not modified.
func RunOracle(p *Plan, inputs [][]byte, inPlace bool) ([][]byte, error) {
	if err := validatePlan(p); err != nil {
		return nil, err
	}
	if !p.DType.Valid() {
		return nil, planErr("unknown dtype %v", p.DType)
	}
	reduces := p.Coll == AllReduce || p.Coll == Reduce || p.Coll == ReduceScatter
	if reduces {
		if err := Supports(p.Op, p.DType); err != nil {
			return nil, planErr("%v", err)
		}
	}
	if len(inputs) != p.NRanks {
		return nil, fmt.Errorf("gotree/algorithms: oracle: %d inputs for %d ranks", len(inputs), p.NRanks)
	}
	es := int64(p.DType.Size())
	inN, outN := p.BufferCounts()
	type rankBufs struct {
		in, out []byte
		stage   []byte
		inBase  int64 // bytes
		outBase int64
	}
	bufs := make([]rankBufs, p.NRanks)
	for r := range bufs {
		src := inputs[r]
		if src == nil && p.Coll == Broadcast && r != p.Root {
			src = make([]byte, inN*es)
		}
		if int64(len(src)) != inN*es {
			return nil, fmt.Errorf("gotree/algorithms: oracle: rank %d input has %d bytes, want %d", r, len(src), inN*es)
		}
		b := &bufs[r]
		b.stage = make([]byte, p.StageElems*es)
		switch {
		case !inPlace:
			b.in = append([]byte(nil), src...)
			b.out = make([]byte, outN*es)
		case p.Coll == AllGather:
			b.out = make([]byte, outN*es)
			b.inBase = int64(r) * p.Count * es
			copy(b.out[b.inBase:], src)
			b.in = b.out
		case p.Coll == ReduceScatter:
			b.in = append([]byte(nil), src...)
			b.out = b.in
			b.outBase = int64(r) * p.Count * es
		default:
			b.in = append([]byte(nil), src...)
			b.out = b.in
		}
	}
	slice := func(rank int, ref Ref, count int64) []byte {
		b := &bufs[rank]
		if ref.Buf == Stage {
			return b.stage[ref.Off*es : (ref.Off+count)*es]
		}
		if ref.Buf == Input {
			o := b.inBase + ref.Off*es
			return b.in[o : o+count*es]
		}
		o := b.outBase + ref.Off*es
		return b.out[o : o+count*es]
	}
	exec := func(ss *simStream, st *Step, got []*simMsg) ([]byte, error) {
		switch st.Prim {
		case Send:
			return append([]byte(nil), slice(ss.rank, st.Src, st.Count)...), nil
		case Recv:
			copy(slice(ss.rank, st.Dst, st.Count), got[0].data)
			return nil, nil
		case RecvCopySend:
			copy(slice(ss.rank, st.Dst, st.Count), got[0].data)
			return got[0].data, nil
		case Copy:
			copy(slice(ss.rank, st.Dst, st.Count), slice(ss.rank, st.Src, st.Count))
			return nil, nil
		case Notify, Wait:
			return nil, nil
		case PeerCopy:
			copy(slice(ss.rank, st.Dst, st.Count), slice(st.ReadFrom[0], st.PeerRange(), st.Count))
			return nil, nil
		case ReadReduceCopy:
			acc := append([]byte(nil), slice(ss.rank, st.Src, st.Count)...)
			for _, peer := range st.ReadFrom {
				ReduceInto(acc, slice(peer, st.PeerRange(), st.Count), p.DType, p.Op)
			}
			copy(slice(ss.rank, st.Dst, st.Count), acc)
			for _, peer := range st.WriteTo {
				copy(slice(peer, st.Dst, st.Count), acc)
			}
			return nil, nil
		case RecvReduceSend, RecvReduceCopySend:
			operands := make([][]byte, 0, len(got)+1)
			for _, m := range got {
				operands = append(operands, m.data)
			}
			operands = slices.Insert(operands, st.SrcAt, slice(ss.rank, st.Src, st.Count))
			acc := append([]byte(nil), operands[0]...)
			for _, o := range operands[1:] {
				ReduceInto(acc, o, p.DType, p.Op)
			}
			if st.Prim == RecvReduceCopySend {
				copy(slice(ss.rank, st.Dst, st.Count), acc)
			}
			return acc, nil
		}
		return nil, planErr("rank %d: unknown primitive %v", ss.rank, st.Prim)
	}
	sim := newSim(p, exec)
	if touchesPeers(p) {
		sim.race = &raceCheck{inPlace: inPlace, coll: p.Coll, count: p.Count}
	}
	if err := sim.run(); err != nil {
		return nil, err
	}
	outs := make([][]byte, p.NRanks)
	for r := range outs {
		b := &bufs[r]
		outs[r] = append([]byte(nil), b.out[b.outBase:b.outBase+outN*es]...)
		if reduces && (p.Coll != Reduce || r == p.Root) {
			Finalize(outs[r], p.DType, p.Op, p.NRanks)
		}
	}
	return outs, nil
}
