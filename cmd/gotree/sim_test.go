package main

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type simOut struct {
	Model string   `json:"model"`
	Rows  []simRow `json:"rows"`
}

func runSimJSON(t *testing.T, args ...string) simOut {
	t.Helper()
	var out, errb bytes.Buffer
	require.Equal(t, 0, runSim(append(args, "--json"), &out, &errb), errb.String())
	var o simOut
	require.NoError(t, json.Unmarshal(out.Bytes(), &o))
	return o
}

// Past the token bucket a rate-limited ring is the link rate: every node
// sends 2(n-1)/n of the message, and tbf counts 1514 wire bytes per 1448
// bytes of TCP payload (MTU 1500, timestamps).
func TestSimPerfRateLimitedRing(t *testing.T) {
	const size = 16 << 20
	o := runSimJSON(t, "--perf", "--links", "cpu", "--tuning", "", "--nodes", "2,4", "--ranks-per-node", "1", "--algos", "ring",
		"--nic-rate", "1gbit", "--nic-burst", "1M", "--mtu", "1500", "-b", "16M", "-e", "16M")
	require.Len(t, o.Rows, 2)
	for _, r := range o.Rows {
		n := float64(r.Nodes)
		want := 2 * (n - 1) / n * size * 1514 / 1448 / 125e6 * 1e6 // µs
		assert.InDelta(t, want, r.TimeUs, 0.01*want, "%d nodes", r.Nodes)
		assert.InDelta(t, want, r.InTimeUs, 0.01*want, "%d nodes in place", r.Nodes)
		// Alone, with a full bucket, the first MiB passes at once.
		assert.Less(t, r.FirstUs, r.TimeUs)
		assert.Equal(t, 2, r.Channels)
	}
	assert.Contains(t, o.Model, "token bucket 1M")
}

// A message that fits the bucket is not slowed by the rate when the calls
// come rarely enough; when they come back to back the bucket empties.
func TestSimPerfBurst(t *testing.T) {
	o := runSimJSON(t, "--perf", "--links", "cpu", "--tuning", "", "--nodes", "2", "--ranks-per-node", "1", "--algos", "ring",
		"--nic-rate", "1gbit", "--nic-burst", "1M", "-b", "256K", "-e", "256K", "-n", "20", "-w", "50")
	require.Len(t, o.Rows, 1)
	r := o.Rows[0]
	rate := 256 << 10 / 125e6 * 1e6 // µs at the link rate
	assert.Less(t, r.FirstUs, 0.5*rate)
	assert.InDelta(t, rate, r.TimeUs, 0.02*rate)
}

// The simulator runs the communicator's channel count: on CPU links a ring
// gets one channel per 512 KiB, the tree NCCL's two from 64 KiB; GPU links
// follow NCCL's rule alone (both modes of gotree sim).
func TestSimCallChannels(t *testing.T) {
	want := map[string]map[int64]int{
		"ring": {64 << 10: 1, 256 << 10: 1, 1 << 20: 2, 4 << 20: 2},
		"tree": {64 << 10: 2, 256 << 10: 2, 1 << 20: 2, 4 << 20: 2},
	}
	for _, mode := range [][]string{{"--perf"}, nil} {
		o := runSimJSON(t, append(mode, "--links", "cpu", "--tuning", "", "--nodes", "2", "--ranks-per-node", "1", "--algos", "ring,tree",
			"-b", "64K", "-e", "4M", "-f", "4")...)
		require.Len(t, o.Rows, 8, "%v", mode)
		for _, r := range o.Rows {
			assert.Equal(t, want[r.Algo][r.Bytes], r.Channels, "%v %s %d B", mode, r.Algo, r.Bytes)
		}
	}
	o := runSimJSON(t, "--links", "gpu", "--nodes", "2", "--ranks-per-node", "8", "--algos", "ring", "-b", "256K", "-e", "256K")
	require.Len(t, o.Rows, 1)
	assert.Equal(t, 4, o.Rows[0].Channels, "GPU ring, 256 KiB: NCCL's rule on the graph's 4 channels")
}

func TestParseRate(t *testing.T) {
	for s, want := range map[string]float64{"1gbit": 0.125, "500mbit": 0.0625, "2Gbit": 0.25, "100mbps": 0.1} {
		got, err := parseRate(s)
		require.NoError(t, err, s)
		assert.InDelta(t, want, got, 1e-12, s)
	}
	_, err := parseRate("fast")
	assert.Error(t, err)
	assert.True(t, math.Abs(wireFactor(1500)-1514.0/1448) < 1e-12)
	assert.Zero(t, wireFactor(0))
}
