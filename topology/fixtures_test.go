package topology

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// fixtures are machines written from public specifications, in NCCL's
// topology XML (testdata/NAME.xml) and, generated from it, gotree's JSON
// (testdata/NAME.json).
var fixtures = []string{"dgx1-v100", "v100x4-nv2", "dgx-a100", "dgx-h100", "pcie-8gpu", "cpu-2s"}

func loadXMLFixture(t testing.TB, name string) *System {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name+".xml"))
	require.NoError(t, err)
	defer f.Close()
	s, err := ReadNCCLXML(f)
	require.NoError(t, err)
	return s
}

func loadFixture(t testing.TB, name string) *System {
	t.Helper()
	s, err := LoadFile(filepath.Join("testdata", name+".json"))
	require.NoError(t, err)
	return s
}

func dumpJSON(t testing.TB, s *System) []byte {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, WriteJSON(&b, s))
	return b.Bytes()
}

// checkGolden compares got with testdata/golden/NAME, rewriting it with -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./topology -update to create it")
	assert.Equal(t, string(want), string(got), "golden %s differs; review and rerun with -update", path)
}

// The JSON fixtures are the XML ones in gotree's format; both must describe
// the same graph.
func TestFixturesXMLMatchJSON(t *testing.T) {
	for _, name := range fixtures {
		t.Run(name, func(t *testing.T) {
			s := loadXMLFixture(t, name)
			checkGolden(t, name+".json", dumpJSON(t, s))
			j := loadFixture(t, name)
			assert.Equal(t, string(dumpJSON(t, s)), string(dumpJSON(t, j)))
		})
	}
}

type searchCase struct {
	pattern Pattern
	inter   bool
}

var searchCases = []searchCase{{PatternRing, false}, {PatternTree, false}, {PatternRing, true}, {PatternTree, true}}

func (c searchCase) String() string {
	if c.inter {
		return c.pattern.String() + " internode"
	}
	return c.pattern.String()
}

func formatResult(s *System, c searchCase, r *SearchResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "search %s\n", c)
	fmt.Fprintf(&b, "  pattern %s channels %d speed %g/%g type %s/%s dup %v same %v crossnic %v fallback %v\n",
		r.Pattern, r.Channels, r.SpeedIntra, r.SpeedInter, r.TypeIntra, r.TypeInter, r.Duplicated, r.SameChans, r.CrossNIC, r.Fallback)
	for ch, o := range r.Orders {
		fmt.Fprintf(&b, "  %02d:", ch)
		if ch < len(r.Nets) {
			fmt.Fprintf(&b, " net%d ->", r.Nets[ch][0])
		}
		for _, g := range o {
			fmt.Fprintf(&b, " %d", g)
		}
		if ch < len(r.Nets) {
			fmt.Fprintf(&b, " -> net%d", r.Nets[ch][1])
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Golden search results for every fixture, plus the properties every result
// must have.
func TestSearchGolden(t *testing.T) {
	for _, name := range fixtures {
		t.Run(name, func(t *testing.T) {
			s := loadFixture(t, name)
			var out strings.Builder
			fmt.Fprintf(&out, "# %s: %d GPUs, %d NICs\n", name, s.Count(GPU), s.Count(NIC))
			for _, c := range searchCases {
				r, err := Search(s, SearchOptions{Pattern: c.pattern, InterNode: c.inter})
				require.NoError(t, err)
				out.WriteString(formatResult(s, c, r))
				checkResultProperties(t, s, r)
			}
			checkGolden(t, filepath.Join("golden", name+".txt"), []byte(out.String()))
		})
	}
}

func checkResultProperties(t *testing.T, s *System, r *SearchResult) {
	t.Helper()
	n := s.Count(GPU)
	require.Equal(t, len(r.Orders), r.Channels)
	if n == 0 {
		assert.Zero(t, r.Channels)
		return
	}
	require.Positive(t, r.Channels)
	assert.LessOrEqual(t, r.Channels, DefaultMaxChannels)
	for c, o := range r.Orders {
		seen := make([]bool, n)
		require.Len(t, o, n, "channel %d", c)
		for _, g := range o {
			require.True(t, g >= 0 && g < n && !seen[g], "channel %d order %v is not a permutation", c, o)
			seen[g] = true
		}
	}
	if r.Fallback {
		return
	}
	use := r.LinkUsage(s)
	for i, u := range use {
		l := s.Links[i]
		assert.LessOrEqual(t, u, l.BW+1e-6, "link %s->%s carries %g GB/s of %g", s.Nodes[l.From].ID, s.Nodes[l.To].ID, u, l.BW)
	}
}

// NCCL on a 4×V100 box whose GPUs are all joined by two NVLinks builds
// trees as chains over all 4 GPUs, several channels with different orders.
func TestTreeV100AllNV2(t *testing.T) {
	s := loadFixture(t, "v100x4-nv2")
	r, err := Search(s, SearchOptions{Pattern: PatternTree})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, r.Channels, 4)
	distinct := map[string]bool{}
	for _, o := range r.Orders {
		assert.Len(t, o, 4)
		distinct[fmt.Sprint(o)] = true
	}
	assert.GreaterOrEqual(t, len(distinct), 4, "orders %v", r.Orders)
	assert.Equal(t, PathNVL, r.TypeIntra)
	assert.Equal(t, 20.0, r.SpeedIntra) // 4 chains at 40 GB/s, duplicated to 8 at 20
}

// NVSwitch systems take GPUs in index order; DGX H100 finds 6 rings at
// 60 GB/s, duplicated to 12 at 30 — 24 once the communicator doubles its
// channels for the second tree.
func TestSearchNVSwitchIndexOrder(t *testing.T) {
	for _, name := range []string{"dgx-a100", "dgx-h100"} {
		s := loadFixture(t, name)
		for _, p := range []Pattern{PatternRing, PatternTree} {
			r, err := Search(s, SearchOptions{Pattern: p})
			require.NoError(t, err)
			assert.Equal(t, 12, r.Channels, "%s %s", name, p)
			for _, o := range r.Orders {
				assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, o)
			}
		}
	}
	r, err := Search(loadFixture(t, "dgx-h100"), SearchOptions{})
	require.NoError(t, err)
	assert.Equal(t, 30.0, r.SpeedIntra)
	assert.True(t, r.Duplicated)
}

func TestSearchDeterministicAndBounded(t *testing.T) {
	s := loadFixture(t, "dgx1-v100")
	a, err := Search(s, SearchOptions{Pattern: PatternTree})
	require.NoError(t, err)
	b, err := Search(s, SearchOptions{Pattern: PatternTree})
	require.NoError(t, err)
	assert.Equal(t, a, b)

	r, err := Search(s, SearchOptions{Pattern: PatternRing, MaxSteps: 50})
	require.NoError(t, err)
	assert.LessOrEqual(t, r.Steps, 50)
	checkResultProperties(t, s, r)

	r, err = Search(s, SearchOptions{Pattern: PatternRing, MaxChannels: 2})
	require.NoError(t, err)
	assert.LessOrEqual(t, r.Channels, 2)
	checkResultProperties(t, s, r)
}

func TestSearchSingleGPUAndErrors(t *testing.T) {
	var s System
	c := s.AddNode(Node{Type: CPU, CPU: &CPUInfo{}})
	g := s.AddNode(Node{Type: GPU, BusID: "0000:01:00.0", GPU: &GPUInfo{SM: 80}})
	s.Connect(c, g, LinkPCI, 24, 0)
	r, err := Search(&s, SearchOptions{Pattern: PatternTree})
	require.NoError(t, err)
	assert.Equal(t, [][]int{{0}}, r.Orders[:1])
	checkResultProperties(t, &s, r)

	_, err = Search(&s, SearchOptions{Pattern: Pattern(9)})
	assert.Error(t, err)
	_, err = Search(&s, SearchOptions{MinChannels: 4, MaxChannels: 2})
	assert.Error(t, err)
}

func TestRankOrders(t *testing.T) {
	s := loadFixture(t, "v100x4-nv2")
	for i, g := range s.GPUs() {
		s.Nodes[g].GPU.Rank = 10 + 3 - i
	}
	r := &SearchResult{Orders: [][]int{{0, 1, 2, 3}, {3, 1, 0, 2}}}
	assert.Equal(t, [][]int{{13, 12, 11, 10}, {10, 12, 13, 11}}, r.RankOrders(s))
}
