//go:build cgo

// Command gpuprobe-gpucheck checks the PTX injector on a GPU (it is built
// here and carried to the GPU machine; it needs libcuda.so.1 at run time).
// Given the PTX of testdata/cuda/inject/*.cu (nvcc -ptx there), it patches
// each sample kernel with kernel_phases (and threadhist, kernelretsnoop,
// memcount from testdata/bpf), binds the probes' maps to host-registered
// shm regions, launches with known grids and checks, exactly:
//
//   - kernel_phases: one device-window record (record.Exec) per launch,
//     with the launch id passed in the hidden parameter, the grid's blocks
//     and threads, its window inside the kernel's %globaltimer window, no
//     drops;
//   - threadhist: every thread counted once, every block's count = block size;
//   - kernelretsnoop: one record per thread, timestamps in the window;
//   - memcount: loads, stores and bytes equal to what the kernel does;
//   - the kernel's output bit-identical to the unpatched module's.
//
// With -compat it runs only the compatibility suite (compat.go): each
// program of testdata/bpf/compat (bpftime's GPU idioms) on its sample,
// maps in host memory and in device memory, checked against exact values.
//
// Otherwise it then times unpatched vs an empty probe vs kernel_phases (interleaved
// batches, median) and prints a table.
//
// kernel_phases runs with the ring protocol(s) of -ringmode: "old" (host
// reservation: a sys-scope atomic on the ring's head in host memory per
// record), "device" (device-side reservation, jit/ptx Options.RingDevice)
// or "both" (default; the benchmark then prints both side by side). The old
// mode's timed launches are capped (one launch per batch, three rounds):
// with one record per warp it cost about 1.5 s per vectorAddN launch.
//
// -configs chooses the bench configs (uninstrumented, empty, kernel_phases,
// kernelretsnoop and threadhist: the testdata objects retargeted to the
// bench kernel, device-side ring reservation); each row also gets the
// module-load latency it adds (injection first and from the cache, plus
// the patched module's load minus the original's); -csv writes them.
//
//	gpuprobe-gpucheck -ptx DIR [-bpf DIR] [-rounds N] [-ringmode old|device|both] [-configs LIST] [-csv FILE] [-nocheck] [-compat]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpuprobe/gpuprobe/internal/cuda"
)

func main() {
	dir := flag.String("ptx", "build/gpu-inject", "directory with vectoradd.ptx, gemm.ptx and exits.ptx (nvcc -ptx of testdata/cuda/inject)")
	bpf := flag.String("bpf", "testdata/bpf", "directory with the clang-built testdata programs (threadhist.o, kernelretsnoop.o, memcount.o)")
	rounds := flag.Int("rounds", 15, "timing rounds (each config once per round, interleaved)")
	batch := flag.Int("batch", 20, "launches per timed batch")
	noBench := flag.Bool("nobench", false, "skip the timing")
	noCheck := flag.Bool("nocheck", false, "skip the correctness checks (timing only)")
	configs := flag.String("configs", "uninstrumented,empty,kernel_phases", "bench configs, comma-separated: "+strings.Join(benchConfigNames, ", "))
	csvPath := flag.String("csv", "", "write the bench results to this CSV file")
	ringMode := flag.String("ringmode", "both", "ring protocol of kernel_phases: old (host reservation), device (device-side reservation) or both")
	variants := flag.String("variants", "", "extra bench configs: eBPF objects (comma-separated) whose GPU programs are timed like kernel_phases (device ring), each also with its entry and exit programs called instead of inlined (inject.Options.NoInline, named NAME call); named by file")
	compat := flag.Bool("compat", false, "run only the compatibility suite: every testdata/bpf/compat program (in -bpf's compat/), maps in host and in device memory, exact expected values")
	flag.Parse()

	modes, err := parseRingMode(*ringMode)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpuprobe-gpucheck: %v\n", err)
		os.Exit(2)
	}
	cfgs, err := parseBenchConfigs(*configs)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpuprobe-gpucheck: %v\n", err)
		os.Exit(2)
	}
	r := &runner{bpfDir: *bpf, rounds: *rounds, batch: *batch, modes: modes, configs: cfgs}
	if *variants != "" {
		r.variants = strings.Split(*variants, ",")
	}
	if err := r.setup(); err != nil {
		fmt.Fprintf(os.Stderr, "gpuprobe-gpucheck: %v\n", err)
		os.Exit(2)
	}
	defer r.c.Release()
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(*dir, name))
		if err != nil {
			fmt.Fprintf(os.Stderr, "gpuprobe-gpucheck: %v\n", err)
			os.Exit(2)
		}
		return b
	}
	vec, gemm, exits := read("vectoradd.ptx"), read("gemm.ptx"), read("exits.ptx")

	switch {
	case *compat:
		r.compat(vec, gemm, exits)
	case !*noCheck:
		r.checks(vec, gemm, exits)
	}
	if !*noBench && !*compat {
		r.bench(vec, gemm)
		if err := r.printBench(*csvPath); err != nil {
			fmt.Fprintf(os.Stderr, "gpuprobe-gpucheck: %v\n", err)
			os.Exit(2)
		}
	}
	fmt.Println()
	fmt.Printf("== gpuprobe-gpucheck on %s ==\n", r.device)
	for _, row := range r.rows {
		fmt.Println(row)
	}
	fmt.Printf("%d passed, %d failed\n", r.passed, r.failed)
	if r.failed > 0 {
		os.Exit(1)
	}
}

// ringMode is one ring protocol kernel_phases is checked and timed with.
type ringMode struct {
	name   string // "old" or "device"
	device bool   // jit/ptx Options.RingDevice
}

// parseRingMode turns the -ringmode flag into the modes to run.
func parseRingMode(s string) ([]ringMode, error) {
	old, dev := ringMode{"old", false}, ringMode{"device", true}
	switch s {
	case "old":
		return []ringMode{old}, nil
	case "device":
		return []ringMode{dev}, nil
	case "both":
		return []ringMode{old, dev}, nil
	}
	return nil, fmt.Errorf("-ringmode %q: want old, device or both", s)
}

// runner holds the device and the results.
type runner struct {
	modes         []ringMode
	configs       []string // bench configs (-configs)
	variants      []string // eBPF objects timed as extra configs (-variants)
	benchRows     []benchRow
	bpfDir        string
	rounds, batch int
	c             *cuda.Context
	device, arch  string
	sms           int
	timer         *cuda.Module
	timerFn       *cuda.Function
	timerBuf      cuda.DevicePtr
	rows          []string
	passed        int
	failed        int
}

func (r *runner) setup() error {
	if err := cuda.Init(); err != nil {
		return err
	}
	d, err := cuda.GetDevice(0)
	if err != nil {
		return err
	}
	if r.device, err = d.Name(); err != nil {
		return err
	}
	if r.arch, err = d.Arch(); err != nil {
		return err
	}
	if r.sms, err = d.Attribute(cuda.AttrMultiprocessorCount); err != nil {
		return err
	}
	r.device += " (" + r.arch + ")"
	if r.c, err = d.PrimaryContext(); err != nil {
		return err
	}
	if r.timer, err = r.c.LoadModule([]byte(timerPTX)); err != nil {
		return fmt.Errorf("timer module: %w", err)
	}
	if r.timerFn, err = r.timer.Function("gpuprobe_now"); err != nil {
		return err
	}
	r.timerBuf, err = r.c.MemAlloc(16)
	return err
}

// timerPTX stores %globaltimer at its argument: launched on the same
// stream right before and after a kernel, it brackets the kernel's window.
const timerPTX = `.version 7.0
.target sm_70
.address_size 64
.visible .entry gpuprobe_now(.param .u64 out)
{
	.reg .b64 %rd<3>;
	ld.param.u64 %rd1, [out];
	mov.u64 %rd2, %globaltimer;
	st.global.u64 [%rd1], %rd2;
	ret;
}
`

// result records one check.
func (r *runner) result(name string, err error, detail string) {
	status := "PASS"
	if err != nil {
		status, detail = "FAIL", err.Error()
		r.failed++
	} else {
		r.passed++
	}
	row := fmt.Sprintf("%-44s %-4s %s", name, status, strings.ReplaceAll(detail, "\n", " "))
	fmt.Println("==> " + row)
	r.rows = append(r.rows, row)
}
