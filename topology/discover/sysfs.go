package discover

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/Mellanox/rdmamap"

	"github.com/gotree/gotree/topology"
)

// sysfs reads the kernel's view of the machine under a (possibly fake) root.
type sysfs struct {
	root string // "/sys"
	proc string // "/proc"
}

func (f sysfs) path(p ...string) string { return filepath.Join(append([]string{f.root}, p...)...) }

func (f sysfs) read(p ...string) string {
	b, err := os.ReadFile(f.path(p...))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

var nodeDir = regexp.MustCompile(`^node([0-9]+)$`)

// cpus returns one CPUInfo per NUMA node (at least one).
func (f sysfs) cpus() ([]*topology.CPUInfo, error) {
	vendor, family, model, name := f.cpuinfo()
	arch := map[string]string{"amd64": "x86_64", "arm64": "aarch64", "ppc64le": "ppc64"}[runtime.GOARCH]
	if arch == "" {
		arch = runtime.GOARCH
	}
	mk := func(numa int, aff string) *topology.CPUInfo {
		return &topology.CPUInfo{NUMA: numa, Arch: arch, Vendor: vendor, Family: family, Model: model, ModelName: name, Affinity: aff}
	}
	ents, err := os.ReadDir(f.path("devices", "system", "node"))
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("gotree/topology/discover: %w", err)
	}
	var ids []int
	for _, e := range ents {
		if m := nodeDir.FindStringSubmatch(e.Name()); m != nil {
			id, _ := strconv.Atoi(m[1])
			ids = append(ids, id)
		}
	}
	sort.Ints(ids)
	var out []*topology.CPUInfo
	for _, id := range ids {
		out = append(out, mk(id, f.read("devices", "system", "node", fmt.Sprintf("node%d", id), "cpumap")))
	}
	if len(out) == 0 {
		out = append(out, mk(0, ""))
	}
	return out, nil
}

// cpuinfo returns vendor_id, cpu family, model and model name of the first
// processor in /proc/cpuinfo.
func (f sysfs) cpuinfo() (vendor string, family, model int, name string) {
	fh, err := os.Open(filepath.Join(f.proc, "cpuinfo"))
	if err != nil {
		return "", 0, 0, ""
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := sc.Text()
		if line == "" && vendor != "" {
			break // end of the first processor
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "vendor_id":
			vendor = v
		case "cpu family":
			family, _ = strconv.Atoi(v)
		case "model":
			model, _ = strconv.Atoi(v)
		case "model name":
			name = v
		case "CPU implementer": // arm64
			if vendor == "" {
				vendor = "ARM:" + v
			}
		}
	}
	return vendor, family, model, name
}

// gdrLoaded reports whether a GPUDirect RDMA kernel module is present.
func (f sysfs) gdrLoaded() bool {
	for _, p := range [][]string{{"module", "nvidia_peermem"}, {"module", "nv_peer_mem"}, {"kernel", "mm", "memory_peers", "nv_mem"}} {
		if _, err := os.Stat(f.path(p...)); err == nil {
			return true
		}
	}
	return false
}

var (
	bdfRE     = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
	pciRootRE = regexp.MustCompile(`^pci[0-9a-f]{4}:[0-9a-f]{2}$`)
)

// pciChain returns the PCI functions from the root complex down to busID,
// busID last, from the device's real sysfs path.
func (f sysfs) pciChain(busID string) []string {
	p, err := filepath.EvalSymlinks(f.path("bus", "pci", "devices", busID))
	if err != nil {
		return []string{busID}
	}
	var chain []string
	for _, c := range strings.Split(filepath.ToSlash(p), "/") {
		if pciRootRE.MatchString(c) {
			chain = chain[:0]
			continue
		}
		if bdfRE.MatchString(c) {
			chain = append(chain, c)
		}
	}
	if len(chain) == 0 || chain[len(chain)-1] != busID {
		return []string{busID}
	}
	return chain
}

// pciDev reads the PCI attributes of one function; bw is the bandwidth of
// its upstream link.
func (f sysfs) pciDev(busID string) (*topology.PCIInfo, float64) {
	dir := []string{"bus", "pci", "devices", busID}
	rd := func(name string) string { return f.read(append(dir, name)...) }
	info := &topology.PCIInfo{Class: rd("class"), Vendor: rd("vendor"), Device: rd("device"), LinkSpeed: rd("max_link_speed")}
	info.LinkWidth, _ = strconv.Atoi(rd("max_link_width"))
	if strings.HasPrefix(info.LinkSpeed, "Unknown") {
		info.LinkSpeed = ""
	}
	return info, topology.PCIBW(info.LinkSpeed, info.LinkWidth)
}

func (f sysfs) numaOf(busID string) int {
	n, err := strconv.Atoi(f.read("bus", "pci", "devices", busID, "numa_node"))
	if err != nil {
		return -1
	}
	return n
}

// pciTree adds PCI switches to a System as devices are attached, the way
// NCCL flattens the hierarchy: the root port counts as the CPU, and each
// switch (an upstream port and the downstream port below it) is one PCI
// node named after its upstream port.
type pciTree struct {
	sys      *topology.System
	sf       sysfs
	cpuNode  map[int]int
	firstCPU int
	byBus    map[string]int
}

// attach returns the node a device at busID hangs from, creating switches
// on the way, and the device's own PCI attributes and link bandwidth.
// numa is the device's NUMA node when known by other means (-1 otherwise).
func (t *pciTree) attach(busID string, numa int) (int, *topology.PCIInfo, float64) {
	chain := t.sf.pciChain(busID)
	if numa < 0 {
		numa = t.sf.numaOf(busID)
	}
	cpu, ok := t.cpuNode[numa]
	if !ok {
		cpu = t.firstCPU
	}
	bridges := chain[:len(chain)-1]
	if len(bridges) > 0 {
		bridges = bridges[1:] // the root port
	}
	parent := cpu
	for i := 0; i < len(bridges); i += 2 {
		up := bridges[i]
		n, ok := t.byBus[up]
		if !ok {
			info, bw := t.sf.pciDev(up)
			n = t.sys.AddNode(topology.Node{Type: topology.PCI, BusID: up, PCI: info})
			t.sys.Connect(n, parent, topology.LinkPCI, bw, 0)
			t.byBus[up] = n
		}
		parent = n
	}
	info, bw := t.sf.pciDev(busID)
	return parent, info, bw
}

// cpuOf returns the CPU above node n (following PCI links upwards).
func (t *pciTree) cpuOf(n int) int {
	seen := map[int]bool{}
	for !seen[n] {
		seen[n] = true
		if t.sys.Nodes[n].Type == topology.CPU {
			return n
		}
		next := -1
		for _, li := range t.sys.Out(n) {
			l := t.sys.Links[li]
			if l.Type == topology.LinkPCI && (t.sys.Nodes[l.To].Type == topology.PCI || t.sys.Nodes[l.To].Type == topology.CPU) && !seen[l.To] {
				next = l.To
				break
			}
		}
		if next < 0 {
			break
		}
		n = next
	}
	return t.firstCPU
}

type portInfo struct {
	name   string // RDMA device, or netdev for plain Ethernet
	port   int
	mbps   int
	netdev string
}

type nicInfo struct {
	busID string
	guid  string
	rdma  bool
	ports []portInfo
}

// rdmaDevices lists RDMA devices: through rdmamap on the real /sys (it
// reads that path itself), by listing class/infiniband on a fake root.
func (f sysfs) rdmaDevices() []string {
	var devs []string
	if f.root == "/sys" {
		devs = rdmamap.GetRdmaDeviceList()
	} else {
		ents, _ := os.ReadDir(f.path("class", "infiniband"))
		for _, e := range ents {
			devs = append(devs, e.Name())
		}
	}
	sort.Strings(devs)
	return devs
}

// pciOf returns the PCI function a class device (…/device link) sits on.
func (f sysfs) pciOf(classPath ...string) string {
	p, err := filepath.EvalSymlinks(f.path(append(classPath, "device")...))
	if err != nil {
		return ""
	}
	bdf := ""
	for _, c := range strings.Split(filepath.ToSlash(p), "/") {
		if bdfRE.MatchString(c) {
			bdf = c
		}
	}
	return bdf
}

// rateMbps parses an RDMA port rate such as "100 Gb/sec (4X EDR)".
func rateMbps(s string) int {
	f := strings.Fields(s)
	if len(f) < 2 {
		return 0
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0
	}
	switch {
	case strings.HasPrefix(f[1], "Gb"):
		return int(v * 1000)
	case strings.HasPrefix(f[1], "Mb"):
		return int(v)
	}
	return 0
}

// defaultMbps is the speed assumed for a port that does not report one.
const defaultMbps = 10000

// nics lists RDMA devices (RDMA dev ↔ netdev ↔ PCI address), then network
// interfaces on a PCI device that back no RDMA device.
func (f sysfs) nics() ([]nicInfo, error) {
	var out []nicInfo
	rdmaNetdevs := map[string]bool{}
	for _, dev := range f.rdmaDevices() {
		nc := nicInfo{busID: f.pciOf("class", "infiniband", dev), rdma: true, guid: f.read("class", "infiniband", dev, "node_guid")}
		netdevs, _ := os.ReadDir(f.path("class", "infiniband", dev, "device", "net"))
		ports, _ := os.ReadDir(f.path("class", "infiniband", dev, "ports"))
		for _, p := range ports {
			num, err := strconv.Atoi(p.Name())
			if err != nil {
				continue
			}
			state := f.read("class", "infiniband", dev, "ports", p.Name(), "state")
			if state != "" && !strings.Contains(state, "ACTIVE") {
				continue
			}
			pi := portInfo{name: dev, port: num, mbps: rateMbps(f.read("class", "infiniband", dev, "ports", p.Name(), "rate"))}
			if pi.mbps <= 0 {
				pi.mbps = defaultMbps
			}
			if len(netdevs) >= num {
				pi.netdev = netdevs[num-1].Name()
			}
			nc.ports = append(nc.ports, pi)
		}
		for _, nd := range netdevs {
			rdmaNetdevs[nd.Name()] = true
		}
		if len(nc.ports) > 0 {
			out = append(out, nc)
		}
	}
	ents, err := os.ReadDir(f.path("class", "net"))
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("gotree/topology/discover: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if rdmaNetdevs[name] {
			continue
		}
		bus := f.pciOf("class", "net", name)
		if bus == "" {
			continue // virtual: lo, bridges, ifb, veth
		}
		mbps, err := strconv.Atoi(f.read("class", "net", name, "speed"))
		if err != nil || mbps <= 0 {
			mbps = defaultMbps
		}
		out = append(out, nicInfo{busID: bus, ports: []portInfo{{name: name, mbps: mbps, netdev: name}}})
	}
	return out, nil
}
