package pg

import (
	"os"
	"regexp"
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
