package topology

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gotree/gotree/internal/cfgfile"
)

// Discoverer finds the system graph of the machine it runs on. The
// implementation is topology/discover; tests use fixtures instead.
type Discoverer interface {
	Discover() (*System, error)
}

// ReadSystem reads a topology in either format: NCCL's XML when the first
// non-blank byte is '<', gotree's JSON otherwise.
func ReadSystem(r io.Reader) (*System, error) {
	br := bufio.NewReader(r)
	for {
		b, err := br.Peek(1)
		if err != nil {
			if err == io.EOF {
				return nil, &FileError{Line: 1, Err: malformed("empty file")}
			}
			return nil, err
		}
		switch b[0] {
		case ' ', '\t', '\r', '\n':
			br.ReadByte()
			continue
		case '<':
			return ReadNCCLXML(br)
		}
		return ReadJSON(br)
	}
}

// LoadFile reads a topology file in either format (see ReadSystem).
func LoadFile(path string) (*System, error) {
	data, err := cfgfile.Read(path) // not a FIFO or device: those could block forever
	if err != nil {
		return nil, fmt.Errorf("gotree/topology: %w", err)
	}
	s, err := ReadSystem(bytes.NewReader(data))
	if err != nil {
		var fe *FileError
		if errors.As(err, &fe) && fe.File == "" {
			fe.File = path
			return nil, fe
		}
		return nil, fmt.Errorf("gotree/topology: %s: %w", path, err)
	}
	return s, nil
}

// DumpFile writes s to path: in NCCL's topology XML when the name ends in
// ".xml", in gotree's JSON otherwise.
func DumpFile(path string, s *System) error {
	var b bytes.Buffer
	write := WriteJSON
	if strings.HasSuffix(strings.ToLower(path), ".xml") {
		write = WriteNCCLXML
	}
	if err := write(&b, s); err != nil {
		return err
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("gotree/topology: dump: %w", err)
	}
	return nil
}

// LoadOptions says where the system graph comes from. The caller reads
// GOTREE_TOPO_FILE and GOTREE_TOPO_DUMP_FILE (or flags) and passes them in;
// this package reads no environment variables.
type LoadOptions struct {
	TopoFile   string     // replaces discovery when set (GOTREE_TOPO_FILE)
	DumpFile   string     // where to write what was found (GOTREE_TOPO_DUMP_FILE)
	Discoverer Discoverer // used when TopoFile is empty
	Logf       func(format string, args ...any)
}

// LoadSystem loads TopoFile or, without one, runs the Discoverer; then
// dumps the result to DumpFile when set.
func LoadSystem(o LoadOptions) (*System, error) {
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	var s *System
	var err error
	switch {
	case o.TopoFile != "":
		s, err = LoadFile(o.TopoFile)
		if err != nil {
			return nil, err
		}
		logf("topology: loaded %s: %d GPUs, %d CPUs, %d NICs", o.TopoFile, s.Count(GPU), s.Count(CPU), s.Count(NIC))
	case o.Discoverer != nil:
		s, err = o.Discoverer.Discover()
		if err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("gotree/topology: no topology file and no discoverer")
	}
	if o.DumpFile != "" {
		if err := DumpFile(o.DumpFile, s); err != nil {
			return nil, err
		}
		logf("topology: dumped to %s", o.DumpFile)
	}
	return s, nil
}
