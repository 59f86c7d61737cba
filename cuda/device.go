package cuda

import (
	"errors"
	"fmt"
)

// ErrNoDevice is wrapped by OpenDevice's error when the driver sees no
// device or not the one asked for.
var ErrNoDevice = errors.New("no such CUDA device")

// OpenDevice loads the driver (Load(libPath)) and retains the primary
// context (the one the CUDA runtime, and so torch, uses) of the device
// whose ordinal pick returns for the driver's device count.
func OpenDevice(libPath string, pick func(count int) int) (*Context, error) {
	drv, err := Load(libPath)
	if err != nil {
		return nil, err
	}
	n, err := drv.DeviceCount()
	if err != nil {
		return nil, err
	}
	ordinal := pick(n)
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("gotree/cuda: %w: device %d (the driver sees %d)", ErrNoDevice, ordinal, n)
	}
	dev, err := drv.Device(ordinal)
	if err != nil {
		return nil, err
	}
	return dev.RetainPrimaryContext()
}

// ctxDevice is GPU on a context and its kernels.
type ctxDevice struct {
	ctx *Context
	k   *Kernels
}

// NewGPU is the GPU of a context with its loaded kernels.
func NewGPU(ctx *Context, k *Kernels) GPU { return &ctxDevice{ctx, k} }

func (d *ctxDevice) Alloc(n uint64) (DevicePtr, error) {
	p, err := d.ctx.MemAlloc(n)
	if err != nil {
		return 0, err
	}
	if err := d.ctx.MemsetD8Now(p, 0, n); err != nil {
		d.ctx.MemFree(p)
		return 0, err
	}
	return p, nil
}

func (d *ctxDevice) Free(p DevicePtr) error               { return d.ctx.MemFree(p) }
func (d *ctxDevice) Upload(dst DevicePtr, b []byte) error { return d.ctx.MemcpyHtoDNow(dst, b) }

func (d *ctxDevice) HostAlloc(n int) ([]byte, DevicePtr, error) {
	p, err := d.ctx.MemHostAlloc(uint64(n), HostAllocPortable|HostAllocDeviceMap)
	if err != nil {
		return nil, 0, err
	}
	dev, err := d.ctx.MemHostGetDevicePointer(p)
	if err != nil {
		d.ctx.MemFreeHost(p)
		return nil, 0, err
	}
	b := HostBytes(p, n)
	clear(b)
	return b, dev, nil
}

func (d *ctxDevice) HostFree(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return d.ctx.MemFreeHost(hostAddr(b))
}

func (d *ctxDevice) IpcExport(p DevicePtr) (IpcMemHandle, error) { return d.ctx.IpcGetMemHandle(p) }
func (d *ctxDevice) IpcOpen(h IpcMemHandle) (DevicePtr, error)   { return d.ctx.IpcOpenMemHandle(h) }
func (d *ctxDevice) IpcClose(p DevicePtr) error                  { return d.ctx.IpcCloseMemHandle(p) }
func (d *ctxDevice) Synchronize() error                          { return d.ctx.Synchronize() }
func (d *ctxDevice) SyncStream(s uintptr) error                  { return d.ctx.WrapStream(s).Synchronize() }

func (d *ctxDevice) Launch(name string, grid, block int, stream uintptr, params ...[]byte) error {
	f, err := d.k.Func(name)
	if err != nil {
		return err
	}
	if err := f.Launch(Dim3{X: uint32(grid)}, Dim3{X: uint32(block)}, 0, d.ctx.WrapStream(stream), params...); err != nil {
		return fmt.Errorf("launching %s (%d blocks of %d threads): %w", name, grid, block, err)
	}
	return nil
}

func (d *ctxDevice) Copy(dst, src DevicePtr, n uint64, stream uintptr) error {
	return d.ctx.MemcpyDtoDAsync(dst, src, n, d.ctx.WrapStream(stream))
}

func (d *ctxDevice) CopyToHost(dst []byte, src DevicePtr, stream uintptr) error {
	if len(dst) == 0 {
		return nil
	}
	return d.ctx.MemcpyDtoHAsync(hostAddr(dst), src, uint64(len(dst)), d.ctx.WrapStream(stream))
}

func (d *ctxDevice) CopyFromHost(dst DevicePtr, src []byte, stream uintptr) error {
	if len(src) == 0 {
		return nil
	}
	return d.ctx.MemcpyHtoDAsync(dst, hostAddr(src), uint64(len(src)), d.ctx.WrapStream(stream))
}

func (d *ctxDevice) Ordinal() int { return d.ctx.Dev.Ordinal }

func (d *ctxDevice) BusID() string {
	id, err := d.ctx.Dev.PCIBusID()
	if err != nil {
		return ""
	}
	return id
}

func (d *ctxDevice) Capturing(stream uintptr) (bool, error) {
	return d.ctx.WrapStream(stream).Capturing()
}

func (d *ctxDevice) MaxBlocks(threads int) int { return residentBlocks(d.ctx, d.k, threads) }

// residentBlocks is how many blocks of threads threads of the step
// interpreter the device holds at once (one per SM if the attributes
// cannot be read).
func residentBlocks(ctx *Context, k *Kernels, threads int) int {
	sms, err := ctx.Dev.Attribute(AttrMultiprocessorCount)
	if err != nil || sms < 1 {
		sms = 1
	}
	perSM := 1
	if f, err := k.Func("gotree_run_f32_sum"); err == nil {
		if regs, err := f.Attribute(FuncNumRegs); err == nil && regs > 0 {
			perSM = max(1, min(65536/(regs*threads), 2048/threads))
		}
	}
	return sms * perSM
}
