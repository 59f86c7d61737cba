package main

import (
	"math"
	"testing"

	"github.com/gotree/gotree/algorithms"
)

// TestFitRun fits synthetic α-β curves: 2-rank ring with 20 µs latency
// and 2 GB/s bus (algbw 2 GB/s), 4-rank tree with 50 µs and 3 GB/s bus
// (algbw 1.5 GB/s), base 5 µs.
func TestFitRun(t *testing.T) {
	for _, tc := range []struct {
		algo           algorithms.Algorithm
		k              int
		lat, bus, algb float64
		hop            float64
	}{
		{algorithms.Ring, 2, 20, 2, 2, (20 - 5) / 2.0},
		{algorithms.Tree, 4, 50, 3, 1.5, (50 - 5) / 6.0},
		{algorithms.Ring, 4, 40, 3, 3 * 4 / 6.0, (40 - 5) / 6.0},
	} {
		r := tuneRun{NRanks: tc.k, Algo: tc.algo.String()}
		for b := int64(4); b <= 64<<20; b *= 2 {
			r.Bytes = append(r.Bytes, b)
			t0 := tc.lat
			if b > 1<<10 {
				t0 += float64(b) / (tc.algb * 1e3)
			}
			r.MedianUs = append(r.MedianUs, t0)
		}
		f := fitRun(r, 5, tc.algo, localTopo(tc.k, algorithms.Shm))
		if math.Abs(f.LatencyUs-tc.lat) > 1e-9 || math.Abs(f.HopUs-tc.hop) > 1e-9 || math.Abs(f.BusGBps-tc.bus) > 1e-9 || f.BaseUs != 5 {
			t.Errorf("%v k=%d: fit %+v, want latency %v hop %v bus %v", tc.algo, tc.k, f, tc.lat, tc.hop, tc.bus)
		}
	}
}

func TestSmoothCorrections(t *testing.T) {
	var c [algorithms.CorrectionBuckets]float64
	c[2], c[3], c[4], c[10] = 1, 5, 1.2, 2
	smoothCorrections(&c)
	if c[2] != 3 || c[3] != 1.2 || c[4] != 3.1 || c[10] != 2 || c[5] != 0 {
		t.Errorf("smoothed %v", c[:11])
	}
}

// The in-place factors are the measured in-place over out-of-place
// medians per size bucket from inPlaceMinBytes up, smoothed, and 1 below;
// sizes without an in-place time get none, and an algorithm without
// in-place times keeps an empty table.
func TestFitInPlace(t *testing.T) {
	var tc algorithms.TransportCost
	fitInPlace(&tc, map[algorithms.Algorithm]tuneRun{
		algorithms.Direct: {Bytes: []int64{4096, 1 << 20, 2 << 20, 4 << 20, 8 << 20}, MedianUs: []float64{10, 100, 200, 400, 800}, InPlaceUs: []float64{5, 90, 100, 0, 400}},
		algorithms.Ring:   {Bytes: []int64{1 << 20}, MedianUs: []float64{100}},
	})
	d := tc.InPlace[algorithms.Direct][algorithms.Simple]
	// raw 0.9, 0.5, -, 0.5: bucket 20 = median(0.9, 0.5), 21 = median(0.9, 0.5), 23 alone
	if d[20] != 0.7 || d[21] != 0.7 || d[22] != 0 || d[23] != 0.5 || d[19] != 0 {
		t.Errorf("direct in place %v", d[18:25])
	}
	for k := 0; k < 18; k++ {
		if d[k] != 1 {
			t.Errorf("bucket %d below 256 KiB: %v, want 1", k, d[k])
		}
	}
	if tc.InPlace[algorithms.Ring][algorithms.Simple] != [algorithms.CorrectionBuckets]float64{} {
		t.Errorf("ring without in-place times got factors %v", tc.InPlace[algorithms.Ring][algorithms.Simple])
	}
}
