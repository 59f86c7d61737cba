// Package cfgfile reads the files that users name in variables such as
// GOTREE_TUNING_FILE and GOTREE_TOPO_FILE. Such a name can point anywhere:
// a FIFO whose open waits for a writer, /dev/stdin on a terminal, /dev/zero,
// which never ends. Read refuses everything but a regular file of bounded
// size, without blocking, so that a wrong name fails at start-up with a
// message instead of hanging the job.
package cfgfile

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

// MaxBytes is the largest file Read accepts: a tuning or topology file is
// a few kilobytes (a large machine's topology a few hundred).
const MaxBytes = 64 << 20

// Read returns the contents of the regular file at path, of at most
// MaxBytes. The error names the path and says what it is when it is not a
// regular file.
func Read(path string) ([]byte, error) { return readLimited(path, MaxBytes) }

func readLimited(path string, limit int64) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer.
	// It changes nothing for a regular file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, kind(st.Mode()))
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s has %d bytes, more than the %d this reads", path, st.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit { // grew while read
		return nil, fmt.Errorf("%s has more than the %d bytes this reads", path, limit)
	}
	return b, nil
}

func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return m.Type().String()
}
