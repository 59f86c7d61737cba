package algorithms

import (
	"math/rand/v2"
	"testing"
)

func TestPartitionTable(t *testing.T) {
	cases := []struct {
		name     string
		s        PartitionSpec
		channels int
		chunk    int64 // elements
		grain    int64
		first    ChannelPart
	}{
		{"zero", PartitionSpec{Count: 0, ElemSize: 4, NRanks: 4, Proto: Simple, MaxChannels: 8}, 0, 512 << 10, 128, ChannelPart{}},
		{"one byte", PartitionSpec{Count: 1, ElemSize: 1, NRanks: 4, Proto: Simple, MaxChannels: 8}, 1, 2 << 20, 512, ChannelPart{0, 0, 1}},
		// 1 MiB Simple: 1 MiB >= 32 × 512 threads × 64: all 32 channels.
		{"1MiB simple", PartitionSpec{Count: 1 << 18, ElemSize: 4, NRanks: 8, Proto: Simple, MaxChannels: 32}, 32, 512 << 10, 128, ChannelPart{0, 0, 1 << 13}},
		{"1MiB-4 simple", PartitionSpec{Count: 1<<18 - 1, ElemSize: 4, NRanks: 8, Proto: Simple, MaxChannels: 32}, 31, 512 << 10, 128, ChannelPart{0, 0, 8456}},
		// 100 KiB: 3 channels (3 × 32 KiB <= 100 KiB < 4 × 32 KiB).
		{"100KiB", PartitionSpec{Count: 102400, ElemSize: 1, NRanks: 2, Algo: Tree, Proto: Simple, MaxChannels: 16}, 3, 512 << 10, 512, ChannelPart{0, 0, 34128}},
		// LL128: 640 × 8 = 5120 bytes per channel.
		{"LL128 12KiB", PartitionSpec{Count: 3072, ElemSize: 4, NRanks: 2, Proto: LL128, MaxChannels: 16}, 2, 576000 / 4, 480, ChannelPart{0, 0, 1536}},
		// Ring LL: 512 × 8 × nranks.
		{"LL ring", PartitionSpec{Count: 65536, ElemSize: 1, NRanks: 4, Algo: Ring, Proto: LL, MaxChannels: 16}, 4, 32 << 10, 16, ChannelPart{0, 0, 16384}},
		{"LL tree", PartitionSpec{Count: 65536, ElemSize: 1, NRanks: 4, Algo: Tree, Proto: LL, MaxChannels: 16}, 16, 32 << 10, 16, ChannelPart{0, 0, 4096}},
		// Keep channels: only the 512-byte floor.
		{"keep", PartitionSpec{Count: 1000, ElemSize: 4, NRanks: 2, Proto: Simple, MaxChannels: 32, KeepChannels: true}, 7, 512 << 10, 128, ChannelPart{0, 0, 140}},
		// Traffic counts all ranks' blocks (allgather).
		{"traffic", PartitionSpec{Count: 100, ElemSize: 4, TrafficBytes: 64 * 400, NRanks: 64, Proto: Simple, MaxChannels: 32, KeepChannels: true}, 25, 512 << 10, 128, ChannelPart{0, 0, 4}},
		// Tiny chunk below the grain; odd element size.
		{"tiny chunk", PartitionSpec{Count: 10, ElemSize: 3, NRanks: 2, Proto: Simple, MaxChannels: 4, ChunkBytes: 20}, 1, 16, 16, ChannelPart{0, 0, 10}},
		{"complex128", PartitionSpec{Count: 3, ElemSize: 16, NRanks: 2, Proto: LL128, MaxChannels: 4, ChunkBytes: 5000}, 1, 240, 120, ChannelPart{0, 0, 3}},
	}
	for _, c := range cases {
		p, err := PartitionMessage(c.s)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var first ChannelPart
		if len(p.Parts) > 0 {
			first = p.Parts[0]
		}
		if p.Channels() != c.channels || p.ChunkElems != c.chunk || p.GrainElems != c.grain || first != c.first {
			t.Errorf("%s: %d channels chunk %d grain %d first %+v; want %d, %d, %d, %+v", c.name, p.Channels(), p.ChunkElems, p.GrainElems, first, c.channels, c.chunk, c.grain, c.first)
		}
	}
}

func TestPartitionProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	counts := []int64{0, 1, 2, 3, 7, 31, 127, 8191, 65537, 1<<31 - 1, 1 << 31, 1<<31 + 11, 1 << 40}
	for it := 0; it < 3000; it++ {
		s := PartitionSpec{
			Count:        counts[rng.IntN(len(counts))],
			ElemSize:     []int{1, 2, 3, 4, 8, 16}[rng.IntN(6)],
			NRanks:       1 + rng.IntN(64),
			Algo:         Algorithm(rng.IntN(2)),
			Proto:        Protocol(rng.IntN(3)),
			MaxChannels:  1 + rng.IntN(64),
			KeepChannels: rng.IntN(2) == 0,
		}
		if rng.IntN(3) == 0 {
			s.Count = rng.Int64N(1 << 24)
		}
		if rng.IntN(2) == 0 {
			s.ChunkBytes = 1 + rng.Int64N(1<<20)
		}
		p, err := PartitionMessage(s)
		if err != nil {
			t.Fatal(err)
		}
		es := int64(s.ElemSize)
		if p.ChunkElems < 1 || p.ChunkElems%p.GrainElems != 0 || (p.ChunkElems*es)%CellBytes != 0 {
			t.Fatalf("%+v: chunk %d grain %d", s, p.ChunkElems, p.GrainElems)
		}
		if p.GrainElems == unitElems(GrainBytes(s.Proto), s.ElemSize) && (p.GrainElems*es)%GrainBytes(s.Proto) != 0 {
			t.Fatalf("%+v: grain %d elements is not aligned", s, p.GrainElems)
		}
		if s.Count == 0 {
			if len(p.Parts) != 0 {
				t.Fatalf("%+v: parts for zero count", s)
			}
			continue
		}
		if p.Channels() < 1 || p.Channels() > s.MaxChannels {
			t.Fatalf("%+v: %d channels", s, p.Channels())
		}
		var next int64
		for i, cp := range p.Parts {
			if cp.Channel != i || cp.Off != next || cp.Count <= 0 || cp.Off%p.CellElems != 0 {
				t.Fatalf("%+v: part %d = %+v (next %d)", s, i, cp, next)
			}
			if p.Channels() > 1 && CellBytes%es == 0 && cp.Count*es < MinChannelBytes {
				t.Fatalf("%+v: part %d has %d bytes", s, i, cp.Count*es)
			}
			next += cp.Count
		}
		if next != s.Count {
			t.Fatalf("%+v: parts cover %d elements", s, next)
		}
	}
}

func TestPartitionErrors(t *testing.T) {
	for _, s := range []PartitionSpec{
		{Count: -1, ElemSize: 4, MaxChannels: 1},
		{Count: 1, ElemSize: 0, MaxChannels: 1},
		{Count: 1, ElemSize: 4, MaxChannels: 0},
		{Count: 1, ElemSize: 4, MaxChannels: 1, ChunkBytes: -1},
		{Count: 1, ElemSize: 4, MaxChannels: 1, Proto: 9},
	} {
		if _, err := PartitionMessage(s); err == nil {
			t.Errorf("%+v: no error", s)
		}
	}
}
