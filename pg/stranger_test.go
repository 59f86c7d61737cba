package pg

import (
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
)

// Strangers on the data listener — garbage, a wrong secret, a replayed
// hello, half-open connections and a flood — are refused, and collectives
// and new point-to-point links in flight are unaffected.
func TestStrangersAreRefused(t *testing.T) {
	cfg := testConfig()
	comms := startComms(t, 3, nil, cfg)
	target := comms[2].ln.Addr().String()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	attack := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_ = f()
				time.Sleep(time.Millisecond)
			}
		}()
	}
	dial := func() (net.Conn, error) { return net.DialTimeout("tcp", target, time.Second) }
	attack(func() error { // garbage
		c, err := dial()
		if err != nil {
			return err
		}
		defer c.Close()
		c.Write([]byte("GET / HTTP/1.0\r\n\r\n\xff\xff\xff\xff"))
		return nil
	})
	attack(func() error { // a well-formed hello with the wrong secret
		c, err := dial()
		if err != nil {
			return err
		}
		defer c.Close()
		return clientHandshake(c, [32]byte{9}, hello{Kind: kindData, Rank: 0, Channel: p2pChannel}, time.Now().Add(time.Second))
	})
	var replay []byte
	attack(func() error { // replay of a captured client message
		c, err := dial()
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Second))
		ch := make([]byte, 36)
		if _, err := c.Read(ch); err != nil {
			return err
		}
		if replay == nil {
			// What a legitimate client would have sent for another challenge.
			replay = make([]byte, helloLen)
			copy(replay, "GTHC")
			replay[4] = byte(kindData)
			binary.LittleEndian.PutUint32(replay[9:], p2pChannel)
			copy(replay[45:], mac(comms[0].secret, []byte("gotree-client"), make([]byte, 32), replay[4:13], replay[13:45]))
		}
		c.Write(replay)
		return nil
	})
	var halfOpen []net.Conn
	for i := 0; i < 40; i++ { // half-open connections and a flood
		if c, err := dial(); err == nil {
			halfOpen = append(halfOpen, c)
		}
	}
	defer func() {
		for _, c := range halfOpen {
			c.Close()
		}
	}()
	// Collectives and a fresh point-to-point link keep working.
	for it := 0; it < 50; it++ {
		bufs := make([][]byte, 3)
		for r := range bufs {
			bufs[r] = i64s([]int64{int64(r + it), 1, 2})
		}
		runAll(t, comms, func(r int, c *Comm) (*Request, error) {
			return c.AllReduce(bufs[r], bufs[r], 3, algorithms.Int64, algorithms.Sum)
		})
		require.Equal(t, int64(3+3*it), getI64(bufs[0], 0))
	}
	payload := i64s([]int64{42, 43})
	got := make([]byte, 16)
	s, err := comms[0].Send(payload, 2, algorithms.Int64, 2)
	require.NoError(t, err)
	q, err := comms[2].Recv(got, 2, algorithms.Int64, 0)
	require.NoError(t, err)
	require.NoError(t, s.Wait(-1))
	require.NoError(t, q.Wait(-1))
	require.Equal(t, payload, got)
	close(stop)
	wg.Wait()
}

// A stranger on the bootstrap root does not stop a communicator from
// forming.
func TestStrangerOnBootstrapRoot(t *testing.T) {
	cfg := testConfig()
	uid, err := NewUniqueID(cfg)
	require.NoError(t, err)
	f, err := decodeUID(uid)
	require.NoError(t, err)
	for i := 0; i < 10; i++ {
		c, err := net.Dial("tcp", f.Addr.String())
		require.NoError(t, err)
		c.Write([]byte("hello there, this is not gotree"))
		defer c.Close()
	}
	other := f
	other.Secret[0] ^= 1
	c, err := net.Dial("tcp", f.Addr.String())
	require.NoError(t, err)
	err = clientHandshake(c, other.Secret, hello{Kind: kindBootstrap}, time.Now().Add(2*time.Second))
	require.Error(t, err)
	c.Close()
	comms := make([]*Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			comms[r], errs[r] = Init(uid, r, 2, cfg)
		}(r)
	}
	wg.Wait()
	for r := range comms {
		require.NoError(t, errs[r])
		defer comms[r].Destroy()
	}
}
