package pg

import (
	"fmt"
	"net"
	"slices"
	"strings"
)

// ifaceFilter is a parsed GOTREE_SOCKET_IFNAME (NCCL_SOCKET_IFNAME syntax):
// a comma-separated list of name prefixes; a leading '^' turns it into an
// exclusion list; a leading '=' (after any '^') makes names match exactly.
type ifaceFilter struct {
	exclude bool
	exact   bool
	names   []string
}

func parseIfaceFilter(s string) ifaceFilter {
	var f ifaceFilter
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "^") {
		f.exclude, s = true, s[1:]
	}
	if strings.HasPrefix(s, "=") {
		f.exact, s = true, s[1:]
	}
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			f.names = append(f.names, n)
		}
	}
	return f
}

func (f ifaceFilter) matches(name string) bool {
	hit := false
	for _, n := range f.names {
		if (f.exact && name == n) || (!f.exact && strings.HasPrefix(name, n)) {
			hit = true
			break
		}
	}
	return hit != f.exclude
}

// ifaceAddr is one candidate address.
type ifaceAddr struct {
	Name string
	IP   net.IP
}

// listIfaces returns the up interfaces' IPv4 addresses (then IPv6 global
// ones) in system order.
func listIfaces() ([]ifaceAddr, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var v4, v6 []ifaceAddr
	for _, it := range ifs {
		if it.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, err := it.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			if ip4 := ipn.IP.To4(); ip4 != nil {
				v4 = append(v4, ifaceAddr{it.Name, ip4})
			} else if ipn.IP.IsGlobalUnicast() {
				v6 = append(v6, ifaceAddr{it.Name, ipn.IP})
			}
		}
	}
	return append(v4, v6...), nil
}

// chooseIface picks the address gotree listens on, as NCCL does: the
// GOTREE_SOCKET_IFNAME filter if set; else, when a peer address is known,
// the local address the system routes to it from; else the first interface
// that is neither docker* nor lo*, falling back to loopback. The address
// 127.0.1.1 that /etc/hosts gives some hostnames is never used, because
// nothing resolves hostnames here.
func chooseIface(filter string, toward *net.TCPAddr) (ifaceAddr, error) {
	cands, err := listIfaces()
	if err != nil {
		return ifaceAddr{}, fmt.Errorf("gotree: listing network interfaces: %w", err)
	}
	if filter != "" {
		f := parseIfaceFilter(filter)
		for _, c := range cands {
			if f.matches(c.Name) {
				return c, nil
			}
		}
		var names []string // each interface once (one may have several addresses)
		for _, c := range cands {
			if !slices.Contains(names, c.Name) {
				names = append(names, c.Name)
			}
		}
		return ifaceAddr{}, fmt.Errorf("gotree: GOTREE_SOCKET_IFNAME=%q matches no interface with an address (have %s)", filter, strings.Join(names, ", "))
	}
	if toward != nil {
		if c, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: toward.IP, Port: max(toward.Port, 1)}); err == nil {
			local := c.LocalAddr().(*net.UDPAddr).IP
			c.Close()
			for _, x := range cands {
				if x.IP.Equal(local) {
					return x, nil
				}
			}
			return ifaceAddr{Name: "?", IP: local}, nil
		}
	}
	def := parseIfaceFilter("^docker,lo")
	for _, c := range cands {
		if def.matches(c.Name) {
			return c, nil
		}
	}
	for _, c := range cands {
		if c.IP.IsLoopback() {
			return c, nil
		}
	}
	return ifaceAddr{Name: "lo", IP: net.IPv4(127, 0, 0, 1)}, nil
}
