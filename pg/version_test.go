package pg

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The release number is written in three places: the library (Version,
// which ranks compare), the wheel (setup.py) and the Python package.
func TestVersionMatchesPackaging(t *testing.T) {
	for file, pattern := range map[string]string{
		"../setup.py":                  `(?m)^VERSION = "([^"]+)"`,
		"../python/gotree/__init__.py": `(?m)^__version__ = "([^"]+)"`,
	} {
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		m := regexp.MustCompile(pattern).FindSubmatch(b)
		require.NotNil(t, m, "%s: no version line", file)
		require.Equal(t, Version, string(m[1]), "%s", file)
	}
	require.Regexp(t, `^\d+\.\d+\.\d+/wire\d+$`, versionTag())
	require.Regexp(t, `^gotree \d+\.\d+\.\d+ \(wire protocol \d+, go[^,)]+(, built from [0-9a-f]{1,12}(\+dirty)?)?\)$`, versionBanner())
}

// readDebugLogs returns what every process wrote to the GOTREE_DEBUG_FILE
// pattern debugFile, which ends in %p.
func readDebugLogs(t *testing.T, debugFile string) string {
	t.Helper()
	files, err := filepath.Glob(strings.TrimSuffix(debugFile, "%p") + "*")
	require.NoError(t, err)
	var log string
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		log += string(b)
	}
	return log
}

// GOTREE_DEBUG=VERSION prints rank 0's version line and nothing else, as
// NCCL_DEBUG=VERSION does; WARN prints it too; unset prints nothing.
func TestDebugVersion(t *testing.T) {
	for _, tc := range []struct {
		level Level
		want  bool
	}{{LevelNone, false}, {LevelVersion, true}, {LevelWarn, true}, {LevelInfo, true}} {
		cfg := testConfig()
		cfg.Debug = tc.level
		cfg.DebugFile = t.TempDir() + "/log.%p"
		startComms(t, 2, nil, cfg)
		log := readDebugLogs(t, cfg.DebugFile)
		banner := "[0] GOTREE INFO " + versionBanner() + "\n"
		require.Equal(t, tc.want, strings.Contains(log, banner), "level %v: %q", tc.level, log)
		require.Equal(t, tc.want, strings.Count(log, versionBanner()) == 1, "once, from rank 0")
		if tc.level == LevelVersion {
			require.Equal(t, 1, strings.Count(log, "\n"), "nothing but the version: %q", log)
		}
	}
}
