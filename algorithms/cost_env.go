package algorithms

import (
	"fmt"
	"strings"
)

// This file parses the values of GOTREE_ALGO and GOTREE_PROTO with the
// syntax of NCCL_ALGO and NCCL_PROTO (the caller reads the environment):
//
//	ring            only ring
//	ring,tree       either (the model picks)
//	^tree           everything but tree
//	allreduce:tree;allgather:ring
//	                per collective; collectives not named are not limited
//
// Names are case-insensitive. "auto" (or an empty value) allows everything.
// NCCL's algorithm names that gotree does not implement (collnet,
// collnetdirect, collnetchain, nvls, nvlstree, pat) are accepted and
// ignored so that NCCL settings can be reused.

var ignoredAlgoNames = map[string]bool{"collnet": true, "collnetdirect": true, "collnetchain": true, "nvls": true, "nvlstree": true, "pat": true}

// ParseAlgoSpec returns the algorithms spec allows for coll.
func ParseAlgoSpec(spec string, coll Collective) (AlgoSet, error) {
	v, err := specFor("GOTREE_ALGO", spec, coll)
	if err != nil || v == "" {
		return AllAlgos, err
	}
	m, err := parseNameSet("GOTREE_ALGO", spec, v, func(name string) (int, bool, error) {
		if a, err := ParseAlgorithm(name); err == nil {
			return int(a), true, nil
		}
		if ignoredAlgoNames[name] {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("unknown algorithm %q (want one of %s, auto; NCCL's collnet, nvls and pat are accepted and ignored)", name, AlgorithmNames())
	}, int(AllAlgos))
	return AlgoSet(m), err
}

// ParseProtoSpec returns the protocols spec allows for coll.
func ParseProtoSpec(spec string, coll Collective) (ProtoSet, error) {
	v, err := specFor("GOTREE_PROTO", spec, coll)
	if err != nil || v == "" {
		return AllProtos, err
	}
	m, err := parseNameSet("GOTREE_PROTO", spec, v, func(name string) (int, bool, error) {
		switch name {
		case "ll":
			return int(LL), true, nil
		case "ll128":
			return int(LL128), true, nil
		case "simple":
			return int(Simple), true, nil
		}
		return 0, false, fmt.Errorf("unknown protocol %q (want LL, LL128, Simple or auto)", name)
	}, int(AllProtos))
	return ProtoSet(m), err
}

// CheckSpecs validates an algorithm and a protocol spec for every
// collective, so that a bad value fails at start-up, not at the first call.
func CheckSpecs(algo, proto string) error {
	for c := AllReduce; c <= SendRecv; c++ {
		if _, err := ParseAlgoSpec(algo, c); err != nil {
			return err
		}
		if _, err := ParseProtoSpec(proto, c); err != nil {
			return err
		}
	}
	return nil
}

// specFor returns the part of spec that applies to coll ("" = no limit).
func specFor(env, spec string, coll Collective) (string, error) {
	spec = strings.ToLower(strings.TrimSpace(spec))
	if !strings.Contains(spec, ":") {
		return spec, nil
	}
	var found string
	for _, part := range strings.Split(spec, ";") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, ":")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return "", fmt.Errorf("gotree: %s=%q: %q is not collective:list", env, spec, part)
		}
		known := false
		for c := AllReduce; c <= SendRecv; c++ {
			known = known || c.String() == k
		}
		if !known {
			return "", fmt.Errorf("gotree: %s=%q: unknown collective %q", env, spec, k)
		}
		if k == coll.String() {
			found = strings.TrimSpace(v)
		}
	}
	return found, nil
}

// parseNameSet parses "a,b", "^a,b" or "auto" into a bit set over all.
func parseNameSet(env, spec, v string, lookup func(string) (int, bool, error), all int) (int, error) {
	if v == "auto" {
		return all, nil
	}
	neg := strings.HasPrefix(v, "^")
	v = strings.TrimPrefix(v, "^")
	m := 0
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		bit, ok, err := lookup(name)
		if err != nil {
			return 0, fmt.Errorf("gotree: %s=%q: %v", env, spec, err)
		}
		if ok {
			m |= 1 << bit
		}
	}
	if neg {
		m = all &^ m
	}
	if m == 0 {
		return 0, fmt.Errorf("gotree: %s=%q leaves nothing gotree can run", env, spec)
	}
	return m, nil
}
