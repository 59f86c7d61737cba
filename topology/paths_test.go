package topology

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func gpuNode(s *System, i int) int { return s.GPUs()[i] }

func netNode(t *testing.T, s *System, dev int) int {
	t.Helper()
	i := s.Find("net" + itoa(dev))
	require.GreaterOrEqual(t, i, 0)
	return i
}

func itoa(i int) string { return string(rune('0' + i)) }

func TestPathsFixtures(t *testing.T) {
	type want struct {
		a, b int // GPU indices, or -1-dev for NET dev
		typ  PathType
		bw   float64
	}
	cases := map[string][]want{
		"dgx1-v100": {
			{0, 1, PathNVL, 20}, {0, 3, PathNVL, 40}, {0, 4, PathNVL, 40},
			{0, 5, PathNVB, 20}, // 0 -NV2-> 4 -NV1-> 5 or 0 -NV1-> 1 -NV2-> 5
			{0, 0, PathLOC, LocBW},
			{0, -1, PathPIX, 12}, {0, -2, PathPXN, 12}, {0, -3, PathPXN, 12}, // NIC 1 sits by GPUs 2,3, NIC 2 by GPU 4
		},
		"v100x4-nv2": {{0, 1, PathNVL, 40}, {2, 3, PathNVL, 40}},
		"dgx-a100": {
			{0, 7, PathNVL, 240}, {0, -1, PathPIX, 24}, {0, -2, PathPXB, 24},
			{0, -5, PathPXN, 24}, // across sockets, through the NVLink peer next to NIC 4
		},
		"dgx-h100": {{0, 7, PathNVL, 370.8}, {3, -4, PathPIX, 48}, {3, -5, PathPXN, 48}},
		"pcie-8gpu": {
			{0, 1, PathPIX, 24}, {0, 2, PathPHB, 24}, {0, 4, PathSYS, 10}, {6, 7, PathPIX, 24},
			{1, -1, PathPIX, 12.5}, {7, -1, PathSYS, 10},
		},
	}
	for name, ws := range cases {
		s := loadFixture(t, name)
		ps := ComputePaths(s)
		for _, w := range ws {
			a := gpuNode(s, w.a)
			b := 0
			if w.b >= 0 {
				b = gpuNode(s, w.b)
			} else {
				b = netNode(t, s, -1-w.b)
			}
			p := ps.Get(a, b)
			assert.Equal(t, w.typ, p.Type, "%s %d->%d", name, w.a, w.b)
			assert.InDelta(t, w.bw, p.BW, 1e-9, "%s %d->%d", name, w.a, w.b)
		}
	}
}

// Every path's type and bandwidth follow from its links, and every path
// is symmetric in type on these fixtures.
func TestPathsConsistent(t *testing.T) {
	for _, name := range fixtures {
		s := loadFixture(t, name)
		ps := ComputePaths(s)
		for a := range s.Nodes {
			for b := range s.Nodes {
				p := ps.Get(a, b)
				if a == b {
					assert.Equal(t, PathLOC, p.Type)
					continue
				}
				if s.Nodes[a].Type == NVS || s.Nodes[b].Type == NVS {
					continue // only GPUs reach the NVSwitch fabric
				}
				require.NotEqual(t, PathDIS, p.Type, "%s: %s->%s disconnected", name, s.Nodes[a].ID, s.Nodes[b].ID)
				at := a
				bw := LocBW
				for _, li := range p.Links {
					l := s.Links[li]
					require.Equal(t, at, l.From)
					at = l.To
					bw = min(bw, l.BW)
				}
				assert.Equal(t, b, at)
				assert.InDelta(t, bw, p.BW, 1e-9)
				assert.Equal(t, p.Type, ps.Get(b, a).Type, "%s: %s<->%s", name, s.Nodes[a].ID, s.Nodes[b].ID)
			}
		}
	}
}

func TestBandwidths(t *testing.T) {
	assert.Equal(t, 12.0, PCIBW("8.0 GT/s PCIe", 16))
	assert.Equal(t, 24.0, PCIBW("16.0 GT/s PCIe", 16))
	assert.Equal(t, 48.0, PCIBW("32.0 GT/s PCIe", 16))
	assert.Equal(t, 6.0, PCIBW("8 GT/s", 8))
	assert.Equal(t, 12.0, PCIBW("", 0))
	assert.Equal(t, 20.0, NVLinkBW(70))
	assert.Equal(t, 20.0, NVLinkBW(80))
	assert.Equal(t, 20.6, NVLinkBW(90))
	assert.Equal(t, 18.0, NVLinkBW(60))
	assert.Equal(t, 10.0, InterCPUBW(&CPUInfo{Vendor: "GenuineIntel", Family: 6, Model: 0x55}))
	assert.Equal(t, 6.0, InterCPUBW(&CPUInfo{Vendor: "GenuineIntel", Family: 6, Model: 0x4f}))
	assert.Equal(t, 16.0, InterCPUBW(&CPUInfo{Vendor: "AuthenticAMD"}))
	assert.Equal(t, 25.0, NetBW(200000))
}

func TestNormalizeBusID(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:3B:00.0": "0000:3b:00.0",
		"0000:3b:00.0":     "0000:3b:00.0",
		"3B:00.0":          "0000:3b:00.0",
		"00000001:C1:00.1": "0001:c1:00.1",
	} {
		assert.Equal(t, want, NormalizeBusID(in), in)
	}
}

func TestTypeNames(t *testing.T) {
	for p := PathLOC; p <= PathDIS; p++ {
		q, err := ParsePathType(p.String())
		require.NoError(t, err)
		assert.Equal(t, p, q)
	}
	for _, s := range []string{"ring", "tree", "split_tree"} {
		p, err := ParsePattern(s)
		require.NoError(t, err)
		assert.Equal(t, s, p.String())
	}
	_, err := ParsePattern("star")
	assert.Error(t, err)
}
