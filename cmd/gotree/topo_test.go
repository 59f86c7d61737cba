package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/topology"
)

func runCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	rc := run(args, &out, &errb)
	return rc, out.String(), errb.String()
}

const fixtureDir = "../../topology/testdata"

// On this CPU-only machine discovery finds CPUs, NUMA nodes and NICs.
func TestTopoDiscoverHere(t *testing.T) {
	t.Setenv("GOTREE_TOPO_FILE", "")
	rc, out, errs := runCLI("topo")
	require.Equal(t, 0, rc, errs)
	assert.Contains(t, out, "System: ")
	assert.Contains(t, out, "cpu0  NUMA")
	assert.Contains(t, out, "Legend:")
	assert.Contains(t, errs, "INFO topology: ")
}

func TestTopoFileTreeAndMatrix(t *testing.T) {
	rc, out, errs := runCLI("topo", "--topo", filepath.Join(fixtureDir, "dgx-a100.xml"), "-v=false")
	require.Equal(t, 0, rc, errs)
	assert.Contains(t, out, "System: 8 GPUs, 2 CPUs (NUMA nodes), 8 NICs")
	assert.Contains(t, out, "│   │   ├── gpu0 0000:07:00.0  GPU 0  sm80")
	assert.Regexp(t, `(?m)^GPU0 +X +NV12 +NV12 .* PIX +PXB +PXN`, out)
	assert.Contains(t, out, "NIC0: mlx5_0")
	assert.Empty(t, errs)
}

func TestTopoEnvFileAndDump(t *testing.T) {
	dump := filepath.Join(t.TempDir(), "t.json")
	t.Setenv("GOTREE_TOPO_FILE", filepath.Join(fixtureDir, "dgx1-v100.json"))
	rc, out, errs := runCLI("topo", "--dump", dump)
	require.Equal(t, 0, rc, errs)
	assert.Regexp(t, `(?m)^GPU0 +X +NV1 +NV1 +NV2 +NV2 +NVB`, out)
	s, err := topology.LoadFile(dump)
	require.NoError(t, err)
	assert.Equal(t, 8, s.Count(topology.GPU))

	rc, out, _ = runCLI("topo", "--json")
	require.Equal(t, 0, rc)
	want, err := os.ReadFile(filepath.Join(fixtureDir, "dgx1-v100.json"))
	require.NoError(t, err)
	assert.Equal(t, string(want), out)
}

func TestTopoSearch(t *testing.T) {
	xmlOut := filepath.Join(t.TempDir(), "graph.xml")
	rc, out, errs := runCLI("topo", "search", "--pattern", "tree", "--topo", filepath.Join(fixtureDir, "v100x4-nv2.xml"), "--xml", xmlOut)
	require.Equal(t, 0, rc, errs)
	assert.Contains(t, out, "Pattern tree, 4 GPUs: 8 channels × 20 GB/s intra (NVL)")
	assert.Contains(t, out, "Channel 01/08 :    1    3    0    2   20 GB/s")
	data, err := os.ReadFile(xmlOut)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(data), `<graphs version="1">`))

	rc, out, errs = runCLI("topo", "search", "--topo", filepath.Join(fixtureDir, "dgx-a100.xml"), "--internode")
	require.Equal(t, 0, rc, errs)
	assert.Contains(t, out, "Channel 00/08 : net0 ->")

	rc, out, _ = runCLI("topo", "search", "--topo", filepath.Join(fixtureDir, "cpu-2s.xml"))
	require.Equal(t, 0, rc)
	assert.Contains(t, out, "No GPU: no channels")
}

func TestTopoErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.xml")
	require.NoError(t, os.WriteFile(bad, []byte("<system>\n  <cpu numaid=\"zero\"/>\n</system>\n"), 0o644))
	rc, _, errs := runCLI("topo", "--topo", bad)
	assert.Equal(t, 1, rc)
	assert.Contains(t, errs, "line 2: <cpu> attribute \"numaid\"")

	rc, _, errs = runCLI("topo", "search", "--pattern", "star", "--topo", bad)
	assert.Equal(t, 2, rc)
	assert.Contains(t, errs, "unknown pattern")

	rc, _, _ = runCLI("topo", "extra")
	assert.Equal(t, 2, rc)
	rc, _, _ = runCLI("topo", "-h")
	assert.Equal(t, 0, rc)
}
