package pg

import (
	"bytes"
	"net"
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
