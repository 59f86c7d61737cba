package backend

import (
	"context"
	"encoding/binary"
	"net"
	"testing"
	"time"
)

// FuzzWireFrames feeds arbitrary bytes to a TCP link's reader, as a
// stranger or a corrupted peer would: it must deliver only messages that fit
// a slot, then fail cleanly — never panic, hang or allocate from a length it
// has not checked.
func FuzzWireFrames(f *testing.F) {
	frame := func(n int, tag uint32) []byte {
		b := make([]byte, 8+n)
		binary.LittleEndian.PutUint32(b, uint32(n))
		binary.LittleEndian.PutUint32(b[4:], tag)
		return b
	}
	f.Add(frame(0, 1))
	f.Add(frame(10, 7))
	f.Add(append(frame(3, 2), frame(5, 3)...))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 20, 0, 0, 0, 'a', 'b'})
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0})
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, b := net.Pipe()
		const slot = 64
		c := NewTCPConn(b, 1, 0, 2, slot)
		defer c.Close()
		go func() {
			a.SetWriteDeadline(time.Now().Add(2 * time.Second))
			a.Write(data)
			a.Close()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for i := 0; ; i++ {
			m, _, err := c.Recv(ctx)
			if err != nil {
				if ctx.Err() != nil {
					t.Fatalf("reader hung on %d input bytes", len(data))
				}
				return
			}
			if len(m) > slot {
				t.Fatalf("delivered a %d-byte message from a %d-byte slot", len(m), slot)
			}
			if i > len(data) {
				t.Fatalf("more messages than input bytes")
			}
			c.Release()
		}
	})
}
