package backend

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// rawSocket is a connected TCP socket that gotree reads and writes with
// plain system calls, outside the Go runtime's network poller. A socket
// in the poller is in its epoll set, edge-triggered: every segment that
// arrives (and every acknowledgement that frees send space) wakes the
// thread parked in epoll_wait, which finds no goroutine waiting — the
// receiver polls the socket itself (tcpConn.pollReadable) — and parks
// again. On 2 CPUs running two ranks that wake-up takes the processor
// from the ranks once per message: 2 ranks over loopback, ring, 16 KiB
// took 62–72 µs per allreduce with the socket in the poller, about 22
// with GOMAXPROCS=1 (where no thread waits in epoll while the executor
// runs). Socket 0 of a link carries every message's header and all of a
// small message, so it is the one taken out (detachSocket); the stripes
// of large messages stay in the poller, read by their own goroutines.
//
// Deadlines behave as net.Conn's: an operation past its deadline returns
// os.ErrDeadlineExceeded, and moving the deadline wakes a blocked one (an
// eventfd per direction in its poll). One goroutine reads and one writes
// at a time (tcpConn's rd and sendMu guarantee it). Close waits until no
// operation uses the descriptor, so it is never closed under a poll.
type rawSocket struct {
	fd            int
	local, remote net.Addr
	rwake, wwake  int          // eventfds that end a blocked read's or write's poll
	rdl, wdl      atomic.Int64 // deadlines in Unix nanoseconds; 0: none

	mu     sync.Mutex
	idle   *sync.Cond // users reached 0
	users  int
	closed bool
}

// detachSocket returns c's socket outside the runtime's poller: a
// duplicate of its descriptor as a rawSocket, with c itself closed (which
// removes it from the epoll set; the connection stays open through the
// duplicate). Anything other than a *net.TCPConn is returned as it is.
func detachSocket(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	fd := -1
	var derr error
	if err := rc.Control(func(f uintptr) { fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || derr != nil {
		return c
	}
	s := &rawSocket{fd: fd, local: tc.LocalAddr(), remote: tc.RemoteAddr(), rwake: -1, wwake: -1}
	s.idle = sync.NewCond(&s.mu)
	if s.rwake, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err == nil {
		s.wwake, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	}
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err != nil {
		s.closeFds()
		return c
	}
	tc.Close()
	return s
}

func (s *rawSocket) closeFds() {
	for _, fd := range []int{s.fd, s.rwake, s.wwake} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// enter marks an operation on the descriptor; false once closed.
func (s *rawSocket) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.users++
	return true
}

func (s *rawSocket) leave() {
	s.mu.Lock()
	s.users--
	if s.users == 0 {
		s.idle.Broadcast()
	}
	s.mu.Unlock()
}

func (s *rawSocket) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func signalFd(fd int) {
	one := [8]byte{1}
	_, _ = unix.Write(fd, one[:])
}

// expired reports whether the deadline dl (Unix ns, 0: none) has passed.
func expired(dl *atomic.Int64) bool {
	d := dl.Load()
	return d != 0 && time.Now().UnixNano() >= d
}

// wait blocks until the socket has events, the deadline dl passes
// (os.ErrDeadlineExceeded) or the socket is closed (net.ErrClosed).
// wake ends the poll when the deadline moves or Close begins.
func (s *rawSocket) wait(events int16, wake int, dl *atomic.Int64) error {
	for {
		if s.isClosed() {
			return net.ErrClosed
		}
		timeout := -1
		if d := dl.Load(); d != 0 {
			left := d - time.Now().UnixNano()
			if left <= 0 {
				return os.ErrDeadlineExceeded
			}
			timeout = int((left + int64(time.Millisecond) - 1) / int64(time.Millisecond))
		}
		fds := [2]unix.PollFd{{Fd: int32(s.fd), Events: events}, {Fd: int32(wake), Events: unix.POLLIN}}
		n, err := unix.Poll(fds[:], timeout)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return os.NewSyscallError("poll", err)
		}
		if fds[1].Revents != 0 {
			var b [8]byte
			_, _ = unix.Read(wake, b[:])
		}
		if n > 0 && fds[0].Revents != 0 {
			return nil
		}
	}
}

func (s *rawSocket) Read(p []byte) (int, error) {
	if !s.enter() {
		return 0, net.ErrClosed
	}
	defer s.leave()
	for {
		if expired(&s.rdl) {
			return 0, os.ErrDeadlineExceeded
		}
		n, err := unix.Read(s.fd, p)
		switch {
		case err == nil && n == 0 && len(p) > 0:
			return 0, io.EOF
		case err == nil:
			return n, nil
		case err == unix.EINTR:
			continue
		case err != unix.EAGAIN:
			return 0, os.NewSyscallError("read", err)
		}
		if err := s.wait(unix.POLLIN, s.rwake, &s.rdl); err != nil {
			return 0, err
		}
	}
}

func (s *rawSocket) Write(p []byte) (int, error) {
	n, err := s.writeBuffers([][]byte{p})
	return int(n), err
}

// writeBuffers writes all of bufs, in one sendmsg where the socket takes
// it (header and payload in one segment). MSG_NOSIGNAL: a peer that went
// away gives EPIPE, never a SIGPIPE (the library runs inside a C
// program's process, whose handler the Go runtime forwards it to).
func (s *rawSocket) writeBuffers(bufs [][]byte) (int64, error) {
	if !s.enter() {
		return 0, net.ErrClosed
	}
	defer s.leave()
	var total int64
	for len(bufs) > 0 {
		if len(bufs[0]) == 0 {
			bufs = bufs[1:]
			continue
		}
		if expired(&s.wdl) {
			return total, os.ErrDeadlineExceeded
		}
		n, err := unix.SendmsgBuffers(s.fd, bufs, nil, nil, unix.MSG_NOSIGNAL)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			if err := s.wait(unix.POLLOUT, s.wwake, &s.wdl); err != nil {
				return total, err
			}
			continue
		}
		if err != nil {
			return total, os.NewSyscallError("sendmsg", err)
		}
		total += int64(n)
		for n > 0 && len(bufs) > 0 {
			k := min(n, len(bufs[0]))
			bufs[0] = bufs[0][k:]
			n -= k
			if len(bufs[0]) == 0 {
				bufs = bufs[1:]
			}
		}
	}
	return total, nil
}

// Close wakes any blocked operation, waits until none uses the
// descriptor, and closes it.
func (s *rawSocket) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	signalFd(s.rwake)
	signalFd(s.wwake)
	for s.users > 0 {
		s.idle.Wait()
	}
	s.mu.Unlock()
	s.closeFds()
	return nil
}

func (s *rawSocket) LocalAddr() net.Addr  { return s.local }
func (s *rawSocket) RemoteAddr() net.Addr { return s.remote }

func (s *rawSocket) SetDeadline(t time.Time) error {
	s.SetReadDeadline(t)
	return s.SetWriteDeadline(t)
}

func (s *rawSocket) SetReadDeadline(t time.Time) error {
	setDeadline(&s.rdl, t)
	s.wake(s.rwake)
	return nil
}

func (s *rawSocket) SetWriteDeadline(t time.Time) error {
	setDeadline(&s.wdl, t)
	s.wake(s.wwake)
	return nil
}

// wake ends a blocked poll on eventfd fd, unless the socket is closed
// (its eventfds are then gone, their numbers possibly reused).
func (s *rawSocket) wake(fd int) {
	s.mu.Lock()
	if !s.closed {
		signalFd(fd)
	}
	s.mu.Unlock()
}

func setDeadline(dl *atomic.Int64, t time.Time) {
	if t.IsZero() {
		dl.Store(0)
		return
	}
	dl.Store(max(1, t.UnixNano()))
}

// SyscallConn gives the descriptor to tcpConn's own polls and peeks.
func (s *rawSocket) SyscallConn() (syscall.RawConn, error) { return rawSocketConn{s}, nil }

type rawSocketConn struct{ s *rawSocket }

func (c rawSocketConn) Control(f func(fd uintptr)) error {
	if !c.s.enter() {
		return net.ErrClosed
	}
	defer c.s.leave()
	f(uintptr(c.s.fd))
	return nil
}

func (c rawSocketConn) Read(f func(fd uintptr) bool) error {
	return c.until(f, unix.POLLIN, c.s.rwake, &c.s.rdl)
}

func (c rawSocketConn) Write(f func(fd uintptr) bool) error {
	return c.until(f, unix.POLLOUT, c.s.wwake, &c.s.wdl)
}

// until calls f until it reports done, waiting for events on the socket
// between calls (RawConn's Read and Write).
func (c rawSocketConn) until(f func(fd uintptr) bool, events int16, wake int, dl *atomic.Int64) error {
	if !c.s.enter() {
		return net.ErrClosed
	}
	defer c.s.leave()
	for !f(uintptr(c.s.fd)) {
		if err := c.s.wait(events, wake, dl); err != nil {
			return err
		}
	}
	return nil
}

// writeBuffers writes bufs to c as one message where c can (a rawSocket:
// sendmsg; a net.Conn: net.Buffers' writev or one write per buffer).
func writeBuffers(c net.Conn, bufs *net.Buffers) (int64, error) {
	if s, ok := c.(*rawSocket); ok {
		return s.writeBuffers(*bufs)
	}
	return bufs.WriteTo(c)
}
