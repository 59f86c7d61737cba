package pg

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"
)

// Every connection, bootstrap and data, starts with a mutual HMAC-SHA256
// challenge over the communicator's secret; the secret never travels.
//
//	server -> client  "GTHS" nonceS[32]
//	client -> server  "GTHC" kind rank[4] channel[4] nonceC[32] mac[32]
//	                  mac = HMAC(secret, "gotree-client" nonceS kind rank channel nonceC)
//	server -> client  "GTOK" HMAC(secret, "gotree-server" nonceC nonceS)
//
// A fresh server nonce per connection defeats replays.

type connKind byte

const (
	kindBootstrap connKind = 1
	kindData      connKind = 2
)

type hello struct {
	Kind    connKind
	Rank    int32
	Channel int32
}

const helloLen = 4 + 1 + 4 + 4 + 32 + 32

func mac(secret [32]byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, secret[:])
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

func (h hello) bytes() []byte {
	b := make([]byte, 9)
	b[0] = byte(h.Kind)
	binary.LittleEndian.PutUint32(b[1:5], uint32(h.Rank))
	binary.LittleEndian.PutUint32(b[5:9], uint32(h.Channel))
	return b
}

// serverHandshake authenticates the peer of an accepted connection.
func serverHandshake(c net.Conn, secret [32]byte, deadline time.Time) (hello, error) {
	var h hello
	_ = c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	var nonceS [32]byte
	if _, err := rand.Read(nonceS[:]); err != nil {
		return h, err
	}
	if _, err := c.Write(append([]byte("GTHS"), nonceS[:]...)); err != nil {
		return h, fmt.Errorf("handshake with %v: %w", c.RemoteAddr(), err)
	}
	buf := make([]byte, helloLen)
	if _, err := io.ReadFull(c, buf); err != nil {
		return h, fmt.Errorf("handshake with %v: %w", c.RemoteAddr(), err)
	}
	if string(buf[:4]) != "GTHC" {
		return h, fmt.Errorf("handshake with %v: not a gotree peer (bad magic)", c.RemoteAddr())
	}
	h = hello{Kind: connKind(buf[4]), Rank: int32(binary.LittleEndian.Uint32(buf[5:9])), Channel: int32(binary.LittleEndian.Uint32(buf[9:13]))}
	nonceC := buf[13:45]
	want := mac(secret, []byte("gotree-client"), nonceS[:], buf[4:13], nonceC)
	if !hmac.Equal(want, buf[45:77]) {
		return h, fmt.Errorf("handshake with %v: wrong secret (a process of another communicator, or a stranger)", c.RemoteAddr())
	}
	if _, err := c.Write(append([]byte("GTOK"), mac(secret, []byte("gotree-server"), nonceC, nonceS[:])...)); err != nil {
		return h, fmt.Errorf("handshake with %v: %w", c.RemoteAddr(), err)
	}
	return h, nil
}

// clientHandshake proves the secret to a server and checks its proof.
func clientHandshake(c net.Conn, secret [32]byte, h hello, deadline time.Time) error {
	_ = c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	srv := make([]byte, 36)
	if _, err := io.ReadFull(c, srv); err != nil {
		return fmt.Errorf("handshake with %v: %w", c.RemoteAddr(), err)
	}
	if string(srv[:4]) != "GTHS" {
		return fmt.Errorf("handshake with %v: not a gotree listener (bad magic)", c.RemoteAddr())
	}
	var nonceC [32]byte
	if _, err := rand.Read(nonceC[:]); err != nil {
		return err
	}
	hb := h.bytes()
	msg := make([]byte, 0, helloLen)
	msg = append(msg, "GTHC"...)
	msg = append(msg, hb...)
	msg = append(msg, nonceC[:]...)
	msg = append(msg, mac(secret, []byte("gotree-client"), srv[4:36], hb, nonceC[:])...)
	if _, err := c.Write(msg); err != nil {
		return fmt.Errorf("handshake with %v: %w", c.RemoteAddr(), err)
	}
	ok := make([]byte, 36)
	if _, err := io.ReadFull(c, ok); err != nil {
		return fmt.Errorf("handshake with %v: refused (%w)", c.RemoteAddr(), err)
	}
	if string(ok[:4]) != "GTOK" || !hmac.Equal(ok[4:], mac(secret, []byte("gotree-server"), nonceC[:], srv[4:36])) {
		return fmt.Errorf("handshake with %v: the listener does not know the secret", c.RemoteAddr())
	}
	return nil
}
