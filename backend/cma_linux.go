//go:build linux

package backend

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// readPeerMemory copies len(dst) bytes at addr in process pid into dst
// with process_vm_readv (Linux cross-memory attach: one copy, by the
// kernel, no shared segment). It also reads this process's own memory
// (ranks that are goroutines of one process).
func readPeerMemory(pid int, addr uint64, dst []byte) error {
	return peerMemory(unix.ProcessVMReadv, "process_vm_readv", pid, addr, dst)
}

// writePeerMemory copies src to addr in process pid with
// process_vm_writev, as readPeerMemory reads.
func writePeerMemory(pid int, addr uint64, src []byte) error {
	return peerMemory(unix.ProcessVMWritev, "process_vm_writev", pid, addr, src)
}

// peerMemory runs a cross-memory-attach call until all of b has moved.
func peerMemory(call func(int, []unix.Iovec, []unix.RemoteIovec, uint) (int, error), name string, pid int, addr uint64, b []byte) error {
	for done := 0; done < len(b); {
		local := []unix.Iovec{{Base: &b[done]}}
		local[0].SetLen(len(b) - done)
		remote := []unix.RemoteIovec{{Base: uintptr(addr) + uintptr(done), Len: len(b) - done}}
		n, err := call(pid, local, remote, 0)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%s moved nothing at %#x (%d bytes left)", name, addr+uint64(done), len(b)-done)
		}
		done += n
	}
	return nil
}

// CMAUsable says whether this process can read and write the memory of
// other processes of the same user with process_vm_readv and
// process_vm_writev, and why not. It reads and writes its own memory
// through the calls (a seccomp filter, as in some container runtimes,
// refuses them), and checks Yama's ptrace_scope: 0 allows it, 1
// allows it once the process has said any process may trace it (which
// this function does, as Open MPI does), 2 only with CAP_SYS_PTRACE, 3
// never. Ranks use direct (single-copy) plans only when every rank of the
// host says yes. The answer is the process's: it is worked out once, not
// at every communicator's start.
var CMAUsable = sync.OnceValues(cmaUsable)

func cmaUsable() (bool, string) {
	probe := []byte("gotree-cma-probe")
	got := make([]byte, len(probe))
	if err := readPeerMemory(os.Getpid(), addrOf(probe), got); err != nil {
		return false, fmt.Sprintf("process_vm_readv on this process failed: %v", err)
	}
	if string(got) != string(probe) {
		return false, "process_vm_readv on this process read the wrong bytes"
	}
	back := make([]byte, len(probe))
	if err := writePeerMemory(os.Getpid(), addrOf(back), probe); err != nil {
		return false, fmt.Sprintf("process_vm_writev on this process failed: %v", err)
	}
	if string(back) != string(probe) {
		return false, "process_vm_writev on this process wrote the wrong bytes"
	}
	b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope")
	if err != nil {
		return true, "" // no Yama: the usual same-user rule applies
	}
	switch scope := string(bytes.TrimSpace(b)); scope {
	case "0":
		return true, ""
	case "1":
		if err := unix.Prctl(unix.PR_SET_PTRACER, uintptr(unix.PR_SET_PTRACER_ANY), 0, 0, 0); err != nil {
			return false, fmt.Sprintf("Yama ptrace_scope is 1 and prctl(PR_SET_PTRACER) failed: %v", err)
		}
		return true, ""
	case "2":
		if hasCapSysPtrace() {
			return true, ""
		}
		return false, "Yama ptrace_scope is 2 and this process lacks CAP_SYS_PTRACE"
	default:
		return false, "Yama ptrace_scope is " + scope
	}
}

// hasCapSysPtrace reads CapEff from /proc/self/status.
func hasCapSysPtrace() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	var caps uint64
	for _, line := range strings.Split(string(b), "\n") {
		if n, _ := fmt.Sscanf(line, "CapEff:\t%x", &caps); n == 1 {
			return caps&(1<<unix.CAP_SYS_PTRACE) != 0
		}
	}
	return false
}
