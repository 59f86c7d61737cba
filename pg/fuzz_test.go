package pg

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gotree/gotree/algorithms"
)

// FuzzHandshake: whatever a stranger sends, the listener's side of the
// handshake refuses it (only a party that knows the secret can answer the
// fresh challenge) and never panics or waits past its deadline.
func FuzzHandshake(f *testing.F) {
	f.Add([]byte("GTHC"))
	f.Add(append([]byte("GTHC\x02\x00\x00\x00\x00\x00\x00\x00\x00"), make([]byte, 64)...))
	f.Add([]byte("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"))
	secret := [32]byte{1, 2, 3}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, b := net.Pipe()
		defer a.Close()
		go func() {
			buf := make([]byte, 36)
			a.SetDeadline(time.Now().Add(time.Second))
			a.Read(buf) // the challenge
			a.Write(data)
			a.Close()
		}()
		start := time.Now()
		_, err := serverHandshake(b, secret, time.Now().Add(time.Second))
		if err == nil {
			t.Fatalf("a stranger's %d bytes passed the handshake", len(data))
		}
		if time.Since(start) > 3*time.Second {
			t.Fatalf("handshake outlived its deadline")
		}
	})
}

// FuzzBootstrapFrame: a bootstrap frame of any content is bounded and
// parsed without panicking.
func FuzzBootstrapFrame(f *testing.F) {
	f.Add([]byte("\x05\x00\x00\x00{\"a\":1}"))
	f.Add([]byte("\xff\xff\xff\xff"))
	f.Add([]byte("\x10\x00\x00\x00{\"rank\":3,\"nranks\":4}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, b := net.Pipe()
		go func() {
			a.SetDeadline(time.Now().Add(time.Second))
			a.Write(data)
			a.Close()
		}()
		b.SetDeadline(time.Now().Add(2 * time.Second))
		var info rankInfo
		_ = readFrame(b, &info)
		b.Close()
	})
}

// Agreement-check headers come from the wire: any hdrLen bytes (or any other
// length) must decode or be refused, and comparing and describing what
// decodes must not panic, whatever collective, dtype, op or counts it
// claims.
func FuzzAgreementHeader(f *testing.F) {
	mine := collArgs{coll: algorithms.AllToAll, count: 12, dt: algorithms.Float32, op: algorithms.Sum, root: 1, seq: 7,
		sendCounts: []int64{4, 4, 4}, recvCounts: []int64{4, 4, 4}}
	f.Add(mine.header(hdrView).encode())
	f.Add(collArgs{coll: algorithms.Broadcast, count: 1, dt: algorithms.BFloat16, root: 2, seq: 1}.header(hdrRound).encode())
	f.Add(make([]byte, hdrLen))
	f.Add([]byte("short"))
	c := &Comm{rank: 0, nranks: 3}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, ok := decodeHeader(data)
		if !ok {
			return
		}
		if got := h.encode(); !bytes.Equal(got, data) {
			t.Fatalf("header does not round-trip: % x -> % x", data, got)
		}
		_ = c.compareView(mine, 1, h)
		_ = c.compareSplits(mine, 1, h)
		_ = c.compareSplits(mine, 5, h)
		_ = h.args().describe()
	})
}

// FuzzLoadConfig: the GOTREE_* variables are user input. Any values must
// load or be refused with an error that names the variable at fault.
// (GOTREE_TUNING_FILE names a file to read, which this leaves out;
// FuzzParseTuning covers the file's contents.)
func FuzzLoadConfig(f *testing.F) {
	f.Add("GOTREE_TIMEOUT_MS=0x10\nGOTREE_MAX_NCHANNELS=4\nGOTREE_ALGO=allreduce:ring;allgather:tree")
	f.Add("GOTREE_DEBUG=info\nGOTREE_DEBUG_SUBSYS=^INIT\nGOTREE_SOCKET_BUFFSIZE=262144\nGOTREE_CPU_ALLOCATOR=shared,min_bytes:1M")
	f.Add("GOTREE_NSOCKS_PERTHREAD=8\nGOTREE_SOCKET_NTHREADS=8\nGOTREE_AUTOTUNE=again")
	f.Add("GOTREE_BUFFSIZE=-1\nGOTREE_SOCKET_FAMILY=AF_UNIX\nGOTREE_PROTO=ll,LL128")
	f.Add("GOTREE_TRACE_BUFFER_SIZE=0\nGOTREE_CMA_DISABLE=yes\nGOTREE_MIN_NCHANNELS=33")
	f.Fuzz(func(t *testing.T, vars string) {
		env := map[string]string{}
		for _, line := range strings.Split(vars, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok && k != "GOTREE_TUNING_FILE" {
				env[k] = v
			}
		}
		_, err := LoadConfig(func(k string) string { return env[k] })
		if err == nil {
			return
		}
		msg := err.Error()
		named := false
		for k := range env {
			named = named || strings.HasPrefix(k, "GOTREE_") && strings.Contains(msg, k)
		}
		if !strings.HasPrefix(msg, "gotree: ") || !named {
			t.Fatalf("%q: the error does not name the variable: %v", vars, err)
		}
	})
}
