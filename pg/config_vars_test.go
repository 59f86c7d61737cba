package pg

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Misspelt and unknown GOTREE_* variables are found with the name they
// probably meant; NCCL_* names count only where gotree has the
// counterpart and it is unset; known names of the library and the tools
// pass.
func TestUnknownVars(t *testing.T) {
	env := []string{"GOTREE_ALOG=ring", "GOTREE_NCHANNELS_MAX=2", "GOTREE_IB_HCA=mlx5_0", "GOTREE_ALGO=ring",
		"GOTREE_LIBRARY=/x.so", "GOTREE_DEBUG=", "NCCL_SOCKET_IFNAME=eth0", "NCCL_ALGO=tree", "NCCL_IB_HCA=mlx5_0",
		"PATH=/bin", "GOTREE_SOCKET_IFNAM=eth0", "NOT_GOTREE_X=1", "GOTREE_PROTO"}
	unknown, ignored := unknownVars(env)
	require.Equal(t, []UnknownVar{{"GOTREE_ALOG", "GOTREE_ALGO"}, {"GOTREE_IB_HCA", ""},
		{"GOTREE_NCHANNELS_MAX", "GOTREE_MAX_NCHANNELS"}, {"GOTREE_SOCKET_IFNAM", "GOTREE_SOCKET_IFNAME"}}, unknown)
	require.Equal(t, []UnknownVar{{"NCCL_SOCKET_IFNAME", "GOTREE_SOCKET_IFNAME"}}, ignored, "NCCL_ALGO: GOTREE_ALGO is set; NCCL_IB_HCA: no counterpart")
	require.Equal(t, "GOTREE_ALOG is set but is not a gotree setting; it is ignored (did you mean GOTREE_ALGO?)", unknown[0].String())
	require.Equal(t, "GOTREE_IB_HCA is set but is not a gotree setting; it is ignored", unknown[1].String())
	require.Equal(t, "NCCL_SOCKET_IFNAME is set, but gotree reads GOTREE_SOCKET_IFNAME (unset)", ignored[0].String())
	require.Equal(t, 0, editDistance("GOTREE_ALGO", "GOTREE_ALGO"))
	require.Equal(t, 2, editDistance("GOTREE_ALOG", "GOTREE_ALGO"))
	require.Equal(t, 3, editDistance("", "abc"))

	// LoadConfig fills them from the environment; rank 0 reports an
	// unknown name even without GOTREE_DEBUG, the others only at WARN.
	old := environ
	environ = func() []string { return env }
	t.Cleanup(func() { environ = old })
	cfg, err := LoadConfig(func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, unknown, cfg.Unknown)
	for _, tc := range []struct {
		rank  int
		debug Level
		want  int
	}{{0, LevelNone, 4}, {1, LevelNone, 0}, {1, LevelWarn, 4}, {0, LevelInfo, 5}} {
		var out bytes.Buffer
		c := cfg
		c.Debug = tc.debug
		l := NewLogger(c, tc.rank)
		l.w = &out
		reportVars(l, c, tc.rank)
		lines := strings.Count(out.String(), "\n")
		require.Equal(t, tc.want, lines, "rank %d, level %d: %q", tc.rank, tc.debug, out.String())
		if tc.want > 0 {
			require.Contains(t, out.String(), "GOTREE WARN GOTREE_ALOG is set but is not a gotree setting")
		}
	}
}

// LibraryVars and ToolVars name every GOTREE_* variable the source reads:
// any GOTREE_ name in code that is not a C identifier (capi/gotree.h, or
// a #define / #ifndef) is in one of them, each library variable is read
// in config.go, and each tool variable is used somewhere.
func TestVarListsMatchSource(t *testing.T) {
	root := ".."
	tok := regexp.MustCompile(`GOTREE_[A-Z0-9_]*[A-Z0-9]`)
	cIdent := regexp.MustCompile(`#\s*(?:define|ifndef|ifdef|if|elif)\s+!?\s*(?:defined\s*\(?\s*)?(GOTREE_[A-Z0-9_]+)`)
	header, err := os.ReadFile(filepath.Join(root, "capi", "gotree.h"))
	require.NoError(t, err)
	cNames := map[string]bool{}
	for _, m := range tok.FindAllString(string(header), -1) {
		cNames[m] = true
	}
	used := map[string][]string{} // name -> files
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		base := d.Name()
		if d.IsDir() {
			if base == ".git" || base == ".venv" || base == "build" || base == "node_modules" || base == "docs" {
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(base)
		if !(slices.Contains([]string{".go", ".py", ".sh", ".c", ".cpp", ".h", ".cu", ".cuh"}, ext) || base == "Makefile" || base == "run") {
			return nil
		}
		if base == "config_vars_test.go" || base == "libgotree.h" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range cIdent.FindAllStringSubmatch(string(data), -1) {
			cNames[m[1]] = true
		}
		for _, m := range tok.FindAllString(string(data), -1) {
			used[m] = append(used[m], path)
		}
		return nil
	})
	require.NoError(t, err)
	known := append(slices.Clone(LibraryVars), ToolVars...)
	for name, files := range used {
		if !cNames[name] {
			require.Contains(t, known, name, "%s (in %v) is neither in LibraryVars nor in ToolVars", name, files)
		}
	}
	config, err := os.ReadFile("config.go")
	require.NoError(t, err)
	for _, v := range LibraryVars {
		require.GreaterOrEqual(t, strings.Count(string(config), `"`+v+`"`), 2, "%s is listed but not read in config.go", v)
	}
	for _, v := range ToolVars {
		require.NotEmpty(t, used[v], "%s is listed but nothing uses it", v)
	}
}

// SetVars lists the library variables that are set, in LibraryVars'
// order, and nothing else: not the tools' variables, not empty ones.
func TestSetVars(t *testing.T) {
	env := map[string]string{
		"GOTREE_TUNING_FILE": "/tmp/t.json", "GOTREE_ALGO": "allreduce:ring",
		"GOTREE_PERF_RANK": "1", "GOTREE_PROTO": "", "NCCL_ALGO": "tree",
	}
	get := func(k string) string { return env[k] }
	require.Equal(t, []string{"GOTREE_ALGO=allreduce:ring", "GOTREE_TUNING_FILE=/tmp/t.json"}, SetVars(get))
	require.Empty(t, SetVars(func(string) string { return "" }))
}
