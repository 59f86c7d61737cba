package cfgfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestReadRegularFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tuning.json")
	want := []byte(`{"version": 1}` + "\n")
	require.NoError(t, os.WriteFile(p, want, 0o644))
	got, err := Read(p)
	require.NoError(t, err)
	require.Equal(t, want, got)

	empty := filepath.Join(t.TempDir(), "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	got, err = Read(empty)
	require.NoError(t, err)
	require.Empty(t, got)

	// One byte over the limit is refused, exactly the limit is read.
	got, err = readLimited(p, int64(len(want)))
	require.NoError(t, err)
	require.Equal(t, want, got)
	_, err = readLimited(p, int64(len(want))-1)
	require.ErrorContains(t, err, p)
	require.ErrorContains(t, err, "15 bytes, more than the 14")

	_, err = Read(filepath.Join(t.TempDir(), "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// The names that would hang os.ReadFile fail at once, saying what they are.
func TestReadRefusesWhatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	cases := map[string]string{
		fifo:        "a FIFO",             // open would wait for a writer
		"/dev/zero": "a character device", // never ends
		dir:         "a directory",
	}
	for path, what := range cases {
		done := make(chan error, 1)
		go func() { _, err := Read(path); done <- err }()
		select {
		case err := <-done:
			require.Error(t, err, path)
			require.True(t, strings.Contains(err.Error(), path) && strings.Contains(err.Error(), what), "%s: %v", path, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("Read(%s) still blocks after 10 s", path)
		}
	}
}
