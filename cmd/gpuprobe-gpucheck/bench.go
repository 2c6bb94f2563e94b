//go:build cgo

package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/internal/cuda"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/shm"
)

// emptyProbes are an entry and an exit program that return at once: the
// cost of the call sites alone.
func emptyProbes() []*jit.Program {
	mk := func(kind jit.ProbeKind, sec string) *jit.Program {
		return &jit.Program{Name: "empty_" + kind.String(), Section: sec, Kind: kind, Target: "*",
			Insns: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}}
	}
	return []*jit.Program{mk(jit.ProbeEntry, "kprobe/*"), mk(jit.ProbeExit, "kretprobe/*")}
}

// benchConfig is one way of running a kernel.
type benchConfig struct {
	name       string
	progs      func(kernel string) ([]*jit.Program, error) // nil: uninstrumented
	device     bool                                        // device-side ring reservation
	deviceMaps bool                                        // the programs' GPU maps in device memory
	call       bool                                        // inject.Options.NoInline: entry and exit programs called
	slow       bool                                        // capped: one launch per batch, slowRounds rounds
	oneIn      int                                         // > 1: launch id in 1 launch in oneIn, 0 in the others (sampling::device_one_in)
}

// slowRounds caps the rounds of slow configs (the old ring protocol costs
// about 1.5 s per vectorAddN launch).
const slowRounds = 3

// timedLaunch is one kernel of the benchmark with its device buffers.
type timedLaunch struct {
	s        *sample
	in       *instance
	fn       *cuda.Function
	params   []uint64
	oneIn    int    // > 1: the last parameter (the launch id) is lid in 1 launch in oneIn, else 0
	lid      uint64 // the launch id of the probed launches
	n        int    // launches so far (oneIn > 1)
	launches uint64 // launches with a nonzero launch id
}

// drain brings the host regions of tl's device-resident maps up to date
// and drains their rings, as the shim's mirror thread would between
// batches (not timed: the copies run on a copy engine, off the
// application's streams).
func (tl *timedLaunch) drain() error {
	if len(tl.in.mirrors) == 0 {
		return nil
	}
	if err := tl.in.sync(); err != nil {
		return err
	}
	tl.in.records(nil)
	return tl.in.drainErr
}

// accounting checks, for device-resident rings written once per thread
// (kernelretsnoop), that every record offered is delivered, dropped or
// oversize, and describes the figures.
func (tl *timedLaunch) accounting() (string, error) {
	var dropped, oversize uint64
	rings := 0
	for _, m := range tl.in.mirrors {
		if m.ring != nil {
			if err := m.cons.Err(); err != nil {
				return "", fmt.Errorf("ring %s: the consumer stopped: %w", m.name, err)
			}
			st := m.ring.Stats()
			dropped, oversize, rings = dropped+st.Dropped, oversize+st.Oversize, rings+1
		}
	}
	if rings != 1 {
		return "", nil
	}
	produced := tl.launches * tl.s.threads()
	got := tl.in.delivered + dropped + oversize
	s := fmt.Sprintf(" [device ring: %d produced = %d delivered + %d dropped + %d oversize]", produced, tl.in.delivered, dropped, oversize)
	if got != produced {
		return s, fmt.Errorf("ring accounting off by %d:%s", int64(got)-int64(produced), s)
	}
	return s, nil
}

// bench times each config of each benchmark kernel: per round, one batch
// of launches per config, interleaved; the figure is the median batch time
// per launch. A consumer goroutine drains kernel_phases' ring all along, as
// the collector would, and the ring's drops are reported.
func (r *runner) bench(vec, gemm []byte) {
	const n = 1 << 24
	const m = 2048
	blocksGS := uint32(r.sms * 4)
	kernels := []*sample{
		{name: "vectorAddN 2^24", ptx: vec, kernel: "_Z10vectorAddNPKfS0_Pfi",
			grid: cuda.Dim3{X: n / 256, Y: 1, Z: 1}, block: cuda.Dim3{X: 256, Y: 1, Z: 1},
			bufs: [][]byte{make([]byte, 4*n), make([]byte, 4*n), make([]byte, 4*n)}, out: 2, scalars: []uint64{n}},
		{name: fmt.Sprintf("vectorAddGS 2^24 (%d blocks)", blocksGS), ptx: vec, kernel: "_Z11vectorAddGSPKfS0_Pfi",
			grid: cuda.Dim3{X: blocksGS, Y: 1, Z: 1}, block: cuda.Dim3{X: 256, Y: 1, Z: 1},
			bufs: [][]byte{make([]byte, 4*n), make([]byte, 4*n), make([]byte, 4*n)}, out: 2, scalars: []uint64{n}},
		{name: "sgemm 2048", ptx: gemm, kernel: "_Z5sgemmPKfS0_Pfi",
			grid: cuda.Dim3{X: m / 16, Y: m / 16, Z: 1}, block: cuda.Dim3{X: 16, Y: 16, Z: 1},
			bufs: [][]byte{make([]byte, 4*m*m), make([]byte, 4*m*m), make([]byte, 4*m*m)}, out: 2, scalars: []uint64{m}},
	}
	configs := r.benchConfigs()
	for _, k := range kernels {
		if err := r.benchKernel(k, configs); err != nil {
			r.result("bench "+k.name, err, "")
		}
	}
}

func (r *runner) benchKernel(s *sample, configs []benchConfig) error {
	var ptrs []cuda.DevicePtr
	defer func() {
		for _, p := range ptrs {
			r.c.MemFree(p)
		}
	}()
	var params []uint64
	for _, b := range s.bufs {
		p, err := r.c.MemAlloc(uint64(len(b)))
		if err != nil {
			return err
		}
		ptrs = append(ptrs, p)
		if err := r.c.Memset(p, 0, uint64(len(b))); err != nil {
			return err
		}
		params = append(params, uint64(p))
	}
	params = append(params, s.scalars...)

	runs := make([]*timedLaunch, len(configs))
	loads := make([]loadTimes, len(configs))
	for i, cf := range configs {
		in, lt, err := r.loadTimed(s, cf)
		if err != nil {
			return fmt.Errorf("%s: %w", cf.name, err)
		}
		defer in.close()
		loads[i] = lt
		fn, err := in.mod.Function(s.kernel)
		if err != nil {
			return err
		}
		tl := &timedLaunch{s: s, in: in, fn: fn, params: params, oneIn: cf.oneIn, lid: uint64(i + 1)}
		if in.rep != nil {
			tl.params = append(append([]uint64(nil), params...), tl.lid)
		}
		for _, g := range in.rings {
			if in.mirrored(g) {
				continue // drained after each batch (timedLaunch.drain)
			}
			// The collector's part: a consumer that keeps draining the ring.
			c := g.NewConsumer(shm.ConsumerOptions{})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				for ctx.Err() == nil {
					if c.Read(0, func(shm.Record) {}) == 0 {
						time.Sleep(20 * time.Microsecond)
					}
				}
			}()
			defer func() { cancel(); <-done }() // before in.close unmaps the ring
		}
		runs[i] = tl
		fmt.Printf("    %s / %s: inject first %v, cached %v; module load (JIT) %v\n", s.name, cf.name,
			lt.injectFirst.Round(time.Microsecond), lt.injectCached.Round(time.Microsecond), lt.load.Round(time.Microsecond))
	}
	// Warm up; a config whose launch takes longer than slowLaunch is capped.
	for i, tl := range runs {
		n := 2
		if configs[i].slow {
			n = 1
		}
		var w []float64
		if err := r.batchTime(tl, n, &w); err != nil {
			return err
		}
		if err := tl.drain(); err != nil {
			return err
		}
		if w[0] > slowLaunchUS {
			configs[i].slow = true
		}
	}
	samples := make([][]float64, len(runs))
	for round := 0; round < r.rounds; round++ {
		for i, tl := range runs {
			n := r.batch
			if configs[i].slow {
				if round >= slowRounds {
					continue
				}
				n = 1
			}
			if err := r.batchTime(tl, n, &samples[i]); err != nil {
				return fmt.Errorf("%s: %w", configs[i].name, err)
			}
			if err := tl.drain(); err != nil {
				return fmt.Errorf("%s: %w", configs[i].name, err)
			}
		}
	}
	base := median(samples[0])
	var parts []string
	for i, cf := range configs {
		med := median(samples[i])
		part := fmt.Sprintf("%s %.1fµs (%.3fx)", cf.name, med, med/base)
		if err := runs[i].in.flushDrops(); err != nil {
			return err
		}
		var dropped uint64
		for _, g := range runs[i].in.rings {
			dropped += g.Stats().Dropped
		}
		if len(runs[i].in.rings) > 0 {
			part += fmt.Sprintf(" [rings: %d dropped]", dropped)
		}
		acct, err := runs[i].accounting()
		if err != nil {
			return fmt.Errorf("%s: %w", cf.name, err)
		}
		part += acct
		parts = append(parts, part)
		r.benchRows = append(r.benchRows, benchRow{kernel: s.name, config: cf.name, medianUS: med, ratio: med / base,
			rounds: len(samples[i]), batch: batchOf(cf, r.batch), dropped: dropped, load: loads[i], loadBase: loads[0].load})
	}
	r.result("bench "+s.name, nil, strings.Join(parts, "; "))
	return nil
}

// batchTime launches tl n times back to back and records the mean time
// per launch in µs (host clock around the batch, after a synchronize).
func (r *runner) batchTime(tl *timedLaunch, n int, out *[]float64) error {
	if err := r.c.Synchronize(); err != nil {
		return err
	}
	t0 := time.Now()
	for i := 0; i < n; i++ {
		if tl.oneIn > 1 && tl.in.rep != nil {
			// As the shim does with sampling::device_one_in: launch id 0,
			// which kernel_phases skips, to all but one launch in oneIn.
			id := uint64(0)
			if tl.n%tl.oneIn == 0 {
				id = tl.lid
			}
			tl.params[len(tl.params)-1] = id
			tl.n++
			if id == 0 {
				tl.launches--
			}
		}
		tl.launches++
		if err := tl.fn.Launch(tl.s.grid, tl.s.block, 0, tl.params...); err != nil {
			return err
		}
	}
	if err := r.c.Synchronize(); err != nil {
		return err
	}
	d := time.Since(t0)
	if out != nil {
		*out = append(*out, float64(d.Microseconds())/float64(n))
	}
	return nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
