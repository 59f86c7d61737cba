package discover

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/topology"
)

type fakeNVML struct {
	gpus []GPU
	err  error
}

func (f fakeNVML) GPUs() ([]GPU, error) { return f.gpus, f.err }

// Three H100s on the fake tree, listed by NVML out of bus order with its
// 8-digit domain spelling: the two on socket 0 joined by 4 NVLinks, the
// third on socket 1.
func fakeGPUs() []GPU {
	return []GPU{
		{BusID: "00000000:85:00.0", UUID: "GPU-c", SM: 90, NUMA: -1},
		{BusID: "00000000:07:00.0", UUID: "GPU-b", SM: 90, NUMA: 0, MIG: true, NVLinks: []NVLink{
			{0, true, "00000000:06:00.0", RemoteGPU}, {1, true, "00000000:06:00.0", RemoteGPU},
			{2, true, "00000000:06:00.0", RemoteGPU}, {3, true, "00000000:06:00.0", RemoteGPU},
			{4, false, "00000000:06:00.0", RemoteGPU},
		}, P2P: map[string]bool{"00000000:06:00.0": true, "00000000:85:00.0": false}},
		{BusID: "00000000:06:00.0", UUID: "GPU-a", SM: 90, NUMA: 0, NVLinks: []NVLink{
			{0, true, "00000000:07:00.0", RemoteGPU}, {1, true, "00000000:07:00.0", RemoteGPU},
			{2, true, "00000000:07:00.0", RemoteGPU}, {3, true, "00000000:07:00.0", RemoteGPU},
			{5, true, "00000000:99:00.0", RemoteGPU}, // not visible: ignored
		}},
	}
}

// fakeRoot builds the fake machine of testdata/fake2s.txt (sysfs) and
// testdata/fake2s.cpuinfo (procfs) under a temporary directory.
func fakeRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	manifest, err := os.ReadFile(filepath.Join("testdata", "fake2s.txt"))
	require.NoError(t, err)
	for i, line := range strings.Split(string(manifest), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.SplitN(line, " ", 3)
		require.GreaterOrEqual(t, len(f), 2, "fake2s.txt:%d", i+1)
		p := filepath.Join(root, filepath.FromSlash(f[1]))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		switch f[0] {
		case "dir":
			require.NoError(t, os.MkdirAll(p, 0o755))
		case "file":
			content := ""
			if len(f) == 3 {
				content = f[2] + "\n"
			}
			require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		case "link":
			require.Len(t, f, 3, "fake2s.txt:%d", i+1)
			require.NoError(t, os.Symlink(f[2], p))
		default:
			t.Fatalf("fake2s.txt:%d: unknown entry %q", i+1, f[0])
		}
	}
	cpuinfo, err := os.ReadFile(filepath.Join("testdata", "fake2s.cpuinfo"))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(root, "proc"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "proc", "cpuinfo"), cpuinfo, 0o644))
	return root
}

func discoverFake(t *testing.T, nv NVML) (*topology.System, []string) {
	t.Helper()
	var logs []string
	root := fakeRoot(t)
	d := New(Options{SysRoot: filepath.Join(root, "sys"), ProcRoot: filepath.Join(root, "proc"), NVML: nv,
		Logf: func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }})
	s, err := d.Discover()
	require.NoError(t, err)
	return s, logs
}

func TestDiscoverFakeMachine(t *testing.T) {
	s, logs := discoverFake(t, fakeNVML{gpus: fakeGPUs()})
	require.Equal(t, 3, s.Count(topology.GPU))
	require.Equal(t, 2, s.Count(topology.CPU))
	require.Equal(t, 1, s.Count(topology.PCI)) // the switch, named by its upstream port
	require.Equal(t, 2, s.Count(topology.NIC)) // mlx5_0 and the virtio eth0
	require.Equal(t, 2, s.Count(topology.NET))

	gpus := s.GPUs()
	for i, want := range []string{"0000:06:00.0", "0000:07:00.0", "0000:85:00.0"} {
		n := s.Nodes[gpus[i]]
		assert.Equal(t, want, n.BusID)
		assert.Equal(t, i, n.GPU.Dev)
		assert.Equal(t, i, n.GPU.Rank)
		assert.True(t, n.GPU.GDR)
	}
	assert.Equal(t, "GPU-a", s.Nodes[gpus[0]].GPU.UUID)
	assert.True(t, s.Nodes[gpus[1]].GPU.MIG)

	cpu0 := s.Nodes[s.Find("cpu0")].CPU
	assert.Equal(t, "GenuineIntel", cpu0.Vendor)
	assert.Equal(t, 143, cpu0.Model)
	assert.Equal(t, "00000000,0000ffff", cpu0.Affinity)

	net0 := s.Nodes[s.Find("net0")].NET
	assert.Equal(t, "mlx5_0", net0.Name)
	assert.Equal(t, 400000, net0.SpeedMbps)
	assert.Equal(t, "ib0", net0.NetDev)
	assert.Equal(t, 1, net0.Port)
	assert.True(t, net0.GDR)
	net1 := s.Nodes[s.Find("net1")].NET
	assert.Equal(t, "eth0", net1.Name)
	assert.Equal(t, 10000, net1.SpeedMbps)

	l := s.Links[s.LinkBetween(gpus[0], gpus[1])]
	assert.Equal(t, 4, l.Count)
	assert.InDelta(t, 4*20.6, l.BW, 1e-9)

	ps := topology.ComputePaths(s)
	assert.Equal(t, topology.PathNVL, ps.Get(gpus[0], gpus[1]).Type)
	assert.Equal(t, topology.PathSYS, ps.Get(gpus[0], gpus[2]).Type)
	assert.Equal(t, topology.PathPIX, ps.Get(gpus[0], s.Find("net0")).Type)
	assert.Equal(t, topology.PathPHB, ps.Get(gpus[0], s.Find("net1")).Type)
	assert.Equal(t, 48.0, ps.Get(gpus[0], s.Find("net0")).BW)

	joined := strings.Join(logs, "\n")
	assert.Contains(t, joined, "INFO topology: GPU 0000:07:00.0 (GPU-b) has MIG enabled")
	assert.Contains(t, joined, "cannot read from GPU 00000000:85:00.0 by P2P")

	r, err := topology.Search(s, topology.SearchOptions{Pattern: topology.PatternRing})
	require.NoError(t, err)
	assert.Equal(t, 3, len(r.Orders[0]))

	// What discovery finds survives a dump and a reload.
	var b bytes.Buffer
	require.NoError(t, topology.WriteJSON(&b, s))
	s2, err := topology.ReadJSON(bytes.NewReader(b.Bytes()))
	require.NoError(t, err)
	var b2 bytes.Buffer
	require.NoError(t, topology.WriteJSON(&b2, s2))
	assert.Equal(t, b.String(), b2.String())
}

func TestDiscoverWithoutNVML(t *testing.T) {
	for _, nv := range []NVML{fakeNVML{err: ErrNoNVML}, fakeNVML{}, fakeNVML{err: errors.New("driver mismatch")}} {
		s, logs := discoverFake(t, nv)
		assert.Zero(t, s.Count(topology.GPU))
		assert.Equal(t, 2, s.Count(topology.CPU))
		assert.Equal(t, 2, s.Count(topology.NIC))
		require.NotEmpty(t, logs)
		assert.True(t, strings.HasPrefix(logs[0], "INFO topology: "), logs[0])
		assert.Contains(t, logs[0], "CPUs, NUMA nodes and NICs only")
		r, err := topology.Search(s, topology.SearchOptions{})
		require.NoError(t, err)
		assert.Zero(t, r.Channels)
	}
}

// The real machine: whatever it has, discovery must succeed (this one has
// no GPU and no NVML library).
func TestDiscoverThisMachine(t *testing.T) {
	var logs []string
	s, err := New(Options{Logf: func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }}).Discover()
	require.NoError(t, err)
	assert.Positive(t, s.Count(topology.CPU))
	t.Logf("this machine: %d GPUs, %d CPUs, %d NICs; %s", s.Count(topology.GPU), s.Count(topology.CPU), s.Count(topology.NIC), strings.Join(logs, "; "))
}

func TestRateAndBusID(t *testing.T) {
	assert.Equal(t, 100000, rateMbps("100 Gb/sec (4X EDR)"))
	assert.Equal(t, 25000, rateMbps("25 Gb/sec (1X EDR)"))
	assert.Equal(t, 0, rateMbps("fast"))
	assert.Equal(t, "0000:3b:00.0", topology.NormalizeBusID("00000000:3B:00.0"))
}

func TestAffinityToNUMA(t *testing.T) {
	assert.Equal(t, []uint64{0xffffffff0000ffff, 0x3}, parseCPUMap("00000003,ffffffff,0000ffff"))
	var s topology.System
	s.AddNode(topology.Node{ID: "cpu0", Type: topology.CPU, CPU: &topology.CPUInfo{NUMA: 0, Affinity: "00000000,0000ffff"}})
	s.AddNode(topology.Node{ID: "cpu1", Type: topology.CPU, CPU: &topology.CPUInfo{NUMA: 1, Affinity: "00000000,ffff0000"}})
	assert.Equal(t, 1, numaByAffinity(&s, []uint{0x30000}))
	assert.Equal(t, 0, numaByAffinity(&s, []uint{0x1}))
	assert.Equal(t, -1, numaByAffinity(&s, []uint{0, 0x1}))
	assert.Equal(t, -1, numaByAffinity(&s, nil))
}
