//go:build linux

package backend

import (
	"context"
	"encoding/binary"
	"math"
	"os"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/gotree/gotree/algorithms"
)

// allocWindow is AllocWindow, freed when the test ends.
func allocWindow(t *testing.T, size int64) []byte {
	t.Helper()
	b, err := AllocWindow(size)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, FreeWindow(unsafe.Pointer(unsafe.SliceData(b)))) })
	return b
}

func TestWindowAllocFree(t *testing.T) {
	for _, size := range []int64{0, -1, 1 << 47} {
		_, err := AllocWindow(size)
		require.ErrorIs(t, err, ErrWindowSize, "size %d", size)
	}
	a, b := allocWindow(t, 1), allocWindow(t, 10007)
	require.Len(t, a, 1)
	require.Len(t, b, 10007)
	for _, v := range b {
		require.Zero(t, v)
	}
	b[10006] = 7
	wa, wb := windowOf(a), windowOf(b[5:9])
	require.NotZero(t, wa.id)
	require.NotEqual(t, wa.id, wb.id)
	page := uint64(os.Getpagesize())
	require.Equal(t, page+5, wb.off)
	require.Equal(t, page+3*page, wb.size) // the header page and 10007 bytes in pages
	require.Zero(t, windowOf(make([]byte, 64)).id, "private memory")
	require.Zero(t, windowOf(nil).id)
	// The header: magic, id, size.
	m := ownWindow(wb.id)
	require.Equal(t, uint64(windowMagic), binary.LittleEndian.Uint64(m))
	require.Equal(t, wb.size, binary.LittleEndian.Uint64(m[16:]))
	require.Equal(t, byte(7), m[page+10006])

	err := FreeWindow(unsafe.Pointer(&b[1]))
	require.ErrorContains(t, err, "is not the start of a window")
	c, err := AllocWindow(64)
	require.NoError(t, err)
	require.NoError(t, FreeWindow(unsafe.Pointer(&c[0])))
	require.Error(t, FreeWindow(unsafe.Pointer(&c[0])), "freed twice")
}

// Another process's view: a window mapped through /proc/<pid>/fd, its
// header checked, cached, and unmapped when the cache is full and nobody
// uses it.
func TestWindowMapAsPeer(t *testing.T) {
	b := allocWindow(t, 4096)
	b[0] = 42
	r := windowOf(b)
	base := addrOf(b) - r.off
	pid := os.Getpid()
	_, _, err := mapWindow(pid, windowRef{id: r.id + 1, fd: r.fd, size: r.size}, base)
	require.ErrorContains(t, err, "not this process's")

	defer func(p int) { selfPid = p }(selfPid)
	selfPid = 0
	mem, release, err := mapWindow(pid, r, base)
	require.NoError(t, err)
	require.Equal(t, byte(42), mem[r.off], "the peer's bytes")
	mem[r.off+1] = 43
	require.Equal(t, byte(43), b[1], "and the peer sees the writes")
	mem2, release2, err := mapWindow(pid, r, base)
	require.NoError(t, err)
	require.Equal(t, unsafe.SliceData(mem), unsafe.SliceData(mem2), "mapped once")
	release2()

	wrong := r
	wrong.id++
	_, _, err = mapWindow(pid, wrong, 1<<40)
	require.ErrorContains(t, err, "holds another window")
	wrong = r
	wrong.size += 4096
	_, _, err = mapWindow(pid, wrong, 1<<40)
	require.ErrorContains(t, err, "was 8192 bytes, not 12288", "the cached mapping")
	wrong.id += 2
	_, _, err = mapWindow(pid, wrong, 1<<40)
	require.ErrorContains(t, err, "is not its 12288-byte window")
	wrong = r
	wrong.id += 3
	wrong.fd = 1 << 20
	_, _, err = mapWindow(pid, wrong, 1<<40)
	require.ErrorContains(t, err, "opening its window")

	cached := func(r windowRef) bool {
		peerWindows.Lock()
		defer peerWindows.Unlock()
		return peerWindows.m[peerWindowKey{pid, r.id}] != nil
	}
	// Fill the cache with other windows: the one in use stays mapped,
	// the released ones beyond the bound go.
	var first windowRef
	for i := 0; i < peerWindowMax+3; i++ {
		w := allocWindow(t, 1)
		wr := windowOf(w)
		_, rel, err := mapWindow(pid, wr, addrOf(w)-wr.off)
		require.NoError(t, err)
		rel()
		if i == 0 {
			first = wr
			require.True(t, cached(first))
		}
	}
	peerWindows.Lock()
	n := len(peerWindows.m)
	peerWindows.Unlock()
	require.LessOrEqual(t, n, peerWindowMax)
	require.False(t, cached(first), "the least recently used")
	require.True(t, cached(r), "a window in use is never unmapped")

	// The bound on bytes: with room for three more 2-page windows beside
	// the cached ones, a fourth unmaps the least recently used window.
	peerWindows.Lock()
	held := peerWindows.bytes
	peerWindows.Unlock()
	defer func(b int64) { peerWindowBytes = b }(peerWindowBytes)
	peerWindowBytes = held + 3*2*4096
	var three []windowRef
	for i := 0; i < 4; i++ {
		w := allocWindow(t, 1)
		wr := windowOf(w)
		_, rel, err := mapWindow(pid, wr, addrOf(w)-wr.off)
		require.NoError(t, err)
		rel()
		three = append(three, wr)
	}
	peerWindows.Lock()
	require.LessOrEqual(t, peerWindows.bytes, peerWindowBytes)
	peerWindows.Unlock()
	require.True(t, cached(three[3]) && cached(three[2]), "the newest stay")

	// A window of the peer that overlaps a cached one in the peer's
	// address space replaces it there (the old one was freed), unless a
	// call still uses it.
	c := allocWindow(t, 64)
	cr := windowOf(c)
	_, rel, err := mapWindow(pid, cr, base+4096)
	require.NoError(t, err)
	rel()
	require.True(t, cached(r), "in use")
	release()
	d := allocWindow(t, 64)
	dr := windowOf(d)
	_, rel, err = mapWindow(pid, dr, base)
	require.NoError(t, err)
	rel()
	require.False(t, cached(r), "overlapped by a newer window")
	require.False(t, cached(cr), "overlapped by a newer window")
	require.True(t, cached(dr))
}

// Direct allreduce whose buffers lie in windows: the peers' buffers are
// read and written through the mappings (their own windows for ranks of
// one process, or mapped through /proc as a peer process would), any mix
// with private buffers, in place and out of place, past the size from
// which outputs are streamed. float64 sums of integers are exact.
func TestExecDirectWindows(t *testing.T) {
	if ok, why := CMAUsable(); !ok {
		t.Skip(why) // mixed cases read private buffers
	}
	big := int64(StreamOutputBytes/8 + 3)
	for _, tc := range []struct {
		name         string
		n            int
		count        int64
		inWin, outWn bool
		inPlace      bool
		asPeer       bool
	}{
		{"n2_c1_both", 2, 1, true, true, false, false},
		{"n3_c1031_both", 3, 1031, true, true, false, true},
		{"n3_c1031_inplace", 3, 1031, true, true, true, true},
		{"n3_c1031_in_only", 3, 1031, true, false, false, true},
		{"n3_c1031_out_only", 3, 1031, false, true, false, false},
		{"n5_c40009_both", 5, 40009, true, true, false, true},
		{"n3_big_both", 3, big, true, true, false, true},
		{"n2_big_inplace", 2, big, true, true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.asPeer {
				defer func(p int) { selfPid = p }(selfPid)
				selfPid = 0
			}
			n, count := tc.n, tc.count
			p := directTestPlan(t, n, count, algorithms.Float64)
			mesh := newMemMesh(t, n)
			buf := func(win bool) []byte {
				if win {
					return allocWindow(t, 8*count)
				}
				return make([]byte, 8*count)
			}
			ins, outs := make([][]byte, n), make([][]byte, n)
			for r := 0; r < n; r++ {
				ins[r] = buf(tc.inWin)
				for i := int64(0); i < count; i++ {
					binary.LittleEndian.PutUint64(ins[r][8*i:], math.Float64bits(float64((int64(r)+1)*(i%1000)-int64(r))))
				}
				outs[r] = ins[r]
				if !tc.inPlace {
					outs[r] = buf(tc.outWn)
				}
			}
			used := windowsUsed.Load()
			errs := eachRank(n, func(ctx context.Context, r int) error {
				return Exec(ctx, p, r, rankConns{mesh, r}, ins[r], outs[r], 4096, 0xd3)
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			// Every rank with a slice to reduce maps each peer's window
			// buffers once (a rank without one touches none).
			wins := 0
			for _, w := range []bool{tc.inWin, tc.inPlace && tc.inWin || !tc.inPlace && tc.outWn} {
				if w {
					wins++
				}
			}
			working := min(int64(n), count)
			require.Equal(t, working*int64((n-1)*wins), windowsUsed.Load()-used)
			for r := 0; r < n; r++ {
				for i := int64(0); i < count; i++ {
					var want float64
					for q := 0; q < n; q++ {
						want += float64((int64(q)+1)*(i%1000) - int64(q))
					}
					if got := math.Float64frombits(binary.LittleEndian.Uint64(outs[r][8*i:])); got != want {
						t.Fatalf("rank %d elem %d: got %v want %v", r, i, got, want)
					}
				}
			}
		})
	}
}

// Freed windows kept for reuse: the smallest that fits with at most a
// quarter to spare is handed out again, with its id (so a peer's cached
// mapping still serves), zeroed by AllocWindow and as left by
// AllocWindowUninit; the least recently freed go beyond the limit.
func TestWindowCache(t *testing.T) {
	free := func(b []byte) { require.NoError(t, FreeWindow(unsafe.Pointer(unsafe.SliceData(b)))) }
	base := WindowUsage()
	t.Cleanup(func() { SetWindowCache(0) })

	a, err := AllocWindow(100000)
	require.NoError(t, err)
	free(a)
	require.Equal(t, base.Cached, WindowUsage().Cached, "no cache by default")

	SetWindowCache(1 << 20)
	a, err = AllocWindow(100000)
	require.NoError(t, err)
	a[0], a[89999] = 5, 6
	ra := windowOf(a)
	// A peer maps it once; reused, its mapping serves again.
	defer func(p int) { selfPid = p }(selfPid)
	selfPid = 0
	_, release, err := mapWindow(os.Getpid(), ra, addrOf(a)-ra.off)
	require.NoError(t, err)
	release()
	maps := WindowMaps()
	free(a)
	st := WindowUsage()
	require.Equal(t, base.Cached+1, st.Cached)
	require.Equal(t, int64(ra.size), st.CachedBytes-base.CachedBytes)

	b, err := AllocWindowUninit(90000)
	require.NoError(t, err)
	require.Len(t, b, 90000)
	rb := windowOf(b)
	require.Equal(t, ra.id, rb.id, "the cached window")
	require.Equal(t, []byte{5, 6}, []byte{b[0], b[89999]}, "uninitialised: as it was left")
	_, release, err = mapWindow(os.Getpid(), rb, addrOf(b)-rb.off)
	require.NoError(t, err)
	release()
	require.Equal(t, maps, WindowMaps(), "the peer's mapping served again")
	require.Equal(t, base.Reused+1, WindowUsage().Reused)
	free(b)

	c, err := AllocWindow(81921) // 20 pages hold it; the cached window's 25 are within a quarter
	require.NoError(t, err)
	require.Equal(t, ra.id, windowOf(c).id)
	require.Zero(t, c[0], "AllocWindow zeroes a cached window")
	free(c)
	d, err := AllocWindow(50000) // a quarter more is 16 pages: too small a request for it
	require.NoError(t, err)
	require.NotEqual(t, ra.id, windowOf(d).id)
	e, err := AllocWindow(200000) // too large for it
	require.NoError(t, err)
	re := windowOf(e)
	require.NotEqual(t, ra.id, re.id)
	free(d)
	free(e)
	st = WindowUsage()
	require.Equal(t, base.Cached+3, st.Cached)

	// Lowering the limit releases the least recently freed (a's window, then d's).
	SetWindowCache(int64(re.size))
	st = WindowUsage()
	require.Equal(t, base.Cached+1, st.Cached)
	f, err := AllocWindowUninit(200000)
	require.NoError(t, err)
	require.Equal(t, re.id, windowOf(f).id, "e's window reused")
	require.Equal(t, base.Cached, WindowUsage().Cached)
	free(f)
	SetWindowCache(0)
	require.Zero(t, WindowUsage().Cached)
}

// Direct allgather and reduce-scatter on windows, mapped as a peer process
// maps them: each rank maps only the buffers its steps touch (the peers'
// outputs for the allgather, their inputs for the reduce-scatter), and the
// int64 results are exact.
func TestExecDirectGatherScatterWindows(t *testing.T) {
	defer func(p int) { selfPid = p }(selfPid)
	selfPid = 0
	const n, count = 3, 1031
	g, err := algorithms.BuildGraph(algorithms.UniformLayout(1, n, 1, algorithms.BalancedTree))
	require.NoError(t, err)
	for _, coll := range []algorithms.Collective{algorithms.AllGather, algorithms.ReduceScatter} {
		p, err := algorithms.BuildPlan(g, algorithms.PlanRequest{Coll: coll, Algo: algorithms.Direct, Proto: algorithms.Simple, Count: count, DType: algorithms.Int64, Op: algorithms.Sum})
		require.NoError(t, err)
		inN, outN := algorithms.BufferCounts(coll, count, n)
		mesh := newMemMesh(t, n)
		ins, outs := make([][]byte, n), make([][]byte, n)
		val := func(r int, i int64) int64 { return int64(r+1)*(i%997) - int64(r)*5 }
		for r := 0; r < n; r++ {
			ins[r], outs[r] = allocWindow(t, 8*inN), allocWindow(t, 8*outN)
			for i := int64(0); i < inN; i++ {
				binary.LittleEndian.PutUint64(ins[r][8*i:], uint64(val(r, i)))
			}
		}
		used, maps := windowsUsed.Load(), WindowMaps()
		errs := eachRank(n, func(ctx context.Context, r int) error {
			return Exec(ctx, p, r, rankConns{mesh, r}, ins[r], outs[r], 4096, 0xd4)
		})
		for r, err := range errs {
			require.NoError(t, err, "%v rank %d", coll, r)
		}
		require.Equal(t, int64(n*(n-1)), windowsUsed.Load()-used, "%v: one buffer of each peer", coll)
		// (one process: the n windows touched are mapped once, for all)
		require.Equal(t, int64(n), WindowMaps()-maps, "%v: mapped once each", coll)
		for r := 0; r < n; r++ {
			for i := int64(0); i < outN; i++ {
				var want int64
				if coll == algorithms.AllGather {
					want = val(int(i/count), i%count)
				} else {
					for q := 0; q < n; q++ {
						want += val(q, int64(r)*count+i)
					}
				}
				require.Equal(t, want, int64(binary.LittleEndian.Uint64(outs[r][8*i:])), "%v rank %d element %d", coll, r, i)
			}
		}
	}
}
