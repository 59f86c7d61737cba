package pg

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
)

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A child rank process (see TestMain): joins the communicator named in the
// environment and runs allreduces until it fails, then prints the error.
func childRank() int {
	b, _ := hex.DecodeString(os.Getenv("GOTREE_TEST_UID"))
	var uid UniqueID
	copy(uid[:], b)
	rank, _ := strconv.Atoi(os.Getenv("GOTREE_TEST_RANK"))
	n, _ := strconv.Atoi(os.Getenv("GOTREE_TEST_NRANKS"))
	cfg := testConfig()
	cfg.Timeout = 5 * time.Second
	cfg.HostID = os.Getenv("GOTREE_TEST_HOST")
	c, err := Init(uid, rank, n, cfg)
	if err != nil {
		fmt.Println("INIT ERROR:", err)
		return 3
	}
	buf := make([]byte, 8*100000)
	for i := 0; ; i++ {
		r, err := c.AllReduce(buf, buf, 100000, algorithms.Int64, algorithms.Sum)
		if err == nil {
			err = r.Wait(-1)
		}
		if err != nil {
			fmt.Printf("COLLECTIVE ERROR after %d: %v\n", i, err)
			return 1
		}
		if i == 20 {
			fmt.Println("READY")
		}
	}
}

func TestMain(m *testing.M) {
	if os.Getenv("GOTREE_TEST_UID") != "" {
		os.Exit(childRank())
	}
	os.Exit(m.Run())
}

// SIGKILL one rank mid-collective: every survivor gets an error naming the
// dead rank within the timeout + 5 s, over shared memory and over TCP.
func TestKilledPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	for _, transport := range []string{"shm", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			cfg := testConfig()
			uid, err := NewUniqueID(cfg)
			require.NoError(t, err)
			const n = 3
			cmds := make([]*exec.Cmd, n)
			outs := make([]*syncBuffer, n)
			for r := 0; r < n; r++ {
				host := "same"
				if transport == "tcp" {
					host = fmt.Sprintf("host%d", r)
				}
				cmds[r] = exec.Command(os.Args[0], "-test.run=^$")
				cmds[r].Env = append(os.Environ(), "GOTREE_TEST_UID="+hex.EncodeToString(uid[:]),
					fmt.Sprintf("GOTREE_TEST_RANK=%d", r), fmt.Sprintf("GOTREE_TEST_NRANKS=%d", n), "GOTREE_TEST_HOST="+host)
				outs[r] = &syncBuffer{}
				cmds[r].Stdout = outs[r]
				cmds[r].Stderr = outs[r]
				require.NoError(t, cmds[r].Start())
			}
			deadline := time.Now().Add(20 * time.Second)
			for !strings.Contains(outs[0].String(), "READY") && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			require.Contains(t, outs[0].String(), "READY", "ranks never got going")
			killed := time.Now()
			require.NoError(t, cmds[1].Process.Signal(syscall.SIGKILL))
			for _, r := range []int{0, 2} {
				done := make(chan error, 1)
				go func() { done <- cmds[r].Wait() }()
				select {
				case <-done:
				case <-time.After(5*time.Second + 5*time.Second):
					cmds[r].Process.Kill()
					t.Fatalf("rank %d still running %v after its peer was killed", r, time.Since(killed))
				}
				out := outs[r].String()
				t.Logf("rank %d after %v: %s", r, time.Since(killed).Round(time.Millisecond), strings.TrimSpace(out[strings.LastIndex(out, "COLLECTIVE"):]))
				require.Contains(t, out, "COLLECTIVE ERROR")
				require.Contains(t, out, "allreduce #")
				require.Contains(t, out, "rank 1", "the error must name the dead rank")
			}
			cmds[1].Wait()
		})
	}
}
