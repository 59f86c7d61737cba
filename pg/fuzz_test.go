package pg

import (
	"net"
	"testing"
	"time"
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
