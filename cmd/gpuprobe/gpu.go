//go:build cgo

package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gpuprobe/gpuprobe/internal/cuda"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/conformance"
	"github.com/gpuprobe/gpuprobe/jit/ptx"
)

// The GPU runner of `gpuprobe conformance -gpu`: each case is compiled to
// PTX (ptx.TestKernel), JIT-loaded by the driver, and launched twice: as
// one thread and as one full warp of 32 threads, each thread on its own
// copy of the case's memory. Every thread of both launches must return the
// same r0, which is then compared with the expected result.
func init() {
	conformance.RegisterGPURunner(newGPURunner)
	Register(&Command{
		Name:    "ptx",
		Summary: "print the standalone PTX test module of bpf_conformance .data files (for ptxas and SASS comparisons)",
		Run:     runPTX,
	})
}

// runPTX prints ptx.TestKernel's module for each .data file.
func runPTX(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("ptx", stderr)
	arch := fs.String("arch", ptx.DefaultArch, "PTX .target")
	comments := fs.Bool("comments", false, "annotate the PTX with the eBPF instructions")
	aligned := fs.Bool("aligned", false, "assume naturally aligned pointers (no run-time alignment checks)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gpuprobe ptx [-arch sm_90] [-aligned] [-comments] FILE.data...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return usageStatus(err)
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	for _, path := range fs.Args() {
		c, err := conformance.ParseFile(path)
		if err != nil {
			fmt.Fprintf(stderr, "gpuprobe ptx: %v\n", err)
			return 1
		}
		p, err := c.Program()
		if err != nil {
			fmt.Fprintf(stderr, "gpuprobe ptx: %s: %v\n", path, err)
			return 1
		}
		module, _, err := ptx.TestKernel(p, ptx.Options{Arch: *arch, Conformance: true, Comments: *comments, AssumeAligned: *aligned})
		if err != nil {
			fmt.Fprintf(stderr, "gpuprobe ptx: %s: %v\n", path, err)
			return 1
		}
		fmt.Fprint(stdout, module)
	}
	return 0
}

// gpuLaunchSizes are the block sizes each case runs with.
var gpuLaunchSizes = []int{1, 32}

type gpuRunner struct {
	ctx  *cuda.Context
	arch string
	name string
}

func newGPURunner() (conformance.Runner, error) {
	n, err := cuda.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("GPU runner: %w", err)
	}
	if n == 0 {
		return nil, fmt.Errorf("GPU runner: %w", cuda.ErrNoDevice)
	}
	dev, err := cuda.GetDevice(0)
	if err != nil {
		return nil, fmt.Errorf("GPU runner: %w", err)
	}
	major, minor, err := dev.ComputeCapability()
	if err != nil {
		return nil, fmt.Errorf("GPU runner: %w", err)
	}
	name, _ := dev.Name()
	ctx, err := dev.PrimaryContext()
	if err != nil {
		return nil, fmt.Errorf("GPU runner: %w", err)
	}
	return &gpuRunner{ctx: ctx, arch: ptxArch(major, minor), name: name}, nil
}

// ptxArch is the .target to generate for a device: its own up to sm_90
// (PTX for sm_90 is JIT-compiled forward onto newer GPUs, and .version 7.8
// does not know later targets).
func ptxArch(major, minor int) string {
	if major*10+minor >= 90 {
		return "sm_90"
	}
	return fmt.Sprintf("sm_%d%d", major, minor)
}

// Name names the runner and its device.
func (r *gpuRunner) Name() string { return "gpu " + r.name + " (" + r.arch + ")" }

// Run compiles p, runs it as 1 and 32 threads, and returns r0.
func (r *gpuRunner) Run(c *conformance.Case, p *jit.Program) (uint64, error) {
	module, f, err := ptx.TestKernel(p, ptx.Options{Arch: r.arch, Conformance: true})
	if err != nil {
		return 0, fmt.Errorf("compile: %w", err)
	}
	mod, err := r.ctx.LoadModule([]byte(module))
	if err != nil {
		return 0, fmt.Errorf("load PTX: %w", err)
	}
	defer mod.Unload()
	fn, err := mod.Function(ptx.TestEntry(f))
	if err != nil {
		return 0, err
	}
	var results []uint64
	for _, threads := range gpuLaunchSizes {
		got, err := r.launch(fn, c.Mem, threads)
		if err != nil {
			return 0, fmt.Errorf("%d thread(s): %w", threads, err)
		}
		results = append(results, got...)
	}
	return agree(results)
}

// launch runs the test kernel with one block of threads and returns each
// thread's r0.
func (r *gpuRunner) launch(fn *cuda.Function, mem []byte, threads int) ([]uint64, error) {
	copies := memCopies(mem, threads)
	dmem, err := r.ctx.MemAlloc(uint64(max(len(copies), 8)))
	if err != nil {
		return nil, err
	}
	defer r.ctx.MemFree(dmem)
	if err := r.ctx.MemcpyHtoD(dmem, copies); err != nil {
		return nil, err
	}
	dres, err := r.ctx.MemAlloc(uint64(8 * threads))
	if err != nil {
		return nil, err
	}
	defer r.ctx.MemFree(dres)
	if err := r.ctx.Memset(dres, 0xa5, uint64(8*threads)); err != nil {
		return nil, err
	}
	err = fn.Launch(cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: uint32(threads), Y: 1, Z: 1}, 0,
		uint64(dmem), uint64(len(mem)), uint64(dres))
	if err != nil {
		return nil, err
	}
	if err := r.ctx.Synchronize(); err != nil {
		return nil, fmt.Errorf("kernel: %w", err)
	}
	out := make([]byte, 8*threads)
	if err := r.ctx.MemcpyDtoH(out, dres); err != nil {
		return nil, err
	}
	res := make([]uint64, threads)
	for i := range res {
		res[i] = binary.LittleEndian.Uint64(out[8*i:])
	}
	return res, nil
}

// memCopies lays out n copies of mem, each at a multiple of
// align8(len(mem)), as the test kernel expects.
func memCopies(mem []byte, n int) []byte {
	stride := (len(mem) + 7) &^ 7
	b := make([]byte, stride*n)
	for i := 0; i < n; i++ {
		copy(b[i*stride:], mem)
	}
	return b
}

// agree returns the common value of all results, or an error listing the
// threads that disagree with thread 0 of the first launch.
func agree(results []uint64) (uint64, error) {
	if len(results) == 0 {
		return 0, errors.New("no results")
	}
	var bad []string
	for i, v := range results {
		if v != results[0] {
			bad = append(bad, fmt.Sprintf("result %d = %#x", i, v))
		}
	}
	if len(bad) > 0 {
		if len(bad) > 4 {
			bad = append(bad[:4], fmt.Sprintf("and %d more", len(bad)-4))
		}
		return 0, fmt.Errorf("threads disagree: result 0 = %#x, %s", results[0], strings.Join(bad, ", "))
	}
	return results[0], nil
}
