//go:build linux

package backend

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// StageRegion is a rank's staging region for shared plans: a file in
// ShmDir that every rank of the host maps. Its creator removes the file
// once every peer has mapped it (Unlink), so that nothing is left behind
// when a process dies; the mappings live until Unmap.
type StageRegion struct {
	name  string
	mem   []byte
	owner bool
}

// stagePrefix begins the name of every staging file.
const stagePrefix = "gotree-stage-"

// CreateStage creates and maps this rank's staging region of size bytes.
// A full /dev/shm is an error that says how much is needed and how to
// make room (ErrShmSpace).
func CreateStage(size int) (*StageRegion, error) {
	f, name, err := createShmFile(stagePrefix, size, fmt.Sprintf("a %d KiB staging region", size>>10),
		"Enlarge /dev/shm (docker run --shm-size=1g) or set GOTREE_ALGO=^shared")
	if err != nil {
		return nil, fmt.Errorf("staging region: %w", err)
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		os.Remove(name)
		return nil, fmt.Errorf("mapping the %d-byte staging region %s: %w", size, name, err)
	}
	return &StageRegion{name: name, mem: mem, owner: true}, nil
}

// OpenStage maps a peer's staging region of size bytes by the name its
// creator announced.
func OpenStage(name string, size int) (*StageRegion, error) {
	if filepath.Dir(name) != ShmDir || !strings.HasPrefix(filepath.Base(name), stagePrefix) {
		return nil, fmt.Errorf("%w: %q is no staging region", ErrProto, name)
	}
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the staging region %s: %w (are the ranks really on one host? set GOTREE_HOST_ID if host ids collide)", name, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Size() != int64(size) {
		return nil, fmt.Errorf("%w: staging region %s is not %d bytes", ErrProto, name, size)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping the %d-byte staging region %s: %w", size, name, err)
	}
	return &StageRegion{name: name, mem: mem}, nil
}

// Name is the file the region was created as.
func (s *StageRegion) Name() string { return s.name }

// Bytes is the mapped region.
func (s *StageRegion) Bytes() []byte { return s.mem }

// Unlink removes the file of a region this process created (a no-op for
// a peer's, and after the first call).
func (s *StageRegion) Unlink() {
	if s.owner {
		os.Remove(s.name)
		s.owner = false
	}
}

// Unmap unlinks the region if it is ours and unmaps it. No step may run
// on it any more.
func (s *StageRegion) Unmap() {
	s.Unlink()
	if s.mem != nil {
		_ = unix.Munmap(s.mem)
		s.mem = nil
	}
}
