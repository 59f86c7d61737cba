package main

import (
	"errors"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/pg"
)

// FuzzCollectiveArguments drives the C ABI's argument checks (the code
// behind gotree_allreduce ... gotree_scatter) with arbitrary kinds, counts,
// dtypes, ops, roots and NULL buffers on a real one-rank communicator:
// every call either succeeds with a correct result or fails with
// GOTREE_ERR_INVALID_ARGUMENT / NOT_SUPPORTED and a message — never a panic,
// a hang or an access outside the buffers.
func FuzzCollectiveArguments(f *testing.F) {
	cfg, err := pg.LoadConfig(os.Getenv)
	if err != nil {
		f.Fatal(err)
	}
	cfg.Timeout = 10 * time.Second
	cfg.SocketIfname = "lo"
	uid, err := pg.NewUniqueID(cfg)
	if err != nil {
		f.Fatal(err)
	}
	comm, err := pg.Init(uid, 0, 1, cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { comm.Destroy() })
	const capBytes = 1 << 16
	send := make([]byte, capBytes)
	recv := make([]byte, capBytes)
	f.Add(0, uint64(7), 0, 0, 0, true, true)
	f.Add(4, uint64(3), 8, 2, 0, true, false)
	f.Add(8, uint64(1), 9, 5, 1, false, true)
	f.Add(2, uint64(1<<40), 1, 0, -1, true, true)
	f.Fuzz(func(t *testing.T, kind int, count uint64, dtype, op, root int, haveSend, haveRecv bool) {
		kind = ((kind % len(collNames)) + len(collNames)) % len(collNames)
		dt := algorithms.DType(dtype)
		// Keep valid calls inside the buffers: a real caller's buffers are
		// as large as its count says.
		if dt.Valid() && count*uint64(dt.Size()) > capBytes {
			count %= capBytes / uint64(dt.Size())
		}
		var sp, rp unsafe.Pointer
		if haveSend {
			sp = unsafe.Pointer(&send[0])
		}
		if haveRecv {
			rp = unsafe.Pointer(&recv[0])
		}
		r, err := issueCollective(comm, kind, collNames[kind], sp, rp, count, dt, algorithms.Op(op), root)
		if err != nil {
			if !errors.Is(err, pg.ErrInvalidArgument) && !errors.Is(err, pg.ErrNotSupported) {
				t.Fatalf("kind %d count %d dtype %d op %d root %d: unexpected error class: %v", kind, count, dtype, op, root, err)
			}
			if err.Error() == "" {
				t.Fatal("empty error text")
			}
			return
		}
		if err := r.Wait(5 * time.Second); err != nil {
			t.Fatalf("kind %d count %d dtype %v op %d root %d: accepted but failed: %v", kind, count, dt, op, root, err)
		}
	})
}
