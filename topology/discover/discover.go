// Package discover finds the topology of the local machine: GPUs through
// NVML (go-nvml, which loads libnvidia-ml at run time), the PCI tree, NUMA
// nodes and CPUs from sysfs and /proc, and NICs through rdmamap and
// /sys/class/net. Its result is a topology.System, so everything
// downstream runs the same on fixtures.
//
// The sysfs and proc roots are options, so tests run on a fake tree; NVML
// sits behind the NVML interface. Without an NVML library or without GPUs,
// discovery still succeeds with CPUs, NUMA nodes and NICs and says so at
// INFO level through Options.Logf. Nothing here reads the environment.
package discover

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gotree/gotree/topology"
)

// Options configures a Discoverer. The zero value discovers the real
// machine and logs nothing.
type Options struct {
	SysRoot  string // sysfs mount point; "/sys" when empty
	ProcRoot string // procfs mount point; "/proc" when empty
	NVML     NVML   // GPU source; the system's NVML library when nil
	// Logf receives progress and INFO messages ("INFO topology: ...").
	Logf func(format string, args ...any)
}

// Discoverer implements topology.Discoverer for the local machine.
type Discoverer struct {
	o Options
}

var _ topology.Discoverer = (*Discoverer)(nil)

// New returns a Discoverer with defaults filled in.
func New(o Options) *Discoverer {
	if o.SysRoot == "" {
		o.SysRoot = "/sys"
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	if o.NVML == nil {
		o.NVML = SystemNVML()
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return &Discoverer{o: o}
}

func (d *Discoverer) info(format string, args ...any) {
	d.o.Logf("INFO topology: "+format, args...)
}

// Discover builds the system graph of this machine.
func (d *Discoverer) Discover() (*topology.System, error) {
	sys := &topology.System{}
	sf := sysfs{root: d.o.SysRoot, proc: d.o.ProcRoot}

	cpus, err := sf.cpus()
	if err != nil {
		return nil, err
	}
	cpuNode := map[int]int{} // NUMA id → node
	for _, c := range cpus {
		cpuNode[c.NUMA] = sys.AddNode(topology.Node{ID: fmt.Sprintf("cpu%d", c.NUMA), Type: topology.CPU, CPU: c})
	}
	firstCPU := sys.Of(topology.CPU)[0]
	tree := &pciTree{sys: sys, sf: sf, cpuNode: cpuNode, firstCPU: firstCPU, byBus: map[string]int{}}

	gpus, err := d.o.NVML.GPUs()
	switch {
	case errors.Is(err, ErrNoNVML):
		d.info("no NVML library (no NVIDIA driver): discovering CPUs, NUMA nodes and NICs only")
		gpus = nil
	case err != nil:
		d.info("NVML failed (%v): discovering CPUs, NUMA nodes and NICs only", err)
		gpus = nil
	case len(gpus) == 0:
		d.info("NVML found no GPU: discovering CPUs, NUMA nodes and NICs only")
	}
	if err := d.addGPUs(sys, tree, gpus); err != nil {
		return nil, err
	}
	nics, err := sf.nics()
	if err != nil {
		return nil, err
	}
	d.addNICs(sys, tree, nics)
	sys.ConnectCPUs()
	if err := sys.Validate(); err != nil {
		return nil, err
	}
	d.info("discovered %d GPUs, %d CPUs (NUMA nodes), %d NICs, %d PCI switches",
		sys.Count(topology.GPU), sys.Count(topology.CPU), sys.Count(topology.NIC), sys.Count(topology.PCI))
	return sys, nil
}

func (d *Discoverer) addGPUs(sys *topology.System, tree *pciTree, gpus []GPU) error {
	// Match by PCI bus id, never by NVML index: number GPUs in bus-id order,
	// which is CUDA's order under CUDA_DEVICE_ORDER=PCI_BUS_ID.
	for i := range gpus {
		gpus[i].BusID = topology.NormalizeBusID(gpus[i].BusID)
	}
	sort.SliceStable(gpus, func(a, b int) bool { return gpus[a].BusID < gpus[b].BusID })
	gdr := tree.sf.gdrLoaded()
	byBus := map[string]int{}
	for dev, g := range gpus {
		if _, dup := byBus[g.BusID]; dup {
			return fmt.Errorf("gotree/topology/discover: GPU %s listed twice by NVML", g.BusID)
		}
		if g.MIG {
			d.info("GPU %s (%s) has MIG enabled", g.BusID, g.UUID)
		}
		numa := g.NUMA
		if numa < 0 {
			numa = tree.sf.numaOf(g.BusID)
		}
		if numa < 0 {
			numa = numaByAffinity(sys, g.Affinity)
		}
		parent, pinfo, bw := tree.attach(g.BusID, numa)
		n := sys.AddNode(topology.Node{ID: fmt.Sprintf("gpu%d", dev), Type: topology.GPU, BusID: g.BusID, PCI: pinfo,
			GPU: &topology.GPUInfo{Dev: dev, Rank: dev, SM: g.SM, GDR: gdr, UUID: g.UUID, Name: g.Name, MIG: g.MIG}})
		sys.Connect(n, parent, topology.LinkPCI, bw, 0)
		byBus[g.BusID] = n
	}
	nvs := -1
	for _, g := range gpus {
		n := byBus[g.BusID]
		bw := topology.NVLinkBW(sys.Nodes[n].GPU.SM)
		counts := map[int]int{}
		var order []int
		for _, l := range g.NVLinks {
			if !l.Active {
				continue
			}
			var to int
			switch l.RemoteType {
			case RemoteSwitch:
				if nvs < 0 {
					nvs = sys.AddNode(topology.Node{ID: "nvs0", Type: topology.NVS})
				}
				to = nvs
			case RemoteGPU:
				t, ok := byBus[topology.NormalizeBusID(l.RemoteBusID)]
				if !ok {
					continue // a GPU NVML does not show us
				}
				to = t
			case RemoteCPU:
				to = tree.cpuOf(n)
			default:
				continue
			}
			if counts[to] == 0 {
				order = append(order, to)
			}
			counts[to]++
		}
		for _, to := range order {
			c := counts[to]
			sys.AddLink(n, to, topology.LinkNVL, float64(c)*bw, c)
			if sys.Nodes[to].Type != topology.GPU { // GPUs list their own side
				sys.AddLink(to, n, topology.LinkNVL, float64(c)*bw, c)
			}
		}
		peers := make([]string, 0, len(g.P2P))
		for peer, ok := range g.P2P {
			if !ok {
				peers = append(peers, peer)
			}
		}
		sort.Strings(peers)
		for _, peer := range peers {
			d.info("GPU %s cannot read from GPU %s by P2P", g.BusID, peer)
		}
	}
	return nil
}

func (d *Discoverer) addNICs(sys *topology.System, tree *pciTree, nics []nicInfo) {
	dev := 0
	nicNode := map[string]int{}
	for _, nc := range nics {
		n, ok := nicNode[nc.busID]
		if !ok || nc.busID == "" {
			var parent int
			var pinfo *topology.PCIInfo
			bw := topology.LocBW
			if nc.busID != "" {
				parent, pinfo, bw = tree.attach(nc.busID, -1)
			} else {
				parent = tree.firstCPU
			}
			n = sys.AddNode(topology.Node{Type: topology.NIC, BusID: nc.busID, PCI: pinfo})
			sys.Connect(n, parent, topology.LinkPCI, bw, 0)
			nicNode[nc.busID] = n
		}
		for _, p := range nc.ports {
			m := sys.AddNode(topology.Node{ID: fmt.Sprintf("net%d", dev), Type: topology.NET, NET: &topology.NetInfo{
				Name: p.name, Dev: dev, SpeedMbps: p.mbps, Port: p.port, GUID: nc.guid, GDR: nc.rdma && tree.sf.gdrLoaded(), NetDev: p.netdev}})
			sys.Connect(n, m, topology.LinkNET, topology.NetBW(p.mbps), 0)
			dev++
		}
	}
}

// numaByAffinity returns the NUMA node whose CPUs overlap an NVML CPU
// affinity mask (64 CPUs per word, word 0 = CPUs 0-63), or -1.
func numaByAffinity(sys *topology.System, aff []uint) int {
	if len(aff) == 0 {
		return -1
	}
	for _, c := range sys.Of(topology.CPU) {
		cpu := sys.Nodes[c].CPU
		mask := parseCPUMap(cpu.Affinity)
		for i, w := range aff {
			if i < len(mask) && uint64(w)&mask[i] != 0 {
				return cpu.NUMA
			}
		}
	}
	return -1
}

// parseCPUMap parses a sysfs cpumap ("0000ffff,ffffffff": 32-bit groups,
// most significant first) into 64-bit words, word 0 = CPUs 0-63.
func parseCPUMap(s string) []uint64 {
	groups := strings.Split(strings.TrimSpace(s), ",")
	var words []uint64
	for i := len(groups) - 1; i >= 0; i-- {
		v, err := strconv.ParseUint(groups[i], 16, 32)
		if err != nil {
			return nil
		}
		k := len(groups) - 1 - i
		if k/2 >= len(words) {
			words = append(words, 0)
		}
		words[k/2] |= v << (32 * uint(k%2))
	}
	return words
}
