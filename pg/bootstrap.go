package pg

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// rankInfo is what every rank tells the bootstrap root about itself.
type rankInfo struct {
	Rank       int    `json:"rank"`
	NRanks     int    `json:"nranks"`
	HostID     string `json:"host"`
	DataAddr   string `json:"addr"`
	Pid        int    `json:"pid"`
	TimeoutMS  int64  `json:"timeout_ms"`
	CPUs       int    `json:"cpus,omitempty"`        // runtime.NumCPU() of the rank's process
	CMA        bool   `json:"cma,omitempty"`         // may read and be read by the host's other ranks (backend.CMAUsable)
	Choice     string `json:"choice,omitempty"`      // what decides its plans besides the call (choiceSettings)
	Stage      string `json:"stage,omitempty"`       // its staging region for shared plans (stage.go); "": none
	Kernel     string `json:"kernel,omitempty"`      // the running kernel's boot id (sched.go): ranks with the same one share processors
	SchedGroup string `json:"sched_group,omitempty"` // the scheduler group its yields stay in (sched.go); "": none
	CPUMask    string `json:"cpu_mask,omitempty"`    // the CPUs its process may run on, hexadecimal (sched.go); "": unknown
	Version    string `json:"version,omitempty"`     // Version and WireVersion (version.go); every rank's must equal rank 0's
	Build      string `json:"build,omitempty"`       // the source revision it was built from, where known (version.go)
}

type rootReply struct {
	Err   string     `json:"err,omitempty"`
	Ranks []rankInfo `json:"ranks,omitempty"`
}

// maxFrame bounds a bootstrap frame: one rank's join. The root's reply,
// the whole table, may have replyBytesPerRank more per rank.
const maxFrame = 4 << 20

// replyBytesPerRank is what a rank allows the root's reply per rank of
// the table beyond maxFrame (a rankInfo is a few hundred bytes of JSON:
// host id, address, kernel, scheduler group, CPU mask, staging region).
const replyBytesPerRank = 4 << 10

func writeFrame(c net.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	hdr := make([]byte, 4, 4+len(b))
	binary.LittleEndian.PutUint32(hdr, uint32(len(b)))
	_, err = c.Write(append(hdr, b...))
	return err
}

func readFrame(c net.Conn, v any) error { return readFrameLimit(c, v, maxFrame) }

// readFrameLimit reads a frame of at most limit bytes into v.
func readFrameLimit(c net.Conn, v any, limit int64) error {
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if int64(n) > limit {
		return fmt.Errorf("bootstrap frame of %d bytes exceeds the %d-byte limit", n, limit)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// runRoot serves one communicator's bootstrap: it waits for nranks ranks
// (the number the first one announces), then sends everyone the table. It
// gives up idle after idle if nobody joins, and tells the joined ranks which
// ranks are missing when the joiners' timeout passes.
func runRoot(ln net.Listener, secret [32]byte, idle time.Duration, log *Logger) {
	defer ln.Close()
	type joined struct {
		c    net.Conn
		info rankInfo
	}
	var (
		mu       sync.Mutex
		members  = map[int]joined{}
		nranks   = -1
		deadline = time.Now().Add(idle)
		done     = make(chan struct{})
		finished bool
	)
	reply := func(c net.Conn, r rootReply) {
		_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		_ = writeFrame(c, r)
		c.Close()
	}
	finish := func(r func(rankInfo) rootReply) {
		// Answer the ranks of other processes first: the rank in this
		// process may return from init and exit before the others hear.
		order := make([]joined, 0, len(members))
		for _, m := range members {
			order = append(order, m)
		}
		sort.Slice(order, func(i, j int) bool {
			ai, aj := order[i].info.Pid == os.Getpid(), order[j].info.Pid == os.Getpid()
			if ai != aj {
				return aj
			}
			return order[i].info.Rank < order[j].info.Rank
		})
		for _, m := range order {
			reply(m.c, r(m.info))
		}
		members = map[int]joined{}
		if !finished {
			finished = true
			close(done)
		}
	}
	// Deadline watcher.
	go func() {
		for {
			mu.Lock()
			d := deadline
			mu.Unlock()
			select {
			case <-done:
				return
			case <-time.After(min(time.Until(d), 100*time.Millisecond)): // the first joiner may shorten the deadline
			}
			mu.Lock()
			if finished {
				mu.Unlock()
				return
			}
			if time.Now().Before(deadline) {
				mu.Unlock()
				continue
			}
			var missing []string
			for r := 0; r < nranks; r++ {
				if _, ok := members[r]; !ok {
					missing = append(missing, fmt.Sprint(r))
				}
			}
			msg := fmt.Sprintf("rank(s) %s of %d never joined the communicator within the timeout", strings.Join(missing, ", "), nranks)
			if nranks < 0 {
				msg = "no rank joined the communicator"
			}
			log.Warnf("bootstrap: %s", msg)
			finish(func(rankInfo) rootReply { return rootReply{Err: msg} })
			mu.Unlock()
			ln.Close()
			return
		}
	}()
	sem := make(chan struct{}, 64) // bounds concurrent handshakes (a flood of strangers)
	var refusals refusalLog
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case <-done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			c.Close()
			continue
		}
		go func(c net.Conn) {
			defer func() { <-sem }()
			h, err := serverHandshake(c, secret, time.Now().Add(10*time.Second))
			if err != nil || h.Kind != kindBootstrap {
				refusals.warn(log, "bootstrap: refused a connection: %v", orKind(err, h))
				c.Close()
				return
			}
			var info rankInfo
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if err := readFrame(c, &info); err != nil {
				log.Warnf("bootstrap: bad join from %v: %v", c.RemoteAddr(), err)
				c.Close()
				return
			}
			_ = c.SetReadDeadline(time.Time{})
			mu.Lock()
			defer mu.Unlock()
			if finished {
				reply(c, rootReply{Err: "the communicator's bootstrap already finished"})
				return
			}
			if nranks < 0 {
				if info.NRanks <= 0 {
					reply(c, rootReply{Err: fmt.Sprintf("rank %d announced nranks %d", info.Rank, info.NRanks)})
					return
				}
				nranks = info.NRanks
				deadline = time.Now().Add(time.Duration(info.TimeoutMS) * time.Millisecond)
			}
			switch {
			case info.NRanks != nranks:
				reply(c, rootReply{Err: fmt.Sprintf("rank %d says the communicator has %d ranks, but rank(s) before it said %d", info.Rank, info.NRanks, nranks)})
				return
			case info.Rank < 0 || info.Rank >= nranks:
				reply(c, rootReply{Err: fmt.Sprintf("rank %d is outside [0, %d)", info.Rank, nranks)})
				return
			}
			if _, dup := members[info.Rank]; dup {
				reply(c, rootReply{Err: fmt.Sprintf("rank %d joined twice (pid %d); each rank must be unique", info.Rank, info.Pid)})
				return
			}
			members[info.Rank] = joined{c, info}
			if len(members) == nranks {
				table := make([]rankInfo, 0, nranks)
				for _, m := range members {
					table = append(table, m.info)
				}
				sort.Slice(table, func(i, j int) bool { return table[i].Rank < table[j].Rank })
				finish(func(rankInfo) rootReply { return rootReply{Ranks: table} })
				ln.Close()
			}
		}(c)
	}
}

func orKind(err error, h hello) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("unexpected connection kind %d", h.Kind)
}

// joinRoot sends our info to the root and waits for the table.
func joinRoot(uid uidFields, info rankInfo, timeout time.Duration) ([]rankInfo, error) {
	deadline := time.Now().Add(timeout)
	var c net.Conn
	var err error
	for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		d := net.Dialer{Deadline: deadline}
		c, err = d.Dial("tcp", uid.Addr.String())
		if err == nil {
			break
		}
		if time.Now().Add(backoff).After(deadline) {
			return nil, fmt.Errorf("%w: rank %d could not reach the bootstrap root at %v within %v: %v", ErrTimeout, info.Rank, uid.Addr, timeout, err)
		}
		time.Sleep(backoff)
	}
	defer c.Close()
	if err := clientHandshake(c, uid.Secret, hello{Kind: kindBootstrap, Rank: int32(info.Rank)}, deadline); err != nil {
		return nil, fmt.Errorf("%w: rank %d: bootstrap %v", ErrRemote, info.Rank, err)
	}
	_ = c.SetWriteDeadline(deadline)
	if err := writeFrame(c, info); err != nil {
		return nil, fmt.Errorf("%w: rank %d: sending to the bootstrap root: %v", ErrRemote, info.Rank, err)
	}
	// The root's own deadline fires first and says who is missing.
	_ = c.SetReadDeadline(deadline.Add(5 * time.Second))
	var r rootReply
	if err := readFrameLimit(c, &r, maxFrame+int64(info.NRanks)*replyBytesPerRank); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, fmt.Errorf("%w: rank %d: waited %v for all %d ranks to join; the bootstrap root did not answer", ErrTimeout, info.Rank, timeout, info.NRanks)
		}
		return nil, fmt.Errorf("%w: rank %d: the bootstrap root (rank 0's process) went away: %v", ErrRemote, info.Rank, err)
	}
	if r.Err != "" {
		kind := ErrRemote
		if strings.Contains(r.Err, "never joined") {
			kind = ErrTimeout
		} else if strings.Contains(r.Err, "twice") || strings.Contains(r.Err, "outside") || strings.Contains(r.Err, "says the communicator") || strings.Contains(r.Err, "announced") {
			kind = ErrInvalidArgument
		}
		return nil, fmt.Errorf("%w: rank %d: %s", kind, info.Rank, r.Err)
	}
	if len(r.Ranks) != info.NRanks {
		return nil, fmt.Errorf("%w: rank %d: bootstrap table has %d ranks, want %d", ErrRemote, info.Rank, len(r.Ranks), info.NRanks)
	}
	return r.Ranks, nil
}
