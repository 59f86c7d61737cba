package pg

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"
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

// listIfaces returns the up interfaces' IPv4 addresses, then their IPv6
// global and loopback ones, in system order; family 4 or 6 keeps only
// that family's (GOTREE_SOCKET_FAMILY), 0 both.
func listIfaces(family int) ([]ifaceAddr, error) {
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
			} else if ipn.IP.IsGlobalUnicast() || ipn.IP.IsLoopback() {
				v6 = append(v6, ifaceAddr{it.Name, ipn.IP})
			}
		}
	}
	switch family {
	case 4:
		return v4, nil
	case 6:
		return v6, nil
	}
	return append(v4, v6...), nil
}

// familyOf is 4 or 6.
func familyOf(ip net.IP) int {
	if ip.To4() != nil {
		return 4
	}
	return 6
}

// familyName is GOTREE_SOCKET_FAMILY's spelling of family.
func familyName(family int) string {
	if family == 6 {
		return "AF_INET6"
	}
	return "AF_INET"
}

// rootHint turns MASTER_ADDR (an address or a host name, resolved within
// rootHintLookup) into the address whose route picks the bootstrap root's
// interface, so that on a host with several networks the root listens
// where the launcher's rendezvous is, as the other ranks reach this host.
// A loopback address is no hint: a host name that /etc/hosts maps to
// 127.0.1.1 would put the root where no other host reaches it. It also
// says, for the log, what it made of the hint.
func rootHint(addr string, family int) (*net.TCPAddr, string) {
	if addr == "" {
		return nil, ""
	}
	ips := []net.IP{net.ParseIP(addr)}
	if ips[0] == nil {
		ctx, cancel := context.WithTimeout(context.Background(), rootHintLookup)
		defer cancel()
		found, err := net.DefaultResolver.LookupIP(ctx, "ip", addr)
		if err != nil {
			return nil, fmt.Sprintf("MASTER_ADDR=%s does not resolve: %v; the first interface instead", addr, err)
		}
		ips = found
	}
	for _, ip := range ips {
		if !ip.IsLoopback() && !ip.IsUnspecified() && (family == 0 || familyOf(ip) == family) {
			return &net.TCPAddr{IP: ip, Port: 1}, fmt.Sprintf("the interface that routes to MASTER_ADDR=%s", addr)
		}
	}
	return nil, ""
}

// rootHintLookup bounds the resolution of a MASTER_ADDR host name.
const rootHintLookup = 2 * time.Second

// chooseIface picks the address gotree listens on, as NCCL does: the
// GOTREE_SOCKET_IFNAME filter if set; else, when a peer address is known,
// the local address the system routes to it from; else the first interface
// that is neither docker* nor lo*, falling back to loopback. family 4 or 6
// (GOTREE_SOCKET_FAMILY) admits only addresses of that family; 0 prefers
// IPv4. The address 127.0.1.1 that /etc/hosts gives some hostnames is
// never used: the only host name resolved here is MASTER_ADDR's
// (rootHint), which ignores loopback addresses.
func chooseIface(filter string, family int, toward *net.TCPAddr) (ifaceAddr, error) {
	cands, err := listIfaces(family)
	if err != nil {
		return ifaceAddr{}, fmt.Errorf("gotree: listing network interfaces: %w", err)
	}
	if family != 0 && len(cands) == 0 {
		all, _ := listIfaces(0)
		return ifaceAddr{}, fmt.Errorf("gotree: GOTREE_SOCKET_FAMILY=%s: no interface that is up has an IPv%d address (have %s)", familyName(family), family, ifaceNames(all))
	}
	if filter != "" {
		f := parseIfaceFilter(filter)
		for _, c := range cands {
			if f.matches(c.Name) {
				return c, nil
			}
		}
		what := "no interface with an address"
		if family != 0 {
			what = fmt.Sprintf("no interface with an IPv%d address (GOTREE_SOCKET_FAMILY=%s)", family, familyName(family))
		}
		return ifaceAddr{}, fmt.Errorf("gotree: GOTREE_SOCKET_IFNAME=%q matches %s (have %s)", filter, what, ifaceNames(cands))
	}
	if toward != nil && (family == 0 || familyOf(toward.IP) == family) {
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
		if def.matches(c.Name) && !c.IP.IsLoopback() {
			return c, nil
		}
	}
	for _, c := range cands {
		if c.IP.IsLoopback() {
			return c, nil
		}
	}
	if family == 6 {
		return ifaceAddr{Name: "lo", IP: net.IPv6loopback}, nil
	}
	return ifaceAddr{Name: "lo", IP: net.IPv4(127, 0, 0, 1)}, nil
}

// ifaceNames lists the interfaces of cands, each once (one may have
// several addresses).
func ifaceNames(cands []ifaceAddr) string {
	var names []string
	for _, c := range cands {
		if !slices.Contains(names, c.Name) {
			names = append(names, c.Name)
		}
	}
	return strings.Join(names, ", ")
}
