package pg

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// Version is gotree's release (the Python package's and the wheel's).
const Version = "0.1.0"

// WireVersion numbers what ranks exchange and must agree on: bootstrap
// frames and the rank table, connection handshakes, message headers and
// FIFO layouts, staging regions, and the rules that turn a call into a
// plan (every rank chooses alone). Bump it with any change to those.
const WireVersion = 4 // 2: direct plans' descriptors carry shared-buffer windows; autotuning repeats explorations over first mappings. 3: direct allgather and reduce-scatter; GOTREE_CPU_ALLOCATOR among the choice settings. 4: autotuning's gathered record holds 5 candidates (one-shot and shared together)

// versionTag is what a rank announces in the rank table: ranks whose tags
// differ cannot work together.
func versionTag() string { return Version + "/wire" + strconv.Itoa(WireVersion) }

// buildTag names the source the library was built from where the Go
// toolchain recorded it (a git checkout): "rev" or "rev+dirty"; "" when
// unknown. Ranks with different builds of one version may still differ.
func buildTag() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" && dirty {
		rev += "+dirty"
	}
	return rev
}

// versionBanner is what rank 0 logs first, from GOTREE_DEBUG=VERSION up,
// as NCCL logs its version: "gotree 0.1.0 (wire protocol 2, go1.26.0, built from 0123456789ab)".
func versionBanner() string {
	b := fmt.Sprintf("gotree %s (wire protocol %d, %s", Version, WireVersion, runtime.Version())
	if t := buildTag(); t != "" {
		b += ", built from " + t
	}
	return b + ")"
}

// sameVersion fails when a rank runs another gotree than rank 0 (NCCL
// refuses mismatched versions the same way): their messages and plans
// need not fit each other. A rank without a tag runs a gotree from before
// the check.
func sameVersion(table []rankInfo) error {
	for _, r := range table[1:] {
		if r.Version == table[0].Version {
			continue
		}
		return fmt.Errorf("%w: rank %d (host %q) runs %s, rank 0 (host %q) runs %s: every rank must load the same gotree; install the same wheel on every node",
			ErrInvalidArgument, r.Rank, r.HostID, describeVersion(r), table[0].HostID, describeVersion(table[0]))
	}
	return nil
}

// otherBuilds names the first rank whose build differs from this rank's
// where both are known ("" if none): worth a warning, not an error.
func otherBuilds(table []rankInfo, rank int) string {
	me := table[rank]
	for _, r := range table {
		if me.Build != "" && r.Build != "" && r.Build != me.Build {
			return fmt.Sprintf("rank %d (host %q) runs gotree built from %s, this rank from %s: the same version, but not the same source; if the ranks disagree on a call's plan, install one build everywhere", r.Rank, r.HostID, r.Build, me.Build)
		}
	}
	return ""
}

func describeVersion(r rankInfo) string {
	if r.Version == "" {
		return "a gotree from before the version check (it names no version)"
	}
	s := "gotree " + r.Version
	if v, wire, ok := strings.Cut(r.Version, "/wire"); ok {
		s = "gotree " + v + " (wire protocol " + wire + ")"
	}
	if r.Build != "" {
		s += ", built from " + r.Build
	}
	return s
}
