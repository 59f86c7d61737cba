package pg

import (
	"fmt"
	"sync"
	"testing"

	"github.com/gotree/gotree/algorithms"
)

// BenchmarkSmallCollectives measures small-message latency: every
// iteration issues one call on every rank and waits for all of them
// ("sync": the time until the last rank is done), or every rank loops on
// its own ("stream": a root that needs no answer may run ahead). It is the
// before/after measurement of the agreement checks (docs/failures.md):
//
//	go test -run '^$' -bench SmallCollectives -count 8 ./pg/
func BenchmarkSmallCollectives(b *testing.B) {
	const count = 2 // 8 bytes of float32
	for _, n := range []int{2, 3, 4} {
		for _, coll := range []string{"broadcast", "reduce", "allreduce"} {
			for _, mode := range []string{"sync", "stream"} {
				b.Run(fmt.Sprintf("%s/n=%d/%s", coll, n, mode), func(b *testing.B) {
					comms := startComms(b, n, nil, testConfig())
					bufs := make([][]byte, n)
					for r := range bufs {
						bufs[r] = make([]byte, 4*count)
					}
					issue := func(r int) (*Request, error) {
						c := comms[r]
						switch coll {
						case "broadcast":
							return c.Broadcast(bufs[r], bufs[r], count, algorithms.Float32, 0)
						case "reduce":
							return c.Reduce(bufs[r], bufs[r], count, algorithms.Float32, algorithms.Sum, 0)
						}
						return c.AllReduce(bufs[r], bufs[r], count, algorithms.Float32, algorithms.Sum)
					}
					b.ResetTimer()
					if mode == "sync" {
						reqs := make([]*Request, n)
						for i := 0; i < b.N; i++ {
							for r := range comms {
								q, err := issue(r)
								if err != nil {
									b.Fatal(err)
								}
								reqs[r] = q
							}
							for r, q := range reqs {
								if err := q.Wait(-1); err != nil {
									b.Fatalf("rank %d: %v", r, err)
								}
							}
						}
						return
					}
					var wg sync.WaitGroup
					errs := make([]error, n)
					for r := range comms {
						wg.Add(1)
						go func(r int) {
							defer wg.Done()
							for i := 0; i < b.N; i++ {
								q, err := issue(r)
								if err == nil {
									err = q.Wait(-1)
								}
								if err != nil {
									errs[r] = err
									return
								}
							}
						}(r)
					}
					wg.Wait()
					for r, err := range errs {
						if err != nil {
							b.Fatalf("rank %d: %v", r, err)
						}
					}
				})
			}
		}
	}
}
