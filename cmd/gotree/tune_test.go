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
