package algorithms

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestPredictHandComputed checks the model against times worked out by
// hand from NCCL's constants (not from the code's tables).
func TestPredictHandComputed(t *testing.T) {
	tu := DefaultTuning()
	tu.Local = nil // the α-β formula alone; the built-in local entries are tested below
	oneNode4 := CostTopo{NRanks: 4, NNodes: 1, RanksPerNode: 4, Intra: NVLink, Inter: Net, Channels: 2}
	twoNodes8 := CostTopo{NRanks: 8, NNodes: 2, RanksPerNode: 4, Intra: NVLink, Inter: Net, Channels: 2}
	shm4 := CostTopo{NRanks: 4, NNodes: 1, RanksPerNode: 4, Intra: Shm, Inter: TCP, Channels: 2}
	tcp2 := CostTopo{NRanks: 2, NNodes: 2, RanksPerNode: 1, Intra: Shm, Inter: TCP, Channels: 2}
	for _, tc := range []struct {
		name  string
		topo  CostTopo
		coll  Collective
		algo  Algorithm
		proto Protocol
		bytes int64
		ch    int
		want  float64 // µs
	}{
		// 4-rank ring, Simple, NVLink: 6 hops of 3.4 µs after 8.4 µs;
		// 2 channels × 20.6 GB/s bus, algbw = bus × 4/6.
		{"ring4 nvlink 1MiB", oneNode4, AllReduce, Ring, Simple, 1 << 20, 2, 8.4 + 6*3.4 + 1048576/(1e3*41.2*4/6)},
		// Same with LL: 0.6 µs hops after 6.6 µs, half the bandwidth.
		{"ring4 nvlink LL 4KiB", oneNode4, AllReduce, Ring, LL, 4096, 1, 6.6 + 6*0.6 + 4096/(1e3*10.3*4/6)},
		// Tree in one node of 4: a chain of 3 hops up and 3 down at 28 µs.
		{"tree4 nvlink", oneNode4, AllReduce, Tree, Simple, 1 << 20, 2, 8.4 + 2*3*28 + 1048576/(1e3*41.2*0.92/2)},
		// Two nodes of 4: ring 14 steps, 4 of them over the network
		// (2.7/4/14 µs), bus limited by the NIC (2 × 12.5 GB/s).
		{"ring8 2 nodes", twoNodes8, AllReduce, Ring, Simple, 1 << 20, 2, 8.4 + 10*3.4 + 4*14 + 1048576/(1e3*25*8/14)},
		// Tree over 2 nodes: 2 × (3 intra + log2(2) inter) hops at 28 µs.
		{"tree8 2 nodes", twoNodes8, AllReduce, Tree, Simple, 1 << 20, 2, 8.4 + 2*(3*28+28) + 1048576/(1e3*25*0.92/2)},
		// Allgather ring on 4: 3 steps, algbw = bus × 4/3.
		{"allgather4", oneNode4, AllGather, Ring, Simple, 1 << 20, 2, 8.4 + 3*3.4 + 1048576/(1e3*41.2*4/3)},
		// shm with 4 ranks on 2 cores: base, hops and bandwidth scaled by 2.
		{"shm4 oversubscribed", shm4, AllReduce, Ring, Simple, 1 << 20, 2, 0.5*2 + 6*1*2 + 1048576/(1e3*(3.0/2)*4/6)},
		// Halving-doubling on 4 ranks: 2·log2(4) = 4 hops; a rank moves
		// 2·3/4 of the message, as in the ring, so algbw = bus × 4/6.
		{"hd4 oversubscribed", shm4, AllReduce, HalvingDoubling, Simple, 1 << 20, 1, 0.5*2 + 4*1*2 + 1048576/(1e3*(2.5/2)*4/6)},
		// On 3 ranks: one fold (2 more hops) and the 2-rank exchange; a
		// rank moves 1/2 + 1/2 + 2 = 3 messages: algbw = bus / 3.
		{"hd3", CostTopo{NRanks: 3, NNodes: 1, RanksPerNode: 3, Intra: Shm, Inter: TCP, Channels: 1}, AllReduce, HalvingDoubling, Simple, 1 << 20, 1,
			0.5*1.5 + 4*1*1.5 + 1048576/(1e3*(2.5/1.5)/3)},
		// Allgather and reduce-scatter by halving-doubling on 4 ranks:
		// log2(4) = 2 hops at the ring's constants (one fewer than the
		// ring's 3), a rank moves 3/4 of the message: algbw = bus × 4/3.
		{"hd4 allgather", shm4, AllGather, HalvingDoubling, Simple, 1 << 20, 1, 0.5*2 + 2*1*2 + 1048576/(1e3*(3.0/2)*4/3)},
		{"hd4 reducescatter", shm4, ReduceScatter, HalvingDoubling, Simple, 1 << 20, 1, 0.5*2 + 2*1*2 + 1048576/(1e3*(3.0/2)*4/3)},
		{"ring4 reducescatter", shm4, ReduceScatter, Ring, Simple, 1 << 20, 1, 0.5*2 + 3*1*2 + 1048576/(1e3*(3.0/2)*4/3)},
		// Two single-rank nodes over tcp: base and 2 hops of tcp.
		{"tcp2", tcp2, AllReduce, Ring, Simple, 1 << 20, 1, 0.5 + 2*16.5 + 1048576/(1e3*1.6*2/2)},
		{"tcp2 tree", tcp2, AllReduce, Tree, Simple, 1 << 20, 1, 0.5 + 2*22.6 + 1048576/(1e3*1.6*0.92/2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tu.Predict(tc.coll, tc.algo, tc.proto, tc.topo, tc.bytes, tc.ch)
			if err != nil {
				t.Fatal(err)
			}
			if !near(got.TimeUs, tc.want) {
				t.Errorf("time %.6f us, want %.6f (%v)", got.TimeUs, tc.want, got)
			}
		})
	}
}

func TestPredictUnsupported(t *testing.T) {
	tu := DefaultTuning()
	shm := CostTopo{NRanks: 2, NNodes: 1, RanksPerNode: 2, Intra: Shm, Inter: TCP, Channels: 2}
	if _, err := tu.Predict(AllReduce, Ring, LL, shm, 8, 1); !errors.Is(err, ErrAlgoNotSupported) {
		t.Errorf("LL over shm: %v, want ErrAlgoNotSupported", err)
	}
	if _, err := tu.Predict(AllGather, Tree, Simple, shm, 8, 1); !errors.Is(err, ErrAlgoNotSupported) {
		t.Errorf("tree allgather: %v, want ErrAlgoNotSupported", err)
	}
	tcp3 := CostTopo{NRanks: 3, NNodes: 3, RanksPerNode: 1, Intra: Shm, Inter: TCP, Channels: 1}
	if _, err := tu.Predict(ReduceScatter, HalvingDoubling, Simple, tcp3, 8, 1); !errors.Is(err, ErrAlgoNotSupported) {
		t.Errorf("hd reducescatter across 3 nodes: %v, want ErrAlgoNotSupported", err)
	}
	if _, err := tu.Predict(Broadcast, HalvingDoubling, Simple, shm, 8, 1); !errors.Is(err, ErrAlgoNotSupported) {
		t.Errorf("hd broadcast: %v, want ErrAlgoNotSupported", err)
	}
	if _, err := tu.Predict(AllReduce, Ring, Simple, CostTopo{}, 8, 1); err == nil {
		t.Error("empty topology accepted")
	}
}

func TestChooseCrossoverNVLink(t *testing.T) {
	tu := DefaultTuning()
	// One node of 8 GPUs: LL ring for tiny messages, Simple ring for large.
	topo := CostTopo{NRanks: 8, NNodes: 1, RanksPerNode: 8, Intra: NVLink, Inter: Net, Channels: 16}
	small, err := tu.Choose(AllReduce, topo, 1024, Constraints{})
	if err != nil || small.Algo != Ring || small.Proto != LL {
		t.Errorf("1 KiB: %v %v, want ring/LL", small, err)
	}
	large, err := tu.Choose(AllReduce, topo, 1<<30, Constraints{})
	if err != nil || large.Algo != Ring || large.Proto != Simple {
		t.Errorf("1 GiB: %v %v, want ring/Simple", large, err)
	}
	// Many nodes of 8: tree's log2 latency wins for small messages.
	topo = CostTopo{NRanks: 8 * 256, NNodes: 256, RanksPerNode: 8, Intra: NVLink, Inter: Net, Channels: 16}
	small, err = tu.Choose(AllReduce, topo, 1024, Constraints{})
	if err != nil || small.Algo != Tree {
		t.Errorf("256 nodes 1 KiB: %v %v, want tree", small, err)
	}
	// Constraints: only Simple, only tree.
	pr, err := tu.Choose(AllReduce, topo, 1024, Constraints{Algos: 1 << Tree, Protos: 1 << Simple})
	if err != nil || pr.Algo != Tree || pr.Proto != Simple {
		t.Errorf("forced tree/Simple: %v %v", pr, err)
	}
	// MinChannels raises the channel count of a small message.
	pr, err = tu.Choose(AllReduce, topo, 1<<20, Constraints{Protos: 1 << Simple, MinChannels: 8})
	if err != nil || pr.Channels < 8 {
		t.Errorf("min channels 8: %v %v", pr, err)
	}
	pr, err = tu.Choose(AllReduce, topo, 1<<30, Constraints{Protos: 1 << Simple, MaxChannels: 2})
	if err != nil || pr.Channels != 2 {
		t.Errorf("max channels 2: %v %v", pr, err)
	}
	if _, err := tu.Choose(AllGather, topo, 8, Constraints{Algos: 1 << Tree}); !errors.Is(err, ErrNoChoice) {
		t.Errorf("tree-only allgather: %v, want ErrNoChoice", err)
	}
}

func TestChooseDeterministic(t *testing.T) {
	tu := DefaultTuning()
	topo := CostTopo{NRanks: 3, NNodes: 1, RanksPerNode: 3, Intra: Shm, Inter: TCP, Channels: 2}
	var sizes []int64
	for s := int64(4); s <= 1<<30; s *= 2 {
		sizes = append(sizes, s)
	}
	a, err := tu.Crossovers(AllReduce, topo, sizes, Constraints{Protos: 1 << Simple})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		b, _ := tu.Crossovers(AllReduce, topo, sizes, Constraints{Protos: 1 << Simple})
		if len(a) != len(b) {
			t.Fatal("crossovers differ between runs")
		}
		for k := range a {
			if a[k] != b[k] {
				t.Fatal("crossovers differ between runs")
			}
		}
	}
	if a[0].From != 4 || a[len(a)-1].To != 1<<30 {
		t.Errorf("crossovers do not cover the sizes: %+v", a)
	}
}

func TestChannelsForMatchesPartition(t *testing.T) {
	for _, bytes := range []int64{4, 512, 4096, 32 << 10, 64 << 10, 65 << 10, 1 << 20, 64 << 20} {
		for _, a := range []Algorithm{Ring, Tree} {
			for _, p := range []Protocol{LL, LL128, Simple} {
				part, err := PartitionMessage(PartitionSpec{Count: bytes / 4, ElemSize: 4, NRanks: 4, Algo: a, Proto: p, MaxChannels: 8})
				if err != nil {
					t.Fatal(err)
				}
				if got := ChannelsFor(a, p, 4, bytes, 8); got != part.Channels() {
					t.Errorf("%v/%v %d B: ChannelsFor %d, PartitionMessage %d", a, p, bytes, got, part.Channels())
				}
			}
		}
	}
}

// The built-in calibrations of 3 and 4 ranks apply on 2 cores only.
func TestBuiltinLocalCores(t *testing.T) {
	shm4 := CostTopo{NRanks: 4, NNodes: 1, RanksPerNode: 4, Intra: Shm, Inter: TCP, Channels: 1}
	tu := DefaultTuning()
	require.NotEmpty(t, tu.Local)
	for _, l := range tu.Local {
		require.Equal(t, 2, l.Cores, "built-in entry for %d ranks", l.RanksPerNode)
	}
	tu.Cores = 16
	got, err := tu.Predict(AllReduce, Ring, Simple, shm4, 1<<20, 1)
	require.NoError(t, err)
	want := 0.5 + 6*1 + 1048576/(1e3*3*4/6.0) // not oversubscribed, no local entry
	require.InDelta(t, want, got.TimeUs, 1e-9)
	tu.Cores = 2
	local, err := tu.Predict(AllReduce, Ring, Simple, shm4, 1<<20, 1)
	require.NoError(t, err)
	lc, ok := tu.cost(Shm, 4, 1)
	require.True(t, ok)
	wantLocal := (lc.BaseUs[Ring][Simple] + 6*lc.HopUs[Ring][Simple] + 1048576/(1e3*lc.BusGBps[Ring][Simple]*4/6.0)) * lc.Correction.At(Ring, Simple, 1<<20)
	require.InDelta(t, wantLocal, local.TimeUs, 1e-9)
	// The tree has its own built-in entry too: chain hops 2(k-1), half the
	// bus bandwidth; in place its in-place factor as well.
	require.Positive(t, lc.BusGBps[Tree][Simple])
	tree, err := tu.PredictPlaced(AllReduce, Tree, Simple, shm4, 1<<20, 1, true)
	require.NoError(t, err)
	wantTree := (lc.BaseUs[Tree][Simple] + 6*lc.HopUs[Tree][Simple] + 1048576/(1e3*lc.BusGBps[Tree][Simple]*0.5)) *
		lc.Correction.At(Tree, Simple, 1<<20) * lc.InPlace.At(Tree, Simple, 1<<20)
	require.InDelta(t, wantTree, tree.TimeUs, 1e-9)
	// Without the local tree, the tree keeps the main shm entry,
	// oversubscription included (4 ranks on 2 cores).
	lc.BusGBps[Tree] = [NumProtocols]float64{}
	tree, err = tu.Predict(AllReduce, Tree, Simple, shm4, 1<<20, 1)
	require.NoError(t, err)
	require.InDelta(t, 0.5*2+2*3*2*2+1048576/(1e3*(3.5/2)*0.5), tree.TimeUs, 1e-9)
	// A tuning file's local entries replace the built-in ones.
	fromFile, err := ParseTuning([]byte(`{"version": 1, "cores": 2}`))
	require.NoError(t, err)
	require.Empty(t, fromFile.Local)
	// A second copy is independent of the first.
	tu.Local[0].RanksPerNode = 99
	require.NotEqual(t, 99, DefaultTuning().Local[0].RanksPerNode)
}

func TestParseSpecs(t *testing.T) {
	for _, tc := range []struct {
		spec string
		coll Collective
		want AlgoSet
		err  string
	}{
		{"", AllReduce, AllAlgos, ""},
		{"auto", AllReduce, AllAlgos, ""},
		{"ring", AllReduce, 1 << Ring, ""},
		{"Tree", AllReduce, 1 << Tree, ""},
		{"ring,tree", AllReduce, 1<<Ring | 1<<Tree, ""},
		{"ring,tree,hd,direct,oneshot,shared", AllReduce, AllAlgos, ""},
		{"ring,tree,hd,direct,oneshot", AllReduce, AllAlgos &^ (1 << Shared), ""},
		{"shared", AllReduce, 1 << Shared, ""},
		{"ring,tree,hd,direct", AllReduce, AllAlgos &^ (1<<OneShot | 1<<Shared), ""},
		{"ring,tree,hd", AllReduce, AllAlgos &^ (1<<Direct | 1<<OneShot | 1<<Shared), ""},
		{"oneshot", AllReduce, 1 << OneShot, ""},
		{"direct", AllReduce, 1 << Direct, ""},
		{"HD", AllReduce, 1 << HalvingDoubling, ""},
		{"^tree", AllReduce, 1<<Ring | 1<<HalvingDoubling | 1<<Direct | 1<<OneShot | 1<<Shared, ""},
		{"^ring,hd", AllReduce, 1<<Tree | 1<<Direct | 1<<OneShot | 1<<Shared, ""},
		{"^ring,hd,direct", AllReduce, 1<<Tree | 1<<OneShot | 1<<Shared, ""},
		{"^ring,hd,direct,oneshot", AllReduce, 1<<Tree | 1<<Shared, ""},
		{"^ring,hd,direct,oneshot,shared", AllReduce, 1 << Tree, ""},
		{"tree,nvls", AllReduce, 1 << Tree, ""},
		{"allreduce:tree;allgather:ring", AllReduce, 1 << Tree, ""},
		{"allreduce:tree;allgather:ring", AllGather, 1 << Ring, ""},
		{"allreduce:tree;allgather:ring", Broadcast, AllAlgos, ""},
		{"allreduce:^ring", AllReduce, 1<<Tree | 1<<HalvingDoubling | 1<<Direct | 1<<OneShot | 1<<Shared, ""},
		{"bogus", AllReduce, 0, `unknown algorithm "bogus" (want one of ring, tree, hd, direct, oneshot, shared, auto;`},
		{"^ring,tree,hd,direct,oneshot,shared", AllReduce, 0, "nothing"},
		{"nvls", AllReduce, 0, "nothing"},
		{"allreduce", AllReduce, AllAlgos, "unknown algorithm"},
		{"allreduce:tree;bogus:ring", AllReduce, 0, "unknown collective"},
	} {
		got, err := ParseAlgoSpec(tc.spec, tc.coll)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseAlgoSpec(%q, %v) = %v, %v; want error %q", tc.spec, tc.coll, got, err, tc.err)
			}
		case err != nil || got != tc.want:
			t.Errorf("ParseAlgoSpec(%q, %v) = %b, %v; want %b", tc.spec, tc.coll, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		spec string
		want ProtoSet
		err  bool
	}{
		{"", AllProtos, false},
		{"Simple", 1 << Simple, false},
		{"LL,LL128", 1<<LL | 1<<LL128, false},
		{"^LL128", 1<<LL | 1<<Simple, false},
		{"allreduce:simple", 1 << Simple, false},
		{"LL256", 0, true},
	} {
		got, err := ParseProtoSpec(tc.spec, AllReduce)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("ParseProtoSpec(%q) = %b, %v; want %b (error %v)", tc.spec, got, err, tc.want, tc.err)
		}
	}
	if err := CheckSpecs("allreduce:tree;allgather:ring", "^LL"); err != nil {
		t.Error(err)
	}
	if err := CheckSpecs("", "bogus"); err == nil {
		t.Error("bad protocol accepted")
	}
}

func TestTuningFileRoundTrip(t *testing.T) {
	tu := DefaultTuning()
	tu.Source, tu.Cores = "test", 8
	tu.Transports[Shm].HopUs[Ring][Simple] = 3.25
	tu.Transports[TCP].BusGBps[Tree][Simple] = 0.75
	tu.Transports[Shm].Correction[Tree][Simple][12] = 1.25
	local := tu.Transports[Shm]
	local.HopUs[Ring][Simple] = 40
	local.InPlace[Direct][Simple][23] = 0.6
	net3 := tu.Transports[TCP]
	net3.HopUs[Ring][Simple] = 120
	tu.Local = []LocalCost{{Transport: Shm, RanksPerNode: 4, Cost: local}, {Transport: TCP, RanksPerNode: 1, Nodes: 3, Cost: net3}}
	data, err := MarshalTuning(tu, []Transport{Shm, TCP}, map[string]int{"runs": 3})
	if err != nil {
		t.Fatal(err)
	}
	again, err := MarshalTuning(tu, []Transport{Shm, TCP}, map[string]int{"runs": 3})
	if err != nil || string(again) != string(data) {
		t.Fatal("MarshalTuning is not deterministic")
	}
	got, err := ParseTuning(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Cores != 8 || got.Source != "test" || !reflect.DeepEqual(got, tu) {
		t.Errorf("round trip changed the tuning:\n got %+v\nwant %+v", got, tu)
	}
	for _, bad := range []string{
		`{"version": 2, "transports": {}}`,
		`{"version": 1, "transports": {"warp": {}}}`,
		`{"version": 1, "transports": {"shm": {"hop_us": {"ring": {"Fast": 1}}}}}`,
		`{"version": 1, "transports": {"shm": {"hop_us": {"ring": {"Simple": -1}}}}}`,
		`{"version": 1, "bogus": 1}`,
		`{"version": 1, "transports": {"shm": {"correction": {"ring": {"Simple": {"x": 1}}}}}}`,
		`{"version": 1, "transports": {"shm": {"correction": {"ring": {"Simple": {"3": 0}}}}}}`,
		`{"version": 1, "transports": {"shm": {"in_place": {"direct": {"Simple": {"41": 1}}}}}}`,
		`{"version": 1, "transports": {"shm": {"in_place": {"fast": {"Simple": {"3": 1}}}}}}`,
		`{"version": 1, "transports": {}, "local": [{"transport": "shm", "ranks_per_node": 0}]}`,
		`{"version": 1, "transports": {}, "local": [{"transport": "tcp", "ranks_per_node": 1, "nodes": -1}]}`,
		`not json`,
	} {
		if _, err := ParseTuning([]byte(bad)); err == nil {
			t.Errorf("ParseTuning(%s) accepted", bad)
		}
	}
}

// TestCorrectionAndLocal: a local calibration replaces the transport (no
// oversubscription scaling) and corrections scale the time per log2
// bucket, the nearest bucket standing in for missing ones.
func TestCorrectionAndLocal(t *testing.T) {
	tu := DefaultTuning()
	shm4 := CostTopo{NRanks: 4, NNodes: 1, RanksPerNode: 4, Intra: Shm, Inter: TCP, Channels: 2}
	local := TransportCost{BaseUs: AlgoProto{{0, 0, 10}, {0, 0, 10}}, HopUs: AlgoProto{{0, 0, 5}, {0, 0, 5}}, BusGBps: AlgoProto{{0, 0, 1}, {0, 0, 1}}, SharesCPU: true}
	local.Correction[Ring][Simple][10] = 2 // 1 KiB .. 2 KiB-1
	local.Correction[Ring][Simple][20] = 0.5
	tu.Local = []LocalCost{{Transport: Shm, RanksPerNode: 4, Cost: local}}
	for _, tc := range []struct {
		bytes int64
		want  float64
	}{
		{1024, 2 * (10 + 6*5 + 1024/(1e3*1*4/6.0))},
		{16, 2 * (10 + 6*5 + 16/(1e3*1*4/6.0))},             // below: nearest bucket 10
		{1 << 16, 0.5 * (10 + 6*5 + 65536/(1e3*1*4/6.0))},   // bucket 16: bucket 20 (4 away) is nearer than 10 (6 away)
		{1 << 30, 0.5 * (10 + 6*5 + (1<<30)/(1e3*1*4/6.0))}, // above: nearest bucket 20
	} {
		got, err := tu.Predict(AllReduce, Ring, Simple, shm4, tc.bytes, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !near(got.TimeUs, tc.want) {
			t.Errorf("%d B: %.4f us, want %.4f", tc.bytes, got.TimeUs, tc.want)
		}
	}
	// In place the InPlace factor multiplies as well, with its own
	// nearest bucket; an algorithm without one is placed alike.
	tu.Local[0].Cost.InPlace[Ring][Simple][22] = 0.8
	for _, tc := range []struct {
		bytes   int64
		inPlace bool
		want    float64
	}{
		{1024, false, 2 * (10 + 6*5 + 1024/(1e3*1*4/6.0))},
		{1024, true, 0.8 * 2 * (10 + 6*5 + 1024/(1e3*1*4/6.0))},
		{1 << 30, true, 0.8 * 0.5 * (10 + 6*5 + (1<<30)/(1e3*1*4/6.0))},
	} {
		got, err := tu.PredictPlaced(AllReduce, Ring, Simple, shm4, tc.bytes, 1, tc.inPlace)
		require.NoError(t, err)
		require.Equal(t, tc.inPlace, got.InPlace)
		if !near(got.TimeUs, tc.want) {
			t.Errorf("%d B in place %v: %.4f us, want %.4f", tc.bytes, tc.inPlace, got.TimeUs, tc.want)
		}
	}
	tree, err := tu.Predict(AllReduce, Tree, Simple, shm4, 1<<20, 1)
	require.NoError(t, err)
	treeIn, err := tu.PredictPlaced(AllReduce, Tree, Simple, shm4, 1<<20, 1, true)
	require.NoError(t, err)
	require.Equal(t, tree.TimeUs, treeIn.TimeUs)
	// Choose follows the placement: an in-place factor that cuts the
	// tree's time at 1 MiB makes it the choice in place only.
	tu.Local[0].Cost.InPlace[Tree][Simple][20] = 0.2
	only := Constraints{Algos: 1<<Ring | 1<<Tree, Protos: 1 << Simple}
	ring, err := tu.Predict(AllReduce, Ring, Simple, shm4, 1<<20, 1)
	require.NoError(t, err)
	require.Less(t, ring.TimeUs, tree.TimeUs)
	require.Less(t, 0.2*tree.TimeUs, 0.8*ring.TimeUs, "the test's premise")
	out, err := tu.Choose(AllReduce, shm4, 1<<20, only)
	require.NoError(t, err)
	require.Equal(t, Ring, out.Algo)
	only.InPlace = true
	in, err := tu.Choose(AllReduce, shm4, 1<<20, only)
	require.NoError(t, err)
	require.Equal(t, Tree, in.Algo)
	require.True(t, in.InPlace)
	// 3 ranks per node: no local entry, the oversubscribed default.
	shm3 := CostTopo{NRanks: 3, NNodes: 1, RanksPerNode: 3, Intra: Shm, Inter: TCP, Channels: 2}
	got, _ := tu.Predict(AllReduce, Ring, Simple, shm3, 1<<20, 1)
	want := 1.5*0.5 + 4*1*1.5 + (1<<20)/(1e3*(3.0/1.5)*3/4.0)
	if !near(got.TimeUs, want) {
		t.Errorf("3 ranks: %.4f us, want %.4f", got.TimeUs, want)
	}
}

// TestLocalNodes: an entry for one node count applies to exactly that
// many nodes and wins over one for any count; other counts take the entry
// for any count, and without one the transport's main entry.
func TestLocalNodes(t *testing.T) {
	mk := func(base, hop, bus float64) TransportCost {
		return TransportCost{BaseUs: AlgoProto{{0, 0, base}}, HopUs: AlgoProto{{0, 0, hop}}, BusGBps: AlgoProto{{0, 0, bus}}}
	}
	tu := DefaultTuning()
	tu.Transports[TCP] = mk(1, 2, 1)
	tu.Local = []LocalCost{
		{Transport: TCP, RanksPerNode: 1, Cost: mk(20, 50, 0.2)},
		{Transport: TCP, RanksPerNode: 1, Nodes: 3, Cost: mk(10, 100, 0.1)},
	}
	const bytes = 1 << 20
	ring := func(n int, base, hop, bus float64) float64 {
		return base + float64(2*(n-1))*hop + bytes/(1e3*bus*float64(n)/float64(2*(n-1)))
	}
	predict := func(n int) float64 {
		topo := CostTopo{NRanks: n, NNodes: n, RanksPerNode: 1, Intra: Shm, Inter: TCP, Channels: 2}
		p, err := tu.Predict(AllReduce, Ring, Simple, topo, bytes, 1)
		require.NoError(t, err)
		return p.TimeUs
	}
	require.InDelta(t, ring(3, 10, 100, 0.1), predict(3), 1e-6, "3 nodes: the entry for 3 nodes")
	require.InDelta(t, ring(4, 20, 50, 0.2), predict(4), 1e-6, "4 nodes: the entry for any count")
	require.InDelta(t, ring(2, 20, 50, 0.2), predict(2), 1e-6, "2 nodes: the entry for any count")
	tu.Local = tu.Local[1:]
	require.InDelta(t, ring(4, 1, 2, 1), predict(4), 1e-6, "4 nodes without an entry for any count: the main entry")
	require.InDelta(t, ring(3, 10, 100, 0.1), predict(3), 1e-6)
	// The tree has no bandwidth in the entry for 3 nodes: the main entry.
	tu.Transports[TCP].BaseUs[Tree][Simple], tu.Transports[TCP].HopUs[Tree][Simple], tu.Transports[TCP].BusGBps[Tree][Simple] = 1, 2, 1
	topo := CostTopo{NRanks: 3, NNodes: 3, RanksPerNode: 1, Intra: Shm, Inter: TCP, Channels: 2}
	p, err := tu.Predict(AllReduce, Tree, Simple, topo, bytes, 1)
	require.NoError(t, err)
	require.InDelta(t, 1+2*1*2+bytes/(1e3*1*0.5), p.TimeUs, 1e-6)
}

// Candidates: Choose's prediction first, then every other allowed
// algorithm's best within span of it by predicted time, at most limit;
// one-shot stays out where Choose leaves it out; deterministic.
func TestCandidates(t *testing.T) {
	tu := DefaultTuning()
	for _, tc := range []struct {
		topo    CostTopo
		bytes   int64
		inPlace bool
	}{
		{CostTopo{NRanks: 4, NNodes: 1, RanksPerNode: 4, Intra: Shm, Inter: TCP, Channels: 2}, 4 << 20, true},
		{CostTopo{NRanks: 4, NNodes: 1, RanksPerNode: 4, Intra: Shm, Inter: TCP, Channels: 2}, 4096, false},
		{CostTopo{NRanks: 3, NNodes: 1, RanksPerNode: 3, Intra: Shm, Inter: TCP, Channels: 1}, 1 << 20, false},
		{CostTopo{NRanks: 8, NNodes: 2, RanksPerNode: 4, Intra: NVLink, Inter: Net, Channels: 2}, 1 << 30, false},
	} {
		cons := Constraints{Protos: 1 << Simple, InPlace: tc.inPlace}
		best, err := tu.Choose(AllReduce, tc.topo, tc.bytes, cons)
		require.NoError(t, err)
		all, err := tu.Candidates(AllReduce, tc.topo, tc.bytes, cons, 1e9, 0)
		require.NoError(t, err)
		require.Equal(t, best, all[0])
		seen := map[Algorithm]bool{}
		for i, p := range all {
			require.False(t, seen[p.Algo], "%v twice", p.Algo)
			seen[p.Algo] = true
			require.GreaterOrEqual(t, p.TimeUs, best.TimeUs)
			if i > 1 {
				require.GreaterOrEqual(t, p.TimeUs, all[i-1].TimeUs, "sorted by predicted time")
			}
			one := cons
			one.Algos = 1 << p.Algo
			alone, err := tu.Choose(AllReduce, tc.topo, tc.bytes, one)
			require.NoError(t, err)
			require.Equal(t, alone, p, "each algorithm's own best")
		}
		if tc.topo.RanksPerNode > tu.Cores && tc.topo.Intra == Shm {
			require.False(t, seen[OneShot], "one-shot is unknown at %d ranks on %d cores", tc.topo.RanksPerNode, tu.Cores)
		}
		require.Greater(t, len(all), 1, "%+v: more than one algorithm runs", tc.topo)
		// span and limit
		span := all[len(all)-1].TimeUs / best.TimeUs
		near, err := tu.Candidates(AllReduce, tc.topo, tc.bytes, cons, span*0.999, 0)
		require.NoError(t, err)
		require.Less(t, len(near), len(all), "the slowest is outside a span just below its ratio")
		two, err := tu.Candidates(AllReduce, tc.topo, tc.bytes, cons, 1e9, 2)
		require.NoError(t, err)
		require.Equal(t, all[:2], two)
		again, _ := tu.Candidates(AllReduce, tc.topo, tc.bytes, cons, 1e9, 0)
		require.Equal(t, all, again)
	}
	_, err := tu.Candidates(AllReduce, CostTopo{}, 8, Constraints{}, 4, 3)
	require.Error(t, err)
}

// AutotuneCandidates: the same list whatever the call's placement, the
// in-place choice first, both placements' choices in it, no repeats, at
// most limit, plus one-shot and shared last where the model cannot
// predict them.
func TestAutotuneCandidates(t *testing.T) {
	tu := DefaultTuning()
	require.Equal(t, 2, tu.Cores, "the built-in tuning is for 2 cores")
	for _, n := range []int{2, 3, 4} {
		topo := CostTopo{NRanks: n, NNodes: 1, RanksPerNode: n, Intra: Shm, Inter: TCP, Channels: 1}
		for b := int64(4); b <= 64<<20; b *= 4 {
			c := Constraints{Protos: 1 << Simple}
			got, err := tu.AutotuneCandidates(AllReduce, topo, b, c, AutotuneSpan, AutotuneMaxCandidates)
			require.NoError(t, err)
			c.InPlace = true
			again, err := tu.AutotuneCandidates(AllReduce, topo, b, c, AutotuneSpan, AutotuneMaxCandidates)
			require.NoError(t, err)
			require.Equal(t, got, again, "n=%d %d B: placement-independent", n, b)
			require.LessOrEqual(t, len(got), AutotuneMaxCandidates+2)
			// Shared plans, which no built-in entry calibrates: at every
			// size, last.
			require.Equal(t, Shared, got[len(got)-1].Algo, "n=%d %d B: shared measured, last", n, b)
			got = got[:len(got)-1]
			// One-shot where the model cannot predict it (3 and 4 ranks on
			// DefaultTuning's cores), always and last; never beyond its limit.
			unknown := OneShotUsable(n, 1, b) && tu.OneShotUnknown(topo, Simple)
			require.Equal(t, unknown, n > tu.Cores && b <= OneShotMaxBytes, "n=%d %d B", n, b)
			hasOneShot := slices.ContainsFunc(got, func(p Prediction) bool { return p.Algo == OneShot })
			if unknown {
				require.Equal(t, OneShot, got[len(got)-1].Algo, "n=%d %d B: one-shot measured, last", n, b)
			} else {
				require.LessOrEqual(t, len(got), AutotuneMaxCandidates)
				if !OneShotUsable(n, 1, b) {
					require.False(t, hasOneShot, "n=%d %d B", n, b)
				}
			}
			noOne := Constraints{Protos: 1 << Simple, Algos: AllAlgos &^ (1 << OneShot)}
			without, err := tu.AutotuneCandidates(AllReduce, topo, b, noOne, AutotuneSpan, AutotuneMaxCandidates)
			require.NoError(t, err)
			require.False(t, slices.ContainsFunc(without, func(p Prediction) bool { return p.Algo == OneShot }), "n=%d %d B: one-shot not allowed", n, b)
			in, err := tu.Choose(AllReduce, topo, b, c)
			require.NoError(t, err)
			require.Equal(t, in.Algo, got[0].Algo, "n=%d %d B: the in-place choice first", n, b)
			c.InPlace = false
			out, err := tu.Choose(AllReduce, topo, b, c)
			require.NoError(t, err)
			algos := map[Algorithm]bool{}
			for _, p := range got {
				require.False(t, algos[p.Algo], "n=%d %d B: %v twice", n, b, p.Algo)
				algos[p.Algo] = true
			}
			require.True(t, algos[out.Algo], "n=%d %d B: the out-of-place choice %v is measured too", n, b, out.Algo)
		}
	}
}

// On CPU links a call gives every channel but a tree's at least
// CPUChannelMinBytes, and autotuning measures the model's choice on the
// other number of channels: on one where the choice uses two (from 1 MiB,
// a tree from 64 KiB), on two where it uses one
// and the call has a quarter of CPUChannelMinBytes (128 KiB) or more;
// never for a forced algorithm, a set GOTREE_MIN_NCHANNELS or one channel
// at most, nor on GPU links, whose channels follow NCCL's rule alone.
func TestAutotuneCandidatesOtherChannels(t *testing.T) {
	tu := DefaultTuning()
	c := Constraints{Protos: 1 << Simple}
	variants := map[int]int{}
	for _, n := range []int{2, 3, 5} {
		across := CostTopo{NRanks: n, NNodes: n, RanksPerNode: 1, Intra: Shm, Inter: TCP, Channels: 2}
		within := CostTopo{NRanks: n, NNodes: 1, RanksPerNode: n, Intra: Shm, Inter: TCP, Channels: 2}
		for _, topo := range []CostTopo{across, within} {
			for b := int64(4); b <= 64<<20; b *= 4 {
				got, err := tu.AutotuneCandidates(AllReduce, topo, b, c, AutotuneSpan, AutotuneMaxCandidates)
				require.NoError(t, err)
				require.LessOrEqual(t, len(got), AutotuneMaxCandidates+2, "n=%d %d B", n, b)
				first := got[0]
				// NCCL's rule gives two channels from 64 KiB (Simple: 2
				// channels x 512 threads x 64 B); on CPU links only the
				// tree keeps them below 1 MiB.
				wantCh := 1
				if b >= 1<<20 || (first.Algo == Tree && b >= 64<<10) {
					wantCh = 2
				}
				require.Equal(t, wantCh, first.Channels, "n=%d nodes=%d %d B: the model's channels", n, topo.NNodes, b)
				others := 0
				for _, p := range got[1:] {
					if p.Algo != first.Algo {
						continue
					}
					others++
					require.Equal(t, 3-wantCh, p.Channels, "n=%d nodes=%d %d B", n, topo.NNodes, b)
					want, err := tu.PredictPlaced(AllReduce, first.Algo, Simple, topo, b, 3-wantCh, true)
					require.NoError(t, err)
					require.Equal(t, want, p)
				}
				require.Equal(t, wantCh == 2 || b >= 128<<10, others == 1, "n=%d nodes=%d %d B: %v on %d channels", n, topo.NNodes, b, first.Algo, first.Channels)
				variants[wantCh] += others
				labels := CandidateLabels(got)
				require.Len(t, labels, len(got))
				seen := map[string]bool{}
				for _, l := range labels {
					require.False(t, seen[l], "n=%d %d B: label %q twice in %v", n, b, l, labels)
					seen[l] = true
				}
				if others == 1 {
					require.Equal(t, fmt.Sprintf("%v/%dch", first.Algo, wantCh), labels[0])
					require.Contains(t, labels, fmt.Sprintf("%v/%dch", first.Algo, 3-wantCh))
				}
				// GOTREE_MIN_NCHANNELS=2 and GOTREE_MAX_NCHANNELS=1 fix the count.
				for _, fix := range []struct{ min, max, want int }{{2, 0, 2}, {0, 1, 1}} {
					cc := c
					cc.MinChannels, cc.MaxChannels = fix.min, fix.max
					fixed, err := tu.AutotuneCandidates(AllReduce, topo, b, cc, AutotuneSpan, AutotuneMaxCandidates)
					require.NoError(t, err)
					for _, p := range fixed {
						require.Equal(t, fix.want, p.Channels, "n=%d %d B: %+v", n, b, fix)
					}
				}
				for a := Ring; a <= HalvingDoubling; a++ {
					only := c
					only.Algos = 1 << a
					alone, err := tu.AutotuneCandidates(AllReduce, topo, b, only, AutotuneSpan, AutotuneMaxCandidates)
					if err != nil {
						continue // not for this many ranks or nodes
					}
					require.Len(t, alone, 1, "n=%d %d B: %v forced runs as planned", n, b, a)
				}
			}
		}
		gpu := CostTopo{NRanks: 8 * n, NNodes: n, RanksPerNode: 8, Intra: NVLink, Inter: Net, Channels: 2}
		for b := int64(4); b <= 64<<20; b *= 4 {
			got, err := tu.AutotuneCandidates(AllReduce, gpu, b, c, AutotuneSpan, AutotuneMaxCandidates)
			require.NoError(t, err)
			for _, p := range got {
				require.Equal(t, ChannelsFor(p.Algo, p.Proto, gpu.NRanks, b, 2), p.Channels, "GPU links, %d B", b)
			}
		}
	}
	require.Positive(t, variants[1], "sizes on one channel measure two")
	require.Positive(t, variants[2], "sizes on two channels measure one")
	require.Equal(t, []string{"ring", "tree"}, CandidateLabels([]Prediction{{Algo: Ring, Channels: 2}, {Algo: Tree, Channels: 2}}))
}

// CallChannels: NCCL's rule, and on CPU links at most one channel per
// CPUChannelMinBytes but for the tree.
func TestCallChannels(t *testing.T) {
	cpu := CostTopo{NRanks: 4, NNodes: 2, RanksPerNode: 2, Intra: Shm, Inter: TCP, Channels: 4}
	gpu := CostTopo{NRanks: 4, NNodes: 2, RanksPerNode: 2, Intra: NVLink, Inter: Net, Channels: 4}
	for _, b := range []int64{0, 1, 511, 64 << 10, 512<<10 - 1, 512 << 10, 1<<20 - 1, 1 << 20, 3 << 19, 2 << 20, 1 << 30} {
		nccl := ChannelsFor(Ring, Simple, 4, b, 4)
		require.Equal(t, nccl, gpu.CallChannels(Ring, Simple, b, 4), "%d B", b)
		want := nccl
		if lim := int(b / (512 << 10)); lim < want {
			want = max(1, lim)
		}
		require.Equal(t, want, cpu.CallChannels(Ring, Simple, b, 4), "%d B", b)
	}
	require.Equal(t, 1, cpu.CallChannels(Ring, Simple, 1<<20-1, 4))
	require.Equal(t, 2, cpu.CallChannels(Ring, Simple, 1<<20, 4))
	require.Equal(t, 4, cpu.CallChannels(Ring, Simple, 2<<20, 4))
	// The tree's channels carry its two trees: NCCL's rule alone.
	for _, b := range []int64{64 << 10, 256 << 10, 1 << 20} {
		require.Equal(t, ChannelsFor(Tree, Simple, 4, b, 4), cpu.CallChannels(Tree, Simple, b, 4), "tree, %d B", b)
		require.Greater(t, cpu.CallChannels(Tree, Simple, b, 4), 1, "tree, %d B", b)
	}
}

// Auto leaves Bruck's order (halving-doubling allgather and reduce-scatter
// on ranks that are not a power of two) out above BruckAutoMaxBytes, and
// keeps recursive halving/doubling (a power of two) at every size; forced,
// Bruck's order is chosen at any size.
func TestChooseBruckLimit(t *testing.T) {
	tu := DefaultTuning()
	for _, n := range []int{4, 5, 6, 7, 8} {
		topo := CostTopo{NRanks: n, NNodes: 1, RanksPerNode: n, Intra: Shm, Inter: TCP, Channels: 2}
		for _, coll := range []Collective{AllGather, ReduceScatter} {
			for _, bytes := range []int64{int64(n) * 1024, BruckAutoMaxBytes, BruckAutoMaxBytes + int64(n)*4, 4 << 20} {
				pr, err := tu.Choose(coll, topo, bytes, Constraints{Algos: 1<<Ring | 1<<HalvingDoubling})
				require.NoError(t, err)
				pow2 := n&(n-1) == 0
				want := HalvingDoubling // the model's pick: fewer hops, the ring's bytes
				if !pow2 && bytes > BruckAutoMaxBytes {
					want = Ring
				}
				require.Equal(t, want, pr.Algo, "%v on %d ranks, %d bytes", coll, n, bytes)
				require.Equal(t, !pow2 && bytes > BruckAutoMaxBytes, BruckLeftOut(coll, HalvingDoubling, n, bytes))
				forced, err := tu.Choose(coll, topo, bytes, Constraints{Algos: 1 << HalvingDoubling})
				require.NoError(t, err)
				require.Equal(t, HalvingDoubling, forced.Algo, "forced, %v on %d ranks, %d bytes", coll, n, bytes)
			}
		}
	}
	require.False(t, BruckLeftOut(AllReduce, HalvingDoubling, 6, 64<<20), "allreduce folds, not Bruck's order")
}
