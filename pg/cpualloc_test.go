package pg

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "4096": 4096, "4K": 4 << 10, "256KiB": 256 << 10, "1m": 1 << 20, " 3MB ": 3 << 20, "2G": 2 << 30, "7b": 7} {
		got, err := ParseSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "-1", "4X", "K", "1.5M", "9999999999G"} {
		_, err := ParseSize(in)
		require.ErrorContains(t, err, "bad size", in)
	}
}

func TestParseCPUAllocator(t *testing.T) {
	for in, want := range map[string]CPUAllocator{
		"":                                     {},
		"default":                              {},
		"shared":                               {MinBytes: DefaultSharedMinBytes, CacheBytes: DefaultSharedCacheBytes},
		" Shared ":                             {MinBytes: DefaultSharedMinBytes, CacheBytes: DefaultSharedCacheBytes},
		"shared,min_bytes:1M":                  {MinBytes: 1 << 20, CacheBytes: DefaultSharedCacheBytes},
		"shared, cache_bytes:0":                {MinBytes: DefaultSharedMinBytes},
		"shared,min_bytes:4097,cache_bytes:2G": {MinBytes: 4097, CacheBytes: 2 << 30},
	} {
		got, err := ParseCPUAllocator(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for in, msg := range map[string]string{
		"malloc":               "want default or shared",
		"default,min_bytes:1M": "want default or shared",
		"shared,min:1M":        `unknown option "min"`,
		"shared,min_bytes:0":   "min_bytes at least 1",
		"shared,min_bytes:64X": `not "64X"`,
		"shared,cache_bytes":   "cache_bytes wants a size",
	} {
		_, err := ParseCPUAllocator(in)
		require.ErrorContains(t, err, msg, in)
		require.ErrorContains(t, err, "GOTREE_CPU_ALLOCATOR", in)
	}
	// Through LoadConfig.
	env := map[string]string{"GOTREE_CPU_ALLOCATOR": "shared,min_bytes:128K"}
	c, err := LoadConfig(func(k string) string { return env[k] })
	require.NoError(t, err)
	require.Equal(t, int64(128<<10), c.CPUAllocator.MinBytes)
	env["GOTREE_CPU_ALLOCATOR"] = "yes"
	_, err = LoadConfig(func(k string) string { return env[k] })
	require.ErrorContains(t, err, "GOTREE_CPU_ALLOCATOR")
}
