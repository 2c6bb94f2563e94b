package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// The few driver API types we need, declared here so that the package builds
// without cuda.h (the ABI of these has been stable since CUDA 4).
typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;

struct gp_api {
	void *lib;
	CUresult (*Init)(unsigned int);
	CUresult (*DriverGetVersion)(int *);
	CUresult (*DeviceGetCount)(int *);
	CUresult (*DeviceGet)(CUdevice *, int);
	CUresult (*DeviceGetName)(char *, int, CUdevice);
	CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
	CUresult (*DeviceGetUuid)(unsigned char *, CUdevice);
	CUresult (*DeviceTotalMem)(size_t *, CUdevice);
	CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*PrimaryCtxRelease)(CUdevice);
	CUresult (*CtxSetCurrent)(CUcontext);
	CUresult (*CtxSynchronize)(void);
	CUresult (*ModuleLoadDataEx)(CUmodule *, const void *, unsigned int, int *, void **);
	CUresult (*ModuleUnload)(CUmodule);
	CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
	CUresult (*ModuleGetGlobal)(CUdeviceptr *, size_t *, CUmodule, const char *);
	CUresult (*MemAlloc)(CUdeviceptr *, size_t);
	CUresult (*MemFree)(CUdeviceptr);
	CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
	CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
	CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
	CUresult (*MemHostRegister)(void *, size_t, unsigned int);
	CUresult (*MemHostUnregister)(void *);
	CUresult (*MemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned int);
	CUresult (*LaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int,
		unsigned int, unsigned int, unsigned int, unsigned int, CUstream, void **, void **);
	CUresult (*GetErrorName)(CUresult, const char **);
	CUresult (*GetErrorString)(CUresult, const char **);
};

static struct gp_api gp;

// gp_open loads the driver library and resolves every entry point; gp is
// only replaced when everything resolved. It returns 0,
// -1 when the library is missing, or 1 + the index of a missing symbol.
static int gp_open(const char *lib, char *err, int errlen) {
	struct gp_api api;
	memset(&api, 0, sizeof(api));
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		strncpy(err, e ? e : "dlopen failed", errlen - 1);
		err[errlen - 1] = 0;
		return -1;
	}
	static const char *names[] = {
		"cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet",
		"cuDeviceGetName", "cuDeviceGetAttribute", "cuDeviceGetUuid",
		"cuDeviceTotalMem_v2", "cuDevicePrimaryCtxRetain",
		"cuDevicePrimaryCtxRelease_v2", "cuCtxSetCurrent", "cuCtxSynchronize",
		"cuModuleLoadDataEx", "cuModuleUnload", "cuModuleGetFunction",
		"cuModuleGetGlobal_v2", "cuMemAlloc_v2", "cuMemFree_v2",
		"cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemsetD8_v2",
		"cuMemHostRegister_v2", "cuMemHostUnregister",
		"cuMemHostGetDevicePointer_v2", "cuLaunchKernel", "cuGetErrorName",
		"cuGetErrorString",
	};
	void **slots = (void **)&api.Init;
	for (int i = 0; i < (int)(sizeof(names) / sizeof(names[0])); i++) {
		slots[i] = dlsym(h, names[i]);
		if (!slots[i]) {
			strncpy(err, names[i], errlen - 1);
			err[errlen - 1] = 0;
			dlclose(h);
			return 1 + i;
		}
	}
	api.lib = h;
	gp = api;
	return 0;
}

static CUresult gp_init(void) { return gp.Init(0); }
static CUresult gp_driver_version(int *v) { return gp.DriverGetVersion(v); }
static CUresult gp_device_count(int *n) { return gp.DeviceGetCount(n); }
static CUresult gp_device_get(CUdevice *d, int ordinal) { return gp.DeviceGet(d, ordinal); }
static CUresult gp_device_name(char *name, int len, CUdevice d) { return gp.DeviceGetName(name, len, d); }
static CUresult gp_device_attribute(int *v, int attr, CUdevice d) { return gp.DeviceGetAttribute(v, attr, d); }
static CUresult gp_device_uuid(unsigned char *u, CUdevice d) { return gp.DeviceGetUuid(u, d); }
static CUresult gp_device_total_mem(size_t *n, CUdevice d) { return gp.DeviceTotalMem(n, d); }
static CUresult gp_primary_retain(CUcontext *c, CUdevice d) { return gp.PrimaryCtxRetain(c, d); }
static CUresult gp_primary_release(CUdevice d) { return gp.PrimaryCtxRelease(d); }
static CUresult gp_ctx_set_current(CUcontext c) { return gp.CtxSetCurrent(c); }
static CUresult gp_ctx_synchronize(void) { return gp.CtxSynchronize(); }

// gp_module_load loads a PTX or cubin image with the JIT's error log.
static CUresult gp_module_load(CUmodule *m, const void *image, char *log, size_t loglen) {
	int opts[2] = {5, 6}; // CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
	void *vals[2] = {log, (void *)(uintptr_t)loglen};
	return gp.ModuleLoadDataEx(m, image, 2, opts, vals);
}
static CUresult gp_module_unload(CUmodule m) { return gp.ModuleUnload(m); }
static CUresult gp_module_function(CUfunction *f, CUmodule m, const char *name) { return gp.ModuleGetFunction(f, m, name); }
static CUresult gp_module_global(CUdeviceptr *p, size_t *n, CUmodule m, const char *name) { return gp.ModuleGetGlobal(p, n, m, name); }
static CUresult gp_mem_alloc(CUdeviceptr *p, size_t n) { return gp.MemAlloc(p, n); }
static CUresult gp_mem_free(CUdeviceptr p) { return gp.MemFree(p); }
static CUresult gp_htod(CUdeviceptr dst, const void *src, size_t n) { return gp.MemcpyHtoD(dst, src, n); }
static CUresult gp_dtoh(void *dst, CUdeviceptr src, size_t n) { return gp.MemcpyDtoH(dst, src, n); }
static CUresult gp_memset(CUdeviceptr dst, unsigned char v, size_t n) { return gp.MemsetD8(dst, v, n); }
static CUresult gp_host_register(void *p, size_t n, unsigned int flags) { return gp.MemHostRegister(p, n, flags); }
static CUresult gp_host_unregister(void *p) { return gp.MemHostUnregister(p); }
static CUresult gp_host_device_pointer(CUdeviceptr *d, void *p) { return gp.MemHostGetDevicePointer(d, p, 0); }

// gp_launch launches f with n 8-byte parameters taken from vals.
static CUresult gp_launch(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
		unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
		unsigned long long *vals, int n) {
	void *ptrs[64];
	if (n > 64)
		return 1; // CUDA_ERROR_INVALID_VALUE
	for (int i = 0; i < n; i++)
		ptrs[i] = &vals[i];
	return gp.LaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, 0, ptrs, 0);
}

static const char *gp_error_name(CUresult r) {
	const char *s = 0;
	if (gp.GetErrorName(r, &s) != 0 || !s)
		return "CUDA_ERROR_UNKNOWN";
	return s;
}
static const char *gp_error_string(CUresult r) {
	const char *s = 0;
	if (gp.GetErrorString(r, &s) != 0 || !s)
		return "";
	return s;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// ErrNoDriver means libcuda.so.1 could not be loaded: no NVIDIA driver.
var ErrNoDriver = errors.New("no NVIDIA driver: libcuda.so.1 not found")

// ErrNoDevice means the driver loaded but found no CUDA device.
var ErrNoDevice = errors.New("no CUDA device")

// cudaErrorNoDevice is CUDA_ERROR_NO_DEVICE.
const cudaErrorNoDevice = 100

// Error is a failed driver API call.
type Error struct {
	Op   string // the driver function, e.g. "cuModuleLoadDataEx"
	Code int    // CUresult
	Name string // e.g. "CUDA_ERROR_INVALID_PTX"
	Msg  string // the driver's description
	Log  string // the JIT error log, for module loads
}

// Error formats the call, the CUresult and the JIT log if any.
func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %s (%d)", e.Op, e.Name, e.Code)
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	if e.Log != "" {
		s += "\n" + e.Log
	}
	return s
}

func check(op string, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	return &Error{Op: op, Code: int(r), Name: C.GoString(C.gp_error_name(r)), Msg: C.GoString(C.gp_error_string(r))}
}

var (
	initOnce sync.Once
	initErr  error
)

// Init loads libcuda.so.1 and calls cuInit once; later calls return the
// first result. Without a driver it returns an error wrapping ErrNoDriver.
func Init() error {
	initOnce.Do(func() {
		if initErr = open("libcuda.so.1"); initErr != nil {
			return
		}
		if r := C.gp_init(); r == cudaErrorNoDevice {
			initErr = fmt.Errorf("%w: %v", ErrNoDevice, check("cuInit", r))
		} else {
			initErr = check("cuInit", r)
		}
	})
	return initErr
}

// open loads the driver library and resolves its entry points.
func open(lib string) error {
	var buf [256]C.char
	cs := C.CString(lib)
	defer C.free(unsafe.Pointer(cs))
	switch r := C.gp_open(cs, &buf[0], C.int(len(buf))); {
	case r < 0:
		return fmt.Errorf("%w (%s)", ErrNoDriver, C.GoString(&buf[0]))
	case r > 0:
		return fmt.Errorf("%s lacks %s: driver too old", lib, C.GoString(&buf[0]))
	}
	return nil
}

// DriverVersion is the CUDA version the driver supports, e.g. 13000.
func DriverVersion() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var v C.int
	if err := check("cuDriverGetVersion", C.gp_driver_version(&v)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceCount is the number of CUDA devices.
func DeviceCount() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var n C.int
	if err := check("cuDeviceGetCount", C.gp_device_count(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Device is a CUDA device handle.
type Device struct{ d C.CUdevice }

// GetDevice returns the device with the given ordinal.
func GetDevice(ordinal int) (Device, error) {
	if err := Init(); err != nil {
		return Device{}, err
	}
	var d C.CUdevice
	if err := check("cuDeviceGet", C.gp_device_get(&d, C.int(ordinal))); err != nil {
		return Device{}, fmt.Errorf("device %d: %w", ordinal, err)
	}
	return Device{d}, nil
}

// Attribute is a CUdevice_attribute.
type Attribute int

// Device attributes we use.
const (
	AttrWarpSize            Attribute = 10
	AttrMultiprocessorCount Attribute = 16
	AttrComputeCapMajor     Attribute = 75
	AttrComputeCapMinor     Attribute = 76
)

// Attribute reads a device attribute.
func (d Device) Attribute(a Attribute) (int, error) {
	var v C.int
	if err := check("cuDeviceGetAttribute", C.gp_device_attribute(&v, C.int(a), d.d)); err != nil {
		return 0, fmt.Errorf("attribute %d: %w", int(a), err)
	}
	return int(v), nil
}

// ComputeCapability returns major and minor, e.g. 9, 0 for an H100.
func (d Device) ComputeCapability() (major, minor int, err error) {
	if major, err = d.Attribute(AttrComputeCapMajor); err != nil {
		return 0, 0, err
	}
	if minor, err = d.Attribute(AttrComputeCapMinor); err != nil {
		return 0, 0, err
	}
	return major, minor, nil
}

// Arch is the ptxas/PTX target of the device, e.g. "sm_90".
func (d Device) Arch() (string, error) {
	major, minor, err := d.ComputeCapability()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("sm_%d%d", major, minor), nil
}

// Name is the device's name, e.g. "NVIDIA H100 80GB HBM3".
func (d Device) Name() (string, error) {
	var buf [256]C.char
	if err := check("cuDeviceGetName", C.gp_device_name(&buf[0], C.int(len(buf)), d.d)); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

// UUID is the device's 16-byte UUID.
func (d Device) UUID() ([16]byte, error) {
	var u [16]C.uchar
	var out [16]byte
	if err := check("cuDeviceGetUuid", C.gp_device_uuid(&u[0], d.d)); err != nil {
		return out, err
	}
	for i := range u {
		out[i] = byte(u[i])
	}
	return out, nil
}

// TotalMem is the device memory in bytes.
func (d Device) TotalMem() (uint64, error) {
	var n C.size_t
	if err := check("cuDeviceTotalMem", C.gp_device_total_mem(&n, d.d)); err != nil {
		return 0, err
	}
	return uint64(n), nil
}

// Context is a device's primary context. Every method makes it current on
// the calling OS thread for the duration of the call, so goroutines may
// use it from any thread.
type Context struct {
	dev Device
	ctx C.CUcontext
	mu  sync.Mutex
}

// PrimaryContext retains the device's primary context.
func (d Device) PrimaryContext() (*Context, error) {
	var c C.CUcontext
	if err := check("cuDevicePrimaryCtxRetain", C.gp_primary_retain(&c, d.d)); err != nil {
		return nil, err
	}
	return &Context{dev: d, ctx: c}, nil
}

// Release releases the primary context (once).
func (c *Context) Release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		return nil
	}
	c.ctx = nil
	return check("cuDevicePrimaryCtxRelease", C.gp_primary_release(c.dev.d))
}

// do runs f with c current on a locked OS thread.
func (c *Context) do(f func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		return errors.New("cuda: context released")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := check("cuCtxSetCurrent", C.gp_ctx_set_current(c.ctx)); err != nil {
		return err
	}
	return f()
}

// Synchronize waits for all work in the context; it reports kernel faults.
func (c *Context) Synchronize() error {
	return c.do(func() error { return check("cuCtxSynchronize", C.gp_ctx_synchronize()) })
}

// Module is a loaded module.
type Module struct {
	c *Context
	m C.CUmodule
}

// LoadModule loads a PTX (NUL-terminated here) or cubin image. A JIT
// failure's error carries the JIT error log.
func (c *Context) LoadModule(image []byte) (*Module, error) {
	if len(image) == 0 {
		return nil, errors.New("cuda: empty module image")
	}
	img := C.CBytes(append(append([]byte(nil), image...), 0))
	defer C.free(img)
	const logLen = 16 << 10
	log := (*C.char)(C.calloc(logLen, 1))
	defer C.free(unsafe.Pointer(log))
	m := &Module{c: c}
	err := c.do(func() error {
		if err := check("cuModuleLoadDataEx", C.gp_module_load(&m.m, img, log, logLen)); err != nil {
			var ce *Error
			if errors.As(err, &ce) {
				ce.Log = C.GoString(log)
			}
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Unload unloads the module.
func (m *Module) Unload() error {
	return m.c.do(func() error { return check("cuModuleUnload", C.gp_module_unload(m.m)) })
}

// Function is a kernel of a module.
type Function struct {
	c *Context
	f C.CUfunction
}

// Function looks up an .entry by name.
func (m *Module) Function(name string) (*Function, error) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	f := &Function{c: m.c}
	err := m.c.do(func() error { return check("cuModuleGetFunction", C.gp_module_function(&f.f, m.m, cs)) })
	if err != nil {
		return nil, fmt.Errorf("kernel %q: %w", name, err)
	}
	return f, nil
}

// DevicePtr is a device address.
type DevicePtr uint64

// Global returns the device address and size of a module-scope variable.
func (m *Module) Global(name string) (DevicePtr, uint64, error) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var p C.CUdeviceptr
	var n C.size_t
	err := m.c.do(func() error { return check("cuModuleGetGlobal", C.gp_module_global(&p, &n, m.m, cs)) })
	if err != nil {
		return 0, 0, fmt.Errorf("global %q: %w", name, err)
	}
	return DevicePtr(p), uint64(n), nil
}

// MemAlloc allocates n bytes of device memory.
func (c *Context) MemAlloc(n uint64) (DevicePtr, error) {
	var p C.CUdeviceptr
	err := c.do(func() error { return check("cuMemAlloc", C.gp_mem_alloc(&p, C.size_t(n))) })
	return DevicePtr(p), err
}

// MemFree frees device memory.
func (c *Context) MemFree(p DevicePtr) error {
	return c.do(func() error { return check("cuMemFree", C.gp_mem_free(C.CUdeviceptr(p))) })
}

// MemcpyHtoD copies src to device memory at dst.
func (c *Context) MemcpyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return c.do(func() error {
		return check("cuMemcpyHtoD", C.gp_htod(C.CUdeviceptr(dst), unsafe.Pointer(&src[0]), C.size_t(len(src))))
	})
}

// MemcpyDtoH copies device memory at src into dst.
func (c *Context) MemcpyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return c.do(func() error {
		return check("cuMemcpyDtoH", C.gp_dtoh(unsafe.Pointer(&dst[0]), C.CUdeviceptr(src), C.size_t(len(dst))))
	})
}

// Memset sets n bytes at p to v.
func (c *Context) Memset(p DevicePtr, v byte, n uint64) error {
	return c.do(func() error { return check("cuMemsetD8", C.gp_memset(C.CUdeviceptr(p), C.uchar(v), C.size_t(n))) })
}

// Host registration flags (CU_MEMHOSTREGISTER_*).
const (
	HostRegisterPortable  = 0x1
	HostRegisterDeviceMap = 0x2
)

// HostRegister page-locks n bytes at p and maps them into the device's
// address space, returning the device address. p must not be Go-managed
// memory: use an mmap'd region (such as an shm region).
func (c *Context) HostRegister(p unsafe.Pointer, n uintptr, flags uint) (DevicePtr, error) {
	var d C.CUdeviceptr
	err := c.do(func() error {
		if err := check("cuMemHostRegister", C.gp_host_register(p, C.size_t(n), C.uint(flags))); err != nil {
			return err
		}
		return check("cuMemHostGetDevicePointer", C.gp_host_device_pointer(&d, p))
	})
	return DevicePtr(d), err
}

// HostUnregister undoes HostRegister.
func (c *Context) HostUnregister(p unsafe.Pointer) error {
	return c.do(func() error { return check("cuMemHostUnregister", C.gp_host_unregister(p)) })
}

// Dim3 is a grid or block size.
type Dim3 struct{ X, Y, Z uint32 }

// Launch launches f on the default stream with 8-byte parameters (device
// pointers and u64 values); it does not wait for completion.
func (f *Function) Launch(grid, block Dim3, sharedMem uint32, params ...uint64) error {
	if len(params) > 64 {
		return fmt.Errorf("cuda: %d kernel parameters, at most 64", len(params))
	}
	vals := (*C.ulonglong)(C.calloc(C.size_t(len(params)+1), 8))
	defer C.free(unsafe.Pointer(vals))
	arr := unsafe.Slice(vals, len(params)+1)
	for i, p := range params {
		arr[i] = C.ulonglong(p)
	}
	return f.c.do(func() error {
		return check("cuLaunchKernel", C.gp_launch(f.f, C.uint(grid.X), C.uint(grid.Y), C.uint(grid.Z),
			C.uint(block.X), C.uint(block.Y), C.uint(block.Z), C.uint(sharedMem), vals, C.int(len(params))))
	})
}
