package discover

import (
	"errors"
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ErrNoNVML means the NVML library could not be loaded (no driver).
var ErrNoNVML = errors.New("gotree/topology/discover: NVML library not found")

// RemoteType is the kind of device at the far end of an NVLink.
type RemoteType int

// Remote device types.
const (
	RemoteUnknown RemoteType = iota
	RemoteGPU
	RemoteSwitch
	RemoteCPU // IBM NPU / CPU NVLink
)

// NVLink is one NVLink of a GPU as NVML reports it.
type NVLink struct {
	Link        int
	Active      bool
	RemoteBusID string // any spelling; normalised by discovery
	RemoteType  RemoteType
}

// GPU is what discovery needs to know about one GPU.
type GPU struct {
	BusID    string // NVML spelling ("00000000:3B:00.0") is fine
	UUID     string
	Name     string
	SM       int  // compute capability major*10+minor
	MIG      bool // MIG mode currently enabled
	NUMA     int  // NUMA node, -1 when unknown
	Affinity []uint
	NVLinks  []NVLink
	P2P      map[string]bool // peer bus id → P2P read supported
}

// NVML lists the GPUs of the machine. SystemNVML is the real one.
type NVML interface {
	GPUs() ([]GPU, error)
}

type systemNVML struct{ lib nvml.Interface }

// SystemNVML returns the NVML of this machine, loaded at run time through
// go-nvml; GPUs returns ErrNoNVML when the library is absent.
func SystemNVML() NVML { return systemNVML{lib: nvml.New()} }

func busID(p nvml.PciInfo) string {
	var b strings.Builder
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}

func (s systemNVML) GPUs() (gpus []GPU, err error) {
	defer func() {
		// A broken driver install must not take the process down.
		if r := recover(); r != nil {
			gpus, err = nil, fmt.Errorf("gotree/topology/discover: NVML panicked: %v", r)
		}
	}()
	if ret := s.lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, ErrNoNVML
		}
		return nil, fmt.Errorf("gotree/topology/discover: nvmlInit: %v", ret)
	}
	defer s.lib.Shutdown()
	n, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("gotree/topology/discover: nvmlDeviceGetCount: %v", ret)
	}
	devs := make([]nvml.Device, 0, n)
	for i := 0; i < n; i++ {
		d, ret := s.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("gotree/topology/discover: nvmlDeviceGetHandleByIndex(%d): %v", i, ret)
		}
		devs = append(devs, d)
	}
	for _, d := range devs {
		pci, ret := d.GetPciInfo()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("gotree/topology/discover: nvmlDeviceGetPciInfo: %v", ret)
		}
		g := GPU{BusID: busID(pci), NUMA: -1, P2P: map[string]bool{}}
		g.UUID, _ = d.GetUUID()
		g.Name, _ = d.GetName()
		if major, minor, ret := d.GetCudaComputeCapability(); ret == nvml.SUCCESS {
			g.SM = major*10 + minor
		}
		if cur, _, ret := d.GetMigMode(); ret == nvml.SUCCESS {
			g.MIG = cur == nvml.DEVICE_MIG_ENABLE
		}
		if numa, ret := d.GetNumaNodeId(); ret == nvml.SUCCESS {
			g.NUMA = numa
		}
		if aff, ret := d.GetCpuAffinity(16); ret == nvml.SUCCESS {
			g.Affinity = aff
		}
		for l := 0; l < nvml.NVLINK_MAX_LINKS; l++ {
			st, ret := d.GetNvLinkState(l)
			if ret != nvml.SUCCESS {
				if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
					break
				}
				continue
			}
			link := NVLink{Link: l, Active: st == nvml.FEATURE_ENABLED}
			if rp, ret := d.GetNvLinkRemotePciInfo(l); ret == nvml.SUCCESS {
				link.RemoteBusID = busID(rp)
			}
			link.RemoteType = RemoteGPU
			if rt, ret := d.GetNvLinkRemoteDeviceType(l); ret == nvml.SUCCESS {
				switch rt {
				case nvml.NVLINK_DEVICE_TYPE_SWITCH:
					link.RemoteType = RemoteSwitch
				case nvml.NVLINK_DEVICE_TYPE_IBMNPU:
					link.RemoteType = RemoteCPU
				case nvml.NVLINK_DEVICE_TYPE_GPU:
					link.RemoteType = RemoteGPU
				default:
					link.RemoteType = RemoteUnknown
				}
			}
			g.NVLinks = append(g.NVLinks, link)
		}
		for _, p := range devs {
			if p == d {
				continue
			}
			pp, ret := p.GetPciInfo()
			if ret != nvml.SUCCESS {
				continue
			}
			if st, ret := d.GetP2PStatus(p, nvml.P2P_CAPS_INDEX_READ); ret == nvml.SUCCESS {
				g.P2P[busID(pp)] = st == nvml.P2P_STATUS_OK
			}
		}
		gpus = append(gpus, g)
	}
	return gpus, nil
}
