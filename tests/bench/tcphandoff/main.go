// Command tcphandoff measures what a reader goroutine costs a TCP
// ping-pong between two processes on one host (docs/bench.md, "TCP
// small-message latency"): 12-byte messages, the round trip timed by the
// client, with the socket read by the waiting goroutine itself (direct) or
// by a reader goroutine that hands each message over a channel (chan, the
// design of backend's tcpConn).
//
//	go build -o /tmp/tcphandoff ./tests/bench/tcphandoff
//	/tmp/tcphandoff -mode chan -role server & /tmp/tcphandoff -mode chan -role client; wait
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"time"
)

func main() {
	mode := flag.String("mode", "direct", "direct or chan")
	role := flag.String("role", "client", "server or client")
	addr := flag.String("addr", "127.0.0.1:29599", "server address")
	n := flag.Int("n", 5000, "round trips")
	flag.Parse()
	if *mode != "direct" && *mode != "chan" {
		fmt.Fprintln(os.Stderr, "tcphandoff: -mode direct or chan")
		os.Exit(2)
	}
	var c net.Conn
	var err error
	if *role == "server" {
		var ln net.Listener
		if ln, err = net.Listen("tcp", *addr); err == nil {
			c, err = ln.Accept()
		}
	} else {
		deadline := time.Now().Add(5 * time.Second)
		for c, err = net.Dial("tcp", *addr); err != nil && time.Now().Before(deadline); c, err = net.Dial("tcp", *addr) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcphandoff:", err)
		os.Exit(1)
	}
	ch := make(chan []byte, 8)
	if *mode == "chan" {
		go func() {
			for {
				b := make([]byte, 12)
				if _, err := io.ReadFull(c, b); err != nil {
					close(ch)
					return
				}
				ch <- b
			}
		}()
	}
	buf := make([]byte, 12)
	recv := func() {
		if *mode == "chan" {
			<-ch
		} else {
			io.ReadFull(c, buf)
		}
	}
	msg := make([]byte, 12)
	ts := make([]float64, 0, *n)
	for i := 0; i < *n; i++ {
		t0 := time.Now()
		if *role == "client" {
			c.Write(msg)
			recv()
		} else {
			recv()
			c.Write(msg)
		}
		ts = append(ts, float64(time.Since(t0).Nanoseconds())/1e3)
	}
	if *role == "client" {
		sort.Float64s(ts)
		fmt.Printf("%s: round trip median %.1f us, P90 %.1f us (%d round trips)\n", *mode, ts[len(ts)/2], ts[len(ts)*9/10], *n)
	}
}
