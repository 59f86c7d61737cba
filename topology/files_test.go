package topology

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestJSONRoundTrip(t *testing.T) {
	for _, name := range fixtures {
		s := loadFixture(t, name)
		a := dumpJSON(t, s)
		s2, err := ReadJSON(bytes.NewReader(a))
		require.NoError(t, err)
		assert.Equal(t, string(a), string(dumpJSON(t, s2)), name)
		s3, err := ReadSystem(bytes.NewReader(append([]byte("\n  "), a...)))
		require.NoError(t, err)
		assert.Equal(t, string(a), string(dumpJSON(t, s3)), name)
	}
}

func TestGraphXMLRoundTrip(t *testing.T) {
	for _, name := range []string{"dgx-a100", "v100x4-nv2", "dgx1-v100"} {
		s := loadFixture(t, name)
		var results []*SearchResult
		for _, c := range searchCases {
			r, err := Search(s, SearchOptions{Pattern: c.pattern, InterNode: c.inter, MaxSteps: 20000})
			require.NoError(t, err)
			results = append(results, r)
		}
		var b bytes.Buffer
		require.NoError(t, WriteGraphXML(&b, s, results))
		got, err := ReadGraphXML(bytes.NewReader(b.Bytes()), s)
		require.NoError(t, err)
		require.Len(t, got, len(results))
		for i, r := range results {
			g := got[i]
			assert.Equal(t, r.Pattern, g.Pattern)
			assert.Equal(t, r.Channels, g.Channels)
			assert.Equal(t, r.Orders, g.Orders)
			assert.Equal(t, r.Nets, g.Nets)
			assert.Equal(t, r.SpeedIntra, g.SpeedIntra)
			assert.Equal(t, r.SpeedInter, g.SpeedInter)
			assert.Equal(t, r.TypeIntra, g.TypeIntra)
			assert.Equal(t, r.TypeInter, g.TypeInter)
			assert.Equal(t, r.SameChans, g.SameChans)
			assert.Equal(t, r.CrossNIC, g.CrossNIC)
		}
		var b2 bytes.Buffer
		require.NoError(t, WriteGraphXML(&b2, s, got))
		assert.Equal(t, b.String(), b2.String())
	}
}

func TestGraphXMLFormat(t *testing.T) {
	s := loadFixture(t, "v100x4-nv2")
	r := &SearchResult{Pattern: PatternRing, Channels: 1, Orders: [][]int{{0, 2, 1, 3}}, SpeedIntra: 40, SpeedInter: 40, TypeIntra: PathNVL, TypeInter: PathPIX}
	var b bytes.Buffer
	require.NoError(t, WriteGraphXML(&b, s, []*SearchResult{r}))
	assert.Equal(t, `<graphs version="1">
  <graph id="0" pattern="4" crossnic="0" nchannels="1" speedintra="40" speedinter="40" typeintra="NVL" typeinter="PIX" samechannels="0">
    <channel><gpu dev="0"/><gpu dev="2"/><gpu dev="1"/><gpu dev="3"/></channel>
  </graph>
</graphs>
`, b.String())
}

// An NCCL topology XML of a DGX A100 loads and searches.
func TestNCCLXMLDGXA100(t *testing.T) {
	s := loadXMLFixture(t, "dgx-a100")
	assert.Equal(t, 8, s.Count(GPU))
	assert.Equal(t, 8, s.Count(NIC))
	assert.Equal(t, 1, s.Count(NVS))
	assert.Equal(t, 2, s.Count(CPU))
	assert.Equal(t, 12, s.Count(PCI))
	g0 := s.Nodes[s.GPUs()[0]]
	assert.Equal(t, "0000:07:00.0", g0.BusID)
	assert.Equal(t, 80, g0.GPU.SM)
	l := s.Links[s.LinkBetween(s.GPUs()[0], s.Find("nvs0"))]
	assert.Equal(t, 12, l.Count)
	assert.Equal(t, 240.0, l.BW)
	r, err := Search(s, SearchOptions{Pattern: PatternRing})
	require.NoError(t, err)
	assert.Equal(t, 12, r.Channels)
	assert.Equal(t, 20.0, r.SpeedIntra)
}

// Malformed files give an error naming the line, element and attribute.
func TestMalformedFiles(t *testing.T) {
	const head = "<system version=\"1\">\n  <cpu numaid=\"0\" vendor=\"GenuineIntel\">\n"
	cases := []struct {
		name, doc     string
		line          int
		element, attr string
		json          bool
	}{
		{"missing numaid", "<system>\n<cpu>\n</cpu></system>", 2, "cpu", "numaid", false},
		{"bad sm", head + "    <pci busid=\"0000:01:00.0\">\n      <gpu dev=\"0\" sm=\"7x\"/>\n    </pci>\n  </cpu>\n</system>", 4, "gpu", "sm", false},
		{"missing busid", head + "    <pci class=\"0x0604\"/>\n  </cpu>\n</system>", 3, "pci", "busid", false},
		{"bad nvlink target", head + "    <pci busid=\"0000:01:00.0\">\n      <gpu dev=\"0\" sm=\"70\">\n        <nvlink target=\"0000:99:00.0\" count=\"2\" tclass=\"0x030200\"/>\n      </gpu>\n    </pci>\n  </cpu>\n</system>", 5, "nvlink", "target", false},
		{"bad net speed", head + "    <nic>\n      <net name=\"mlx5_0\" dev=\"0\" speed=\"fast\"/>\n    </nic>\n  </cpu>\n</system>", 4, "net", "speed", false},
		{"bad link width", head + "    <pci busid=\"0000:01:00.0\" link_width=\"x16\"><gpu dev=\"0\" sm=\"80\"/></pci>\n  </cpu>\n</system>", 3, "pci", "link_width", false},
		{"duplicate dev", head + "    <pci busid=\"0000:01:00.0\"><gpu dev=\"0\" sm=\"80\"/></pci>\n    <pci busid=\"0000:02:00.0\"><gpu dev=\"0\" sm=\"80\"/></pci>\n  </cpu>\n</system>", 4, "gpu", "dev", false},
		{"xml syntax", "<system>\n<cpu numaid=\"0\">\n</system>", 3, "", "", false},
		{"wrong root", "<graphs/>", 1, "graphs", "", false},
		{"json syntax", "{\"version\": 1,\n \"nodes\": [,]}", 2, "", "", true},
		{"json unknown node", "{\"version\": 1,\n \"nodes\": [{\"id\": \"cpu0\", \"type\": \"CPU\", \"cpu\": {\"numa\": 0}}],\n \"links\": [\n  {\"from\": \"cpu0\", \"to\": \"gpu9\", \"type\": \"PCI\", \"bw\": 12}]}", 4, "links[0]", "to", true},
		{"json bad type", "{\"version\": 1,\n \"nodes\": [{\"id\": \"x\", \"type\": \"TPU\"}]}", 2, "", "", true},
		{"json version", "{\"version\": 7,\n \"nodes\": []}", 1, "system", "version", true},
		{"json gpu attrs", "{\"version\": 1,\n \"nodes\": [\n {\"id\": \"gpu0\", \"type\": \"GPU\"}]}", 3, "nodes[0]", "GPU", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if c.json {
				_, err = ReadJSON(strings.NewReader(c.doc))
			} else {
				_, err = ReadNCCLXML(strings.NewReader(c.doc))
			}
			require.Error(t, err)
			var fe *FileError
			require.True(t, errors.As(err, &fe), "%v", err)
			assert.Equal(t, c.line, fe.Line, "%v", err)
			assert.Equal(t, c.element, fe.Element, "%v", err)
			assert.Equal(t, c.attr, fe.Attr, "%v", err)
			assert.Contains(t, err.Error(), "line "+strconv.Itoa(c.line))
			if c.attr != "" {
				assert.Contains(t, err.Error(), strconv.Quote(c.attr))
			}
		})
	}
}

func TestMalformedGraphXML(t *testing.T) {
	s := loadFixture(t, "v100x4-nv2")
	doc := "<graphs version=\"1\">\n<graph id=\"0\" pattern=\"4\" nchannels=\"1\" speedintra=\"20\" typeintra=\"NVL\" typeinter=\"PIX\">\n<channel>\n<gpu dev=\"0\"/><gpu dev=\"9\"/>\n</channel></graph></graphs>"
	_, err := ReadGraphXML(strings.NewReader(doc), s)
	var fe *FileError
	require.True(t, errors.As(err, &fe), "%v", err)
	assert.Equal(t, 4, fe.Line)
	assert.Equal(t, "gpu", fe.Element)
	assert.Equal(t, "dev", fe.Attr)

	doc = strings.Replace(doc, "typeintra=\"NVL\"", "typeintra=\"FAST\"", 1)
	_, err = ReadGraphXML(strings.NewReader(doc), s)
	require.True(t, errors.As(err, &fe), "%v", err)
	assert.Equal(t, 2, fe.Line)
	assert.Equal(t, "typeintra", fe.Attr)
}

type fakeDiscoverer struct{ s *System }

func (f fakeDiscoverer) Discover() (*System, error) { return f.s, nil }

func TestLoadSystem(t *testing.T) {
	dir := t.TempDir()
	dump := filepath.Join(dir, "dump.json")
	s := loadFixture(t, "dgx-h100")
	var logs []string
	logf := func(f string, a ...any) { logs = append(logs, f) }
	got, err := LoadSystem(LoadOptions{Discoverer: fakeDiscoverer{s}, DumpFile: dump, Logf: logf})
	require.NoError(t, err)
	assert.Same(t, s, got)
	again, err := LoadSystem(LoadOptions{TopoFile: dump, Logf: logf})
	require.NoError(t, err)
	assert.Equal(t, string(dumpJSON(t, s)), string(dumpJSON(t, again)))
	assert.Len(t, logs, 2)

	xmlDump := filepath.Join(dir, "dump.xml")
	_, err = LoadSystem(LoadOptions{Discoverer: fakeDiscoverer{s}, DumpFile: xmlDump})
	require.NoError(t, err)
	fromXML, err := LoadFile(xmlDump)
	require.NoError(t, err)
	assert.Equal(t, canonical(s), canonical(fromXML))

	_, err = LoadSystem(LoadOptions{TopoFile: filepath.Join(dir, "missing.json")})
	assert.ErrorIs(t, err, os.ErrNotExist)
	// GOTREE_TOPO_FILE=/dev/stdin or a FIFO: refused, not waited on.
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	_, err = LoadFile(fifo)
	assert.ErrorContains(t, err, fifo+" is not a regular file (a FIFO)")
	bad := filepath.Join(dir, "bad.xml")
	require.NoError(t, os.WriteFile(bad, []byte("<system>\n<cpu/>\n</system>"), 0o644))
	_, err = LoadFile(bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), bad+": line 2: <cpu> attribute \"numaid\"")
	_, err = LoadSystem(LoadOptions{})
	assert.Error(t, err)
}

// The model, paths and search are pure: no I/O, clock, goroutine
// synchronisation or unsafe code.
func TestPureFiles(t *testing.T) {
	banned := map[string]bool{"os": true, "net": true, "time": true, "sync": true, "sync/atomic": true, "syscall": true, "unsafe": true, "math/rand": true, "math/rand/v2": true, "io": true, "os/exec": true, "C": true}
	for _, f := range []string{"model.go", "paths.go", "search.go", "search_rec.go"} {
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range af.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			assert.False(t, banned[p], "%s imports %s", f, p)
		}
	}
}

func FuzzReadNCCLXML(f *testing.F) {
	for _, name := range fixtures {
		data, err := os.ReadFile(filepath.Join("testdata", name+".xml"))
		require.NoError(f, err)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ReadNCCLXML(bytes.NewReader(data))
		if err != nil {
			return
		}
		ComputePaths(s)
		var b bytes.Buffer
		require.NoError(t, WriteJSON(&b, s))
		_, err = ReadJSON(&b)
		require.NoError(t, err)
	})
}

func FuzzReadJSON(f *testing.F) {
	data, err := os.ReadFile(filepath.Join("testdata", "v100x4-nv2.json"))
	require.NoError(f, err)
	f.Add(data)
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ReadJSON(bytes.NewReader(data))
		if err != nil {
			return
		}
		if len(s.Nodes) < 12 {
			_, err = Search(s, SearchOptions{MaxSteps: 1000})
			require.NoError(t, err)
		}
	})
}

// canonical describes a system independently of node and link order.
func canonical(s *System) string {
	var lines []string
	for _, n := range s.Nodes {
		b, _ := json.Marshal(n)
		lines = append(lines, string(b))
	}
	for _, l := range s.Links {
		lines = append(lines, fmt.Sprintf("%s->%s %s %g %d", s.Nodes[l.From].ID, s.Nodes[l.To].ID, l.Type, l.BW, l.Count))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func TestNCCLXMLRoundTrip(t *testing.T) {
	for _, name := range fixtures {
		s := loadFixture(t, name)
		var b bytes.Buffer
		require.NoError(t, WriteNCCLXML(&b, s))
		s2, err := ReadNCCLXML(bytes.NewReader(b.Bytes()))
		require.NoError(t, err, b.String())
		assert.Equal(t, canonical(s), canonical(s2), name)
	}
	// A system built by hand, without PCI attributes, keeps its bandwidths.
	var s System
	c := s.AddNode(Node{Type: CPU, CPU: &CPUInfo{Vendor: "GenuineIntel"}})
	g := s.AddNode(Node{ID: "gpu0", Type: GPU, BusID: "0000:01:00.0", GPU: &GPUInfo{SM: 80}})
	s.Connect(g, c, LinkPCI, 24, 0)
	var b bytes.Buffer
	require.NoError(t, WriteNCCLXML(&b, &s))
	s2, err := ReadNCCLXML(&b)
	require.NoError(t, err)
	assert.Equal(t, 24.0, s2.Links[s2.LinkBetween(s2.Find("gpu0"), s2.Find("cpu0"))].BW)
}
