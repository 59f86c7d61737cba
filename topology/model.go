package topology

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// NodeType is the kind of a node in the system graph.
type NodeType int

// Node types, in NCCL's order.
const (
	GPU NodeType = iota // a GPU
	PCI                 // a PCI switch (or host bridge port)
	NVS                 // the NVSwitch fabric: all switches merged into one node
	CPU                 // a CPU socket / NUMA domain
	NIC                 // a network adapter (one PCI function)
	NET                 // a network port of a NIC
	numNodeTypes
)

var nodeTypeNames = [...]string{"GPU", "PCI", "NVS", "CPU", "NIC", "NET"}

func (t NodeType) String() string {
	if t < 0 || t >= numNodeTypes {
		return fmt.Sprintf("NodeType(%d)", int(t))
	}
	return nodeTypeNames[t]
}

// MarshalText implements encoding.TextMarshaler.
func (t NodeType) MarshalText() ([]byte, error) {
	if t < 0 || t >= numNodeTypes {
		return nil, fmt.Errorf("gotree/topology: bad node type %d", int(t))
	}
	return []byte(t.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (t *NodeType) UnmarshalText(b []byte) error {
	for i, n := range nodeTypeNames {
		if strings.EqualFold(n, string(b)) {
			*t = NodeType(i)
			return nil
		}
	}
	return fmt.Errorf("gotree/topology: unknown node type %q", b)
}

// LinkType is the kind of a link between two nodes.
type LinkType int

// Link types. NET links join a NIC to its ports; they do not count towards
// a path's type.
const (
	LinkLOC LinkType = iota
	LinkNVL
	LinkPCI
	LinkSYS
	LinkNET
	numLinkTypes
)

var linkTypeNames = [...]string{"LOC", "NVL", "PCI", "SYS", "NET"}

func (t LinkType) String() string {
	if t < 0 || t >= numLinkTypes {
		return fmt.Sprintf("LinkType(%d)", int(t))
	}
	return linkTypeNames[t]
}

// MarshalText implements encoding.TextMarshaler.
func (t LinkType) MarshalText() ([]byte, error) {
	if t < 0 || t >= numLinkTypes {
		return nil, fmt.Errorf("gotree/topology: bad link type %d", int(t))
	}
	return []byte(t.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (t *LinkType) UnmarshalText(b []byte) error {
	for i, n := range linkTypeNames {
		if strings.EqualFold(n, string(b)) {
			*t = LinkType(i)
			return nil
		}
	}
	return fmt.Errorf("gotree/topology: unknown link type %q", b)
}

// PathType classifies the route between two nodes, from best to worst, with
// NCCL's names and order.
type PathType int

// Path types.
const (
	PathLOC PathType = iota // the node itself
	PathNVL                 // direct NVLink (or through the NVSwitch fabric)
	PathNVB                 // NVLink through one intermediate GPU
	PathPIX                 // through at most one PCI switch
	PathPXB                 // through several PCI switches, not the CPU
	PathPXN                 // to a NIC through an NVLink peer GPU that is near it
	PathPHB                 // through a CPU's PCI host bridge
	PathSYS                 // across CPUs (QPI/UPI/xGMI)
	PathNET                 // across the network
	PathDIS                 // disconnected
	numPathTypes
)

var pathTypeNames = [...]string{"LOC", "NVL", "NVB", "PIX", "PXB", "PXN", "PHB", "SYS", "NET", "DIS"}

func (t PathType) String() string {
	if t < 0 || t >= numPathTypes {
		return fmt.Sprintf("PathType(%d)", int(t))
	}
	return pathTypeNames[t]
}

// ParsePathType maps a name such as "PHB" to a PathType.
func ParsePathType(s string) (PathType, error) {
	for i, n := range pathTypeNames {
		if strings.EqualFold(n, s) {
			return PathType(i), nil
		}
	}
	return 0, fmt.Errorf("gotree/topology: unknown path type %q", s)
}

// MarshalText implements encoding.TextMarshaler.
func (t PathType) MarshalText() ([]byte, error) {
	if t < 0 || t >= numPathTypes {
		return nil, fmt.Errorf("gotree/topology: bad path type %d", int(t))
	}
	return []byte(t.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (t *PathType) UnmarshalText(b []byte) error {
	p, err := ParsePathType(string(b))
	if err != nil {
		return err
	}
	*t = p
	return nil
}

// GPUInfo holds the attributes of a GPU node.
type GPUInfo struct {
	Dev  int    `json:"dev"`            // CUDA device number on this host
	Rank int    `json:"rank"`           // local rank driving this GPU
	SM   int    `json:"sm"`             // compute capability ×10 (70 = V100, 80 = A100, 90 = H100)
	GDR  bool   `json:"gdr,omitempty"`  // GPUDirect RDMA capable
	UUID string `json:"uuid,omitempty"` // NVML UUID
	Name string `json:"name,omitempty"` // product name
	MIG  bool   `json:"mig,omitempty"`  // MIG mode enabled
}

// CPUInfo holds the attributes of a CPU (NUMA domain) node.
type CPUInfo struct {
	NUMA      int    `json:"numa"`
	Arch      string `json:"arch,omitempty"`      // x86_64, arm64, ppc64
	Vendor    string `json:"vendor,omitempty"`    // GenuineIntel, AuthenticAMD
	Family    int    `json:"family,omitempty"`    // CPUID family
	Model     int    `json:"model,omitempty"`     // CPUID model
	ModelName string `json:"modelname,omitempty"` // /proc/cpuinfo "model name"
	Affinity  string `json:"affinity,omitempty"`  // CPU mask, as in sysfs cpumap
}

// PCIInfo holds the PCI attributes of a node with a PCI function (a switch,
// a GPU, a NIC): its link to its parent runs at LinkSpeed × LinkWidth.
type PCIInfo struct {
	Class     string `json:"class,omitempty"`  // "0x060400"
	Vendor    string `json:"vendor,omitempty"` // "0x10de"
	Device    string `json:"device,omitempty"`
	LinkSpeed string `json:"link_speed,omitempty"` // "16.0 GT/s PCIe"
	LinkWidth int    `json:"link_width,omitempty"`
}

// NetInfo holds the attributes of a network port (NET node).
type NetInfo struct {
	Name      string `json:"name"`             // RDMA device (mlx5_0) or netdev name
	Dev       int    `json:"dev"`              // network device index
	SpeedMbps int    `json:"speed"`            // link speed in Mb/s
	Port      int    `json:"port,omitempty"`   // RDMA port number
	GUID      string `json:"guid,omitempty"`   // node GUID; ports of one ASIC share it
	GDR       bool   `json:"gdr,omitempty"`    // GPUDirect RDMA capable
	NetDev    string `json:"netdev,omitempty"` // Linux network interface
}

// Node is a vertex of the system graph. Exactly one of the attribute
// pointers matching Type is set (PCI may also be set on GPUs and NICs).
type Node struct {
	ID    string   `json:"id"`              // unique: gpu0, pci3, nvs0, cpu1, nic0, net0
	Type  NodeType `json:"type"`            //
	BusID string   `json:"busid,omitempty"` // normalised PCI address, "0000:3b:00.0"
	GPU   *GPUInfo `json:"gpu,omitempty"`
	CPU   *CPUInfo `json:"cpu,omitempty"`
	PCI   *PCIInfo `json:"pci,omitempty"`
	NET   *NetInfo `json:"net,omitempty"`
}

// Link is a directed edge. Hardware links are full duplex; they appear as
// two Links, one per direction, each with the bandwidth of one direction.
type Link struct {
	From, To int      // node indices
	Type     LinkType //
	BW       float64  // GB/s in this direction
	Count    int      // NVLinks bundled in this link (0 for other types)
}

// System is the graph of one host. Build it with AddNode and Connect; the
// zero value is an empty system.
type System struct {
	Nodes []Node
	Links []Link
	out   [][]int // node → outgoing link indices
}

// Bandwidths in GB/s, after NCCL's topo.h.
const (
	LocBW     = 5000.0 // a node to itself
	IntelBDW  = 6.0    // QPI, Intel before Skylake
	IntelSKL  = 10.0   // UPI, Skylake and later
	AMDBW     = 16.0   // xGMI
	PowerBW   = 32.0   // POWER9 X-bus
	ARMBW     = 6.0    // generic ARM inter-socket
	maxLinkBW = 1e6
)

// NVLinkBW is one NVLink's bandwidth in GB/s for a GPU of compute capability
// sm×10: 18 for Pascal, 20 for Volta and Ampere, 20.6 for Hopper, 40.1 for
// Blackwell.
func NVLinkBW(sm int) float64 {
	switch {
	case sm < 70:
		return 18
	case sm < 90:
		return 20
	case sm < 100:
		return 20.6
	default:
		return 40.1
	}
}

// PCIBW is the bandwidth in GB/s of a PCIe link of the given width whose
// speed is written as in sysfs ("8.0 GT/s PCIe", "16 GT/s"): NCCL's
// width × speed-code / 80, so Gen3 x16 = 12, Gen4 x16 = 24, Gen5 x16 = 48.
// An unknown speed counts as Gen3, an unknown width as x16.
func PCIBW(speed string, width int) float64 {
	code := 60.0
	if f := strings.Fields(speed); len(f) > 0 {
		if gt, err := strconv.ParseFloat(f[0], 64); err == nil && gt > 0 {
			code = gt * 7.5
		}
	}
	if width <= 0 {
		width = 16
	}
	return float64(width) * code / 80
}

// InterCPUBW is the bandwidth in GB/s of the link between two CPU sockets of
// this kind.
func InterCPUBW(c *CPUInfo) float64 {
	if c == nil {
		return IntelSKL
	}
	switch {
	case strings.HasPrefix(c.Arch, "ppc") || c.Arch == "POWER":
		return PowerBW
	case strings.HasPrefix(c.Arch, "arm") || c.Arch == "aarch64":
		return ARMBW
	case c.Vendor == "AuthenticAMD" || c.Vendor == "HygonGenuine":
		return AMDBW
	case c.Vendor == "GenuineIntel" && c.Family == 6 && c.Model > 0 && c.Model < 0x55:
		return IntelBDW
	}
	return IntelSKL
}

// NetBW converts a port speed in Mb/s to GB/s.
func NetBW(mbps int) float64 { return float64(mbps) / 8000 }

// ErrBadGraph is wrapped by Validate's errors.
var ErrBadGraph = errors.New("gotree/topology: invalid system graph")

// AddNode appends n and returns its index. An empty ID becomes the type's
// name in lower case followed by the count of nodes of that type so far.
func (s *System) AddNode(n Node) int {
	if n.ID == "" {
		n.ID = fmt.Sprintf("%s%d", strings.ToLower(n.Type.String()), s.Count(n.Type))
	}
	s.Nodes = append(s.Nodes, n)
	s.out = append(s.out, nil)
	return len(s.Nodes) - 1
}

// AddLink adds one directed link and returns its index.
func (s *System) AddLink(from, to int, t LinkType, bw float64, count int) int {
	s.ensureIndex()
	s.Links = append(s.Links, Link{From: from, To: to, Type: t, BW: bw, Count: count})
	i := len(s.Links) - 1
	s.out[from] = append(s.out[from], i)
	return i
}

// Connect adds a link in each direction with the same type and bandwidth.
func (s *System) Connect(a, b int, t LinkType, bw float64, count int) {
	s.AddLink(a, b, t, bw, count)
	s.AddLink(b, a, t, bw, count)
}

// LinkBetween returns the index of the first link from a to b, or -1.
func (s *System) LinkBetween(a, b int) int {
	s.ensureIndex()
	for _, l := range s.out[a] {
		if s.Links[l].To == b {
			return l
		}
	}
	return -1
}

// Out returns the indices of the links leaving node n.
func (s *System) Out(n int) []int {
	s.ensureIndex()
	return s.out[n]
}

func (s *System) ensureIndex() {
	if len(s.out) == len(s.Nodes) {
		return
	}
	s.out = make([][]int, len(s.Nodes))
	for i, l := range s.Links {
		s.out[l.From] = append(s.out[l.From], i)
	}
}

// ConnectCPUs joins every ordered pair of CPUs that has no link yet with a
// SYS link of the first CPU's inter-socket bandwidth.
func (s *System) ConnectCPUs() {
	cpus := s.Of(CPU)
	for _, a := range cpus {
		for _, b := range cpus {
			if a != b && s.LinkBetween(a, b) < 0 {
				s.AddLink(a, b, LinkSYS, InterCPUBW(s.Nodes[a].CPU), 0)
			}
		}
	}
}

// Count returns the number of nodes of type t.
func (s *System) Count(t NodeType) int {
	c := 0
	for i := range s.Nodes {
		if s.Nodes[i].Type == t {
			c++
		}
	}
	return c
}

// Of returns the indices of the nodes of type t in graph order; for GPUs
// use GPUs, whose order defines GPU indices.
func (s *System) Of(t NodeType) []int {
	var r []int
	for i := range s.Nodes {
		if s.Nodes[i].Type == t {
			r = append(r, i)
		}
	}
	return r
}

// GPUs returns the node indices of the GPUs ordered by CUDA device number
// (then bus id). Position i in this slice is GPU index i.
func (s *System) GPUs() []int {
	g := s.Of(GPU)
	sort.SliceStable(g, func(a, b int) bool {
		na, nb := &s.Nodes[g[a]], &s.Nodes[g[b]]
		if na.GPU.Dev != nb.GPU.Dev {
			return na.GPU.Dev < nb.GPU.Dev
		}
		return na.BusID < nb.BusID
	})
	return g
}

// Find returns the index of the node with this ID, or -1.
func (s *System) Find(id string) int {
	for i := range s.Nodes {
		if s.Nodes[i].ID == id {
			return i
		}
	}
	return -1
}

// FindBusID returns the index of the node with this PCI address (any
// spelling NormalizeBusID accepts), or -1.
func (s *System) FindBusID(busID string) int {
	b := NormalizeBusID(busID)
	for i := range s.Nodes {
		if s.Nodes[i].BusID != "" && s.Nodes[i].BusID == b {
			return i
		}
	}
	return -1
}

// Validate checks that the graph is well formed: unique IDs, attributes that
// match node types, links between existing nodes with positive bandwidth.
func (s *System) Validate() error {
	ids := map[string]bool{}
	ranks := map[int]bool{}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if n.ID == "" || ids[n.ID] {
			return fmt.Errorf("%w: node %d: empty or duplicate id %q", ErrBadGraph, i, n.ID)
		}
		ids[n.ID] = true
		switch {
		case n.Type == GPU && n.GPU == nil:
			return fmt.Errorf("%w: node %s: GPU without gpu attributes", ErrBadGraph, n.ID)
		case n.Type == CPU && n.CPU == nil:
			return fmt.Errorf("%w: node %s: CPU without cpu attributes", ErrBadGraph, n.ID)
		case n.Type == NET && n.NET == nil:
			return fmt.Errorf("%w: node %s: NET without net attributes", ErrBadGraph, n.ID)
		}
		if n.Type == GPU {
			if ranks[n.GPU.Rank] {
				return fmt.Errorf("%w: node %s: duplicate rank %d", ErrBadGraph, n.ID, n.GPU.Rank)
			}
			ranks[n.GPU.Rank] = true
		}
	}
	for i, l := range s.Links {
		if l.From < 0 || l.From >= len(s.Nodes) || l.To < 0 || l.To >= len(s.Nodes) || l.From == l.To {
			return fmt.Errorf("%w: link %d: bad ends %d->%d", ErrBadGraph, i, l.From, l.To)
		}
		if !(l.BW > 0) || l.BW > maxLinkBW {
			return fmt.Errorf("%w: link %d (%s->%s): bandwidth %g out of range", ErrBadGraph, i, s.Nodes[l.From].ID, s.Nodes[l.To].ID, l.BW)
		}
	}
	return nil
}

// NormalizeBusID writes a PCI address the way sysfs does: a 4-digit domain,
// lower case ("00000000:3B:00.0" from NVML becomes "0000:3b:00.0"). An
// address without a domain gets domain 0000. Other text is returned lower
// cased.
func NormalizeBusID(b string) string {
	b = strings.ToLower(strings.TrimSpace(b))
	parts := strings.Split(b, ":")
	switch len(parts) {
	case 2:
		return "0000:" + b
	case 3:
		d := strings.TrimLeft(parts[0], "0")
		for len(d) < 4 {
			d = "0" + d
		}
		return d + ":" + parts[1] + ":" + parts[2]
	}
	return b
}
