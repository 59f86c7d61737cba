package pg

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseSize reads a byte count: a decimal integer, optionally followed by
// K, M or G (binary multiples) and B, KB, KiB and the like, case-insensitive:
// "4M", "256KiB", "1g", "4096".
func ParseSize(s string) (int64, error) {
	in := s
	s = strings.TrimSpace(strings.ToUpper(s))
	mult := int64(1)
	for suf, m := range map[string]int64{"K": 1 << 10, "M": 1 << 20, "G": 1 << 30} {
		if strings.HasSuffix(s, suf) || strings.HasSuffix(s, suf+"B") || strings.HasSuffix(s, suf+"IB") {
			mult = m
			s = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(s, "IB"), "B"), suf)
			break
		}
	}
	s = strings.TrimSuffix(s, "B")
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 || v > math.MaxInt64/mult {
		return 0, fmt.Errorf("bad size %q", in)
	}
	return v * mult, nil
}
