//go:build cgo

package main

import (
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/inject"
	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/ptx"
)

// slowLaunchUS: a config whose warm-up launch takes longer than this is
// capped (one launch per batch, slowRounds rounds) so the bench fits its
// time budget.
const slowLaunchUS = 50_000

// benchConfigNames are the configs -configs may name.
var benchConfigNames = []string{"uninstrumented", "empty", "kernel_phases", "kernel_phases_call", "kernel_phases_1in8", "kernelretsnoop", "threadhist", "threadhist_1in8", "kernelshared", "hostmaps", "gpuhash"}

// benchObjects are the testdata objects (under -bpf, without .o) whose GPU
// programs a config runs, retargeted to each bench kernel.
var benchObjects = map[string]string{
	"kernelretsnoop":  "kernelretsnoop",
	"threadhist":      "threadhist",
	"threadhist_1in8": "threadhist",
	"kernelshared":    "kernelshared",
	"hostmaps":        "compat/hostmaps",
	"gpuhash":         "compat/hashcount",
}

// parseBenchConfigs checks the -configs flag.
func parseBenchConfigs(s string) ([]string, error) {
	var out []string
	for _, c := range strings.Split(s, ",") {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		ok := false
		for _, n := range benchConfigNames {
			ok = ok || n == c
		}
		if !ok {
			return nil, fmt.Errorf("-configs: unknown config %q (have %s)", c, strings.Join(benchConfigNames, ", "))
		}
		if c == "uninstrumented" && len(out) > 0 {
			return nil, fmt.Errorf("-configs: uninstrumented must come first (it is the ratios' base)")
		}
		out = append(out, c)
	}
	if len(out) == 0 || out[0] != "uninstrumented" {
		out = append([]string{"uninstrumented"}, out...)
	}
	return out, nil
}

// retargeted loads a testdata object's GPU programs aimed at one kernel.
func (r *runner) retargeted(name, kernel string) ([]*jit.Program, error) {
	ps, err := r.object(name)
	if err != nil {
		return nil, err
	}
	var out []*jit.Program
	for _, p := range ps {
		if p.IsGPU() {
			p.Target = kernel
			out = append(out, p)
		}
	}
	return out, nil
}

// benchConfigs returns the configs of -configs, in order.
func (r *runner) benchConfigs() []benchConfig {
	var out []benchConfig
	for _, c := range r.configs {
		switch c {
		case "uninstrumented":
			out = append(out, benchConfig{name: c})
		case "empty":
			out = append(out, benchConfig{name: "empty probe", progs: func(string) ([]*jit.Program, error) { return emptyProbes(), nil }})
		case "kernel_phases":
			for _, m := range r.modes {
				out = append(out, benchConfig{name: "kernel_phases " + m.name, device: m.device, slow: !m.device,
					progs: func(string) ([]*jit.Program, error) { return probes.Load(probes.KernelPhases) }})
			}
		case "kernel_phases_call": // its entry and exit called, not inlined (device ring)
			out = append(out, benchConfig{name: "kernel_phases call", device: true, call: true,
				progs: func(string) ([]*jit.Program, error) { return probes.Load(probes.KernelPhases) }})
		case "kernel_phases_1in8": // launch id in 1 launch in 8 (sampling::device_one_in: 8)
			out = append(out, benchConfig{name: "kernel_phases 1 in 8", device: true, oneIn: 8,
				progs: func(string) ([]*jit.Program, error) { return probes.Load(probes.KernelPhases) }})
		// kernelretsnoop, threadhist: maps in device memory. kernelshared:
		// bpftime's 1504 shared with a host program, a kernel map in host
		// memory. hostmaps: bpftime's 1512 and 1513, arrays that stay in
		// host memory. gpuhash: bpftime's 1501 in device memory, one
		// lookup (an insert the first time) and one atomic add a thread.
		case "kernelretsnoop", "threadhist", "kernelshared", "hostmaps", "gpuhash":
			out = append(out, benchConfig{name: c, device: true, deviceMaps: true,
				progs: func(k string) ([]*jit.Program, error) { return r.retargeted(benchObjects[c], k) }})
		case "threadhist_1in8": // every probe site skipped in 7 launches of 8 (sampling::device_one_in: 8)
			out = append(out, benchConfig{name: "threadhist 1 in 8", device: true, deviceMaps: true, oneIn: 8,
				progs: func(k string) ([]*jit.Program, error) { return r.retargeted(benchObjects[c], k) }})
		}
	}
	for _, path := range r.variants {
		name := strings.TrimSuffix(filepath.Base(path), ".o")
		progs := func(string) ([]*jit.Program, error) { return jit.LoadELF(path) }
		out = append(out, benchConfig{name: name, device: true, progs: progs},
			benchConfig{name: name + " call", device: true, call: true, progs: progs})
	}
	return out
}

// loadTimes is what loading one config's module cost.
type loadTimes struct {
	injectFirst  time.Duration // inject with an empty cache (verify, compile, splice)
	injectCached time.Duration // the same again: a cache hit
	load         time.Duration // cuModuleLoadData of the module (the driver JIT-compiles the PTX)
}

// loadTimed loads the sample's module for a config and times each part:
// the collector's injection (first, then from the cache, as
// inject.Injector caches by content) and the driver's module load.
func (r *runner) loadTimed(s *sample, cf benchConfig) (*instance, loadTimes, error) {
	var lt loadTimes
	if cf.progs == nil {
		t0 := time.Now()
		in, err := load(r.c, s.ptx, nil, 0, 0, nil, nil)
		lt.load = time.Since(t0)
		return in, lt, err
	}
	progs, err := cf.progs(s.kernel)
	if err != nil {
		return nil, lt, err
	}
	inj, err := inject.NewInjector(16, 64<<20)
	if err != nil {
		return nil, lt, err
	}
	opts := inject.Options{Kernels: []string{s.kernel}, Strict: true, NoInline: cf.call,
		SkipUnidentified: cf.oneIn > 1, PTX: ptx.Options{RingDevice: cf.device}}
	if cf.deviceMaps {
		opts.PTX.DeviceMaps = jit.DeviceResidentMaps(progs)
	}
	t0 := time.Now()
	if _, _, err := inj.Inject(s.ptx, progs, opts); err != nil {
		return nil, lt, err
	}
	lt.injectFirst = time.Since(t0)
	t0 = time.Now()
	out, rep, err := inj.Inject(s.ptx, progs, opts)
	if err != nil {
		return nil, lt, err
	}
	lt.injectCached = time.Since(t0)
	if st := inj.Stats(); st.Hits != 1 {
		return nil, lt, fmt.Errorf("inject cache: %+v after the same injection twice, want 1 hit", st)
	}
	t0 = time.Now()
	in, err := load(r.c, out, rep, s.threads(), 1<<16, opts.PTX.DeviceMaps, nil)
	lt.load = time.Since(t0) // includes binding the maps (host registration of the regions)
	return in, lt, err
}

// batchOf is the launches per timed batch of a config.
func batchOf(cf benchConfig, batch int) int {
	if cf.slow {
		return 1
	}
	return batch
}

// benchRow is one (kernel, config) of the bench, for the table and CSV.
type benchRow struct {
	kernel, config string
	medianUS       float64
	ratio          float64
	rounds, batch  int
	dropped        uint64
	load           loadTimes
	loadBase       time.Duration // the uninstrumented module's load
}

// added is the module-load latency a config adds: injection plus the
// patched module's load minus the original's.
func (b benchRow) added(inj time.Duration) time.Duration {
	if b.config == "uninstrumented" {
		return 0
	}
	return inj + b.load.load - b.loadBase
}

// printBench prints the bench table and writes the CSV.
func (r *runner) printBench(csvPath string) error {
	if len(r.benchRows) == 0 {
		return nil
	}
	fmt.Printf("\n== bench on %s: interleaved rounds, median per launch; ratio vs uninstrumented in the same run ==\n", r.device)
	fmt.Printf("%-30s %-18s %12s %8s %7s %6s %10s %12s %12s %12s\n", "kernel", "config", "median µs", "ratio", "rounds", "batch",
		"dropped", "inject 1st", "inject hit", "load added")
	for _, b := range r.benchRows {
		fmt.Printf("%-30s %-18s %12.1f %8.3f %7d %6d %10d %12v %12v %12v\n", b.kernel, b.config, b.medianUS, b.ratio, b.rounds, b.batch,
			b.dropped, b.load.injectFirst.Round(time.Microsecond), b.load.injectCached.Round(time.Microsecond),
			b.added(b.load.injectFirst).Round(time.Microsecond))
	}
	if csvPath == "" {
		return nil
	}
	f, err := os.Create(csvPath)
	if err != nil {
		return fmt.Errorf("-csv: %w", err)
	}
	w := csv.NewWriter(f)
	w.Write([]string{"device", "kernel", "config", "median_us", "ratio", "rounds", "batch", "dropped",
		"inject_first_us", "inject_cached_us", "module_load_us", "module_load_uninstrumented_us", "load_added_first_us", "load_added_cached_us"})
	us := func(d time.Duration) string { return strconv.FormatFloat(float64(d.Nanoseconds())/1e3, 'f', 1, 64) }
	for _, b := range r.benchRows {
		w.Write([]string{r.device, b.kernel, b.config, strconv.FormatFloat(b.medianUS, 'f', 2, 64), strconv.FormatFloat(b.ratio, 'f', 4, 64),
			strconv.Itoa(b.rounds), strconv.Itoa(b.batch), strconv.FormatUint(b.dropped, 10), us(b.load.injectFirst),
			us(b.load.injectCached), us(b.load.load), us(b.loadBase), us(b.added(b.load.injectFirst)), us(b.added(b.load.injectCached))})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return fmt.Errorf("-csv: %w", err)
	}
	return f.Close()
}
