//go:build cgo

package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/inject"
	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"github.com/gpuprobe/gpuprobe/internal/cuda"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/ptx"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
)

// sample is one kernel launch with its inputs.
type sample struct {
	name    string
	ptx     []byte
	kernel  string // symbol
	grid    cuda.Dim3
	block   cuda.Dim3
	bufs    [][]byte // device buffers, in parameter order, initial contents
	out     int      // index of the output buffer
	scalars []uint64 // parameters after the buffers
}

func (s *sample) threads() uint64 {
	return uint64(s.grid.X) * uint64(s.grid.Y) * uint64(s.grid.Z) * uint64(s.block.X) * uint64(s.block.Y) * uint64(s.block.Z)
}

func (s *sample) warps() uint64 {
	per := (uint64(s.block.X)*uint64(s.block.Y)*uint64(s.block.Z) + 31) / 32
	return uint64(s.grid.X) * uint64(s.grid.Y) * uint64(s.grid.Z) * per
}

// window is the %globaltimer interval around a launch.
type window struct{ start, end uint64 }

// run launches the sample's kernel of in once (with launch id lid when the
// module was patched with a launch parameter) on fresh buffers and returns
// the output buffer and the kernel's window.
func (r *runner) run(s *sample, in *instance, lid uint64) ([]byte, window, error) {
	fn, err := in.mod.Function(s.kernel)
	if err != nil {
		return nil, window{}, err
	}
	var params []uint64
	var ptrs []cuda.DevicePtr
	defer func() {
		for _, p := range ptrs {
			r.c.MemFree(p)
		}
	}()
	for _, b := range s.bufs {
		p, err := r.c.MemAlloc(uint64(len(b)))
		if err != nil {
			return nil, window{}, err
		}
		ptrs = append(ptrs, p)
		if err := r.c.MemcpyHtoD(p, b); err != nil {
			return nil, window{}, err
		}
		params = append(params, uint64(p))
	}
	params = append(params, s.scalars...)
	if in.rep != nil && len(in.rep.Kernels) > 0 && in.rep.Kernels[0].Launch != nil {
		params = append(params, lid)
	}
	if err := r.timerFn.Launch(cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 1, Y: 1, Z: 1}, 0, uint64(r.timerBuf)); err != nil {
		return nil, window{}, err
	}
	if err := fn.Launch(s.grid, s.block, 0, params...); err != nil {
		return nil, window{}, err
	}
	if err := r.timerFn.Launch(cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 1, Y: 1, Z: 1}, 0, uint64(r.timerBuf)+8); err != nil {
		return nil, window{}, err
	}
	if err := r.c.Synchronize(); err != nil {
		return nil, window{}, fmt.Errorf("kernel %s: %w", s.kernel, err)
	}
	out := make([]byte, len(s.bufs[s.out]))
	if err := r.c.MemcpyDtoH(out, ptrs[s.out]); err != nil {
		return nil, window{}, err
	}
	tb := make([]byte, 16)
	if err := r.c.MemcpyDtoH(tb, r.timerBuf); err != nil {
		return nil, window{}, err
	}
	return out, window{binary.LittleEndian.Uint64(tb), binary.LittleEndian.Uint64(tb[8:])}, nil
}

// patched injects progs into the sample's kernel and loads the result.
func (r *runner) patched(s *sample, progs []*jit.Program, opts inject.Options, ringSlots uint32) (*instance, error) {
	opts.Kernels = []string{s.kernel}
	opts.Strict = true
	out, rep, err := inject.Inject(s.ptx, progs, opts)
	if err != nil {
		return nil, err
	}
	return load(r.c, out, rep, s.threads(), ringSlots, opts.PTX.DeviceMaps, nil)
}

func floats(n int, f func(i int) float32) []byte {
	b := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f(i)))
	}
	return b
}

func ints(n int, f func(i int) int32) []byte {
	b := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(f(i)))
	}
	return b
}

// samples are the checked launches: odd sizes so that the last warp is
// partial and threads leave early through the bounds check.
func samples(vec, gemm, exits []byte) []*sample {
	const n = 1<<20 + 100
	const m = 256 // GEMM size
	const e = 100003
	return []*sample{
		{name: "vectorAddN", ptx: vec, kernel: "_Z10vectorAddNPKfS0_Pfi",
			grid: cuda.Dim3{X: (n + 255) / 256, Y: 1, Z: 1}, block: cuda.Dim3{X: 256, Y: 1, Z: 1},
			bufs: [][]byte{floats(n, func(i int) float32 { return float32(i) * 0.5 }), floats(n, func(i int) float32 { return 1 / float32(i+1) }), make([]byte, 4*n)},
			out:  2, scalars: []uint64{n}},
		{name: "vectorAdd (block 96)", ptx: vec, kernel: "_Z9vectorAddPKfS0_Pf",
			grid: cuda.Dim3{X: 683, Y: 1, Z: 1}, block: cuda.Dim3{X: 96, Y: 1, Z: 1},
			bufs: [][]byte{floats(683*96, func(i int) float32 { return float32(i) }), floats(683*96, func(i int) float32 { return 3 }), make([]byte, 4*683*96)},
			out:  2},
		{name: "sgemm 256", ptx: gemm, kernel: "_Z5sgemmPKfS0_Pfi",
			grid: cuda.Dim3{X: m / 16, Y: m / 16, Z: 1}, block: cuda.Dim3{X: 16, Y: 16, Z: 1},
			bufs: [][]byte{floats(m*m, func(i int) float32 { return float32(i%7) - 3 }), floats(m*m, func(i int) float32 { return float32(i%5) * 0.25 }), make([]byte, 4*m*m)},
			out:  2, scalars: []uint64{m}},
		{name: "multiExit", ptx: exits, kernel: "_ZN6sample9multiExitEPKiPii",
			grid: cuda.Dim3{X: (e + 127) / 128, Y: 1, Z: 1}, block: cuda.Dim3{X: 128, Y: 1, Z: 1},
			bufs: [][]byte{ints(e, func(i int) int32 { return int32(i%37) - 5 }), ints(e, func(i int) int32 { return 0x5a5a5a5a })},
			out:  1, scalars: []uint64{e}},
	}
}

// checks runs every correctness check.
func (r *runner) checks(vec, gemm, exits []byte) {
	for _, s := range samples(vec, gemm, exits) {
		base, err := load(r.c, s.ptx, nil, 0, 0, nil, nil)
		if err != nil {
			r.result(s.name+": unpatched", err, "")
			continue
		}
		want, _, err := r.run(s, base, 0)
		base.close()
		if err != nil {
			r.result(s.name+": unpatched", err, "")
			continue
		}
		for _, m := range r.modes {
			r.result(s.name+": kernel_phases ("+m.name+")", r.checkPhases(s, want, m.device), fmt.Sprintf("%d warps, %d threads", s.warps(), s.threads()))
		}
	}
	vs := samples(vec, gemm, exits)
	for _, dev := range []bool{false, true} {
		where := " (maps in host memory)"
		if dev {
			where = " (maps in device memory)"
		}
		r.result("vectorAdd: threadhist"+where, r.checkThreadhist(vs[1], dev), "")
		r.result("vectorAdd: kernelretsnoop"+where, r.checkRetsnoop(vs[1], dev), "")
		r.result("vectorAddN: memcount"+where, r.checkMemcount(vs[0], dev), "")
	}
	detail, err := r.checkHostCall(vs[0])
	r.result("vectorAddN: host-call round trip", err, detail)
	detail, err = r.checkHostCallUnanswered(vs[0])
	r.result("vectorAddN: host calls never answered", err, detail)
}

// checkHostCallUnanswered runs hostcall_rt with nobody serving its
// mailbox: the kernel must still end, every call failing after its
// bounded wait, and a host that starts serving afterwards must count the
// abandoned requests as late, not answer them to anyone.
func (r *runner) checkHostCallUnanswered(s *sample) (string, error) {
	one := *s
	one.grid, one.block = cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 1, Y: 1, Z: 1}
	holdMailbox = true
	in, _, err := r.userPatched(&one, "hostcall_rt", true, 2, 17)
	holdMailbox = false
	if err != nil {
		return "", err
	}
	defer in.close()
	rt := in.arrays["rt"]
	span, _ := rt.Uint64(0, 0)
	ok, _ := rt.Uint64(1, 0)
	calls, _ := rt.Uint64(2, 0)
	if calls == 0 || ok != 0 {
		return "", fmt.Errorf("%d calls, %d answered with no host serving", calls, ok)
	}
	if in.mb == nil {
		return "", errors.New("the program has no mailbox")
	}
	in.serve()
	deadline := time.Now().Add(2 * time.Second)
	for in.mb.Late() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	late := in.mb.Late()
	d := fmt.Sprintf("%d calls, none answered, kernel ended after %.1f ms (%.1f µs per call: the bounded wait); %d abandoned requests counted late once served",
		calls, float64(span)/1e6, float64(span)/float64(calls)/1e3, late)
	if late == 0 {
		return d, errors.New("a host serving after the kernel counted no late request: " + d)
	}
	return d, nil
}

// hostCallTargetNS is the target for one host call's round trip, a
// hundredth of bpftime's (which answers in about 1 ms).
const hostCallTargetNS = 10_000

// checkHostCall runs hostcall_rt (64 back-to-back bpf_printk calls from
// one thread, each answered by the host through the mailbox) and checks
// that every call was answered, by this host, within the target per call.
func (r *runner) checkHostCall(s *sample) (string, error) {
	one := *s
	one.grid, one.block = cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 1, Y: 1, Z: 1}
	var per []float64
	var calls, ok uint64
	for round := 0; round < 5; round++ {
		in, _, err := r.userPatched(&one, "hostcall_rt", true, 2, 13)
		if err != nil {
			return "", err
		}
		rt := in.arrays["rt"]
		span, _ := rt.Uint64(0, 0)
		ok, _ = rt.Uint64(1, 0)
		calls, _ = rt.Uint64(2, 0)
		answered := in.answered.Load()
		in.close()
		if calls == 0 || ok != calls || answered < calls {
			return "", fmt.Errorf("%d calls, %d answered on the GPU, %d by the host", calls, ok, answered)
		}
		per = append(per, float64(span)/float64(calls))
	}
	med := median(per)
	d := fmt.Sprintf("%d calls from one thread, every one answered; per call, median of 5 runs %.2f µs (runs %.2f..%.2f; target %d µs)",
		calls, med/1e3, slices.Min(per)/1e3, slices.Max(per)/1e3, hostCallTargetNS/1000)
	if med > hostCallTargetNS {
		return d, fmt.Errorf("round trip %.2f µs over the target: %s", med/1e3, d)
	}
	return d, nil
}

// userPatched injects a testdata object's programs into the sample, with
// their GPU maps in device memory when dev is set, runs the kernel once
// (launch id lid) and brings the maps' host regions up to date.
func (r *runner) userPatched(s *sample, object string, dev bool, ringSlots uint32, lid uint64) (*instance, window, error) {
	progs, err := r.object(object)
	if err != nil {
		return nil, window{}, err
	}
	var opts inject.Options
	if dev {
		opts.PTX.DeviceMaps = jit.DeviceResidentMaps(progs)
	}
	in, err := r.patched(s, progs, opts, ringSlots)
	if err != nil {
		return nil, window{}, err
	}
	_, win, err := r.run(s, in, lid)
	if err == nil {
		err = in.sync()
	}
	if err == nil && dev && len(in.mirrors) == 0 {
		err = errors.New("maps in device memory asked for, but none was placed there")
	}
	if err != nil {
		in.close()
		return nil, window{}, err
	}
	return in, win, nil
}

// checkPhases runs the kernel_phases probes and checks their records and
// the kernel's output.
func (r *runner) checkPhases(s *sample, want []byte, device bool) error {
	progs, err := probes.Load(probes.KernelPhases)
	if err != nil {
		return err
	}
	in, err := r.patched(s, progs, inject.Options{PTX: ptx.Options{RingDevice: device}}, 1<<20)
	if err != nil {
		return err
	}
	defer in.close()
	const lid = 0x1234_0000_0042
	got, win, err := r.run(s, in, lid)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		return errors.New("output differs from the unpatched kernel's")
	}
	ring := in.rings[probes.KernelPhasesRingMap]
	var recs []record.Exec
	var bad error
	ring.NewConsumer(shm.ConsumerOptions{}).Read(0, func(rec shm.Record) {
		var e record.Exec
		if err := e.Decode(rec.Payload); err != nil {
			bad = err
			return
		}
		recs = append(recs, e)
	})
	if bad != nil {
		return bad
	}
	if err := in.flushDrops(); err != nil {
		return err
	}
	st := ring.Stats()
	if device && len(in.blocks) == 0 {
		return errors.New("device reservation asked for, but the module has no ring_device global")
	}
	if len(recs) != 1 {
		return fmt.Errorf("%d device-window records, want 1 per launch (ring: %+v)", len(recs), st)
	}
	e := recs[0]
	blocks := uint64(s.grid.X) * uint64(s.grid.Y) * uint64(s.grid.Z)
	switch {
	case e.LaunchID != lid:
		return fmt.Errorf("record launch id %#x, want %#x", e.LaunchID, lid)
	case e.Blocks != blocks:
		return fmt.Errorf("record counts %d blocks, want %d", e.Blocks, blocks)
	case e.Threads != s.threads():
		return fmt.Errorf("record counts %d threads, want %d", e.Threads, s.threads())
	case e.StartNS < win.start || e.EndNS > win.end:
		return fmt.Errorf("device window [%d, %d] outside the kernel window [%d, %d]", e.StartNS, e.EndNS, win.start, win.end)
	case st.Dropped != 0:
		return fmt.Errorf("%d records dropped", st.Dropped)
	}
	return nil
}

func (r *runner) object(name string) ([]*jit.Program, error) {
	return jit.LoadELF(filepath.Join(r.bpfDir, name+".o"))
}

// checkThreadhist: every thread counted once, every block fully.
func (r *runner) checkThreadhist(s *sample, dev bool) error {
	in, _, err := r.userPatched(s, "threadhist", dev, 2, 7)
	if err != nil {
		return err
	}
	defer in.close()
	runs, blocks := in.arrays["thread_runs"], in.arrays["block_threads"]
	for t := uint64(0); t < s.threads(); t++ {
		v, err := runs.Uint64(0, t)
		if err != nil {
			return err
		}
		if v != 1 {
			return fmt.Errorf("thread %d counted %d times, want 1", t, v)
		}
	}
	for b := uint64(0); b < uint64(min(s.grid.X, 1024)); b++ {
		v, err := blocks.Uint64(b, 0)
		if err != nil {
			return err
		}
		if v != uint64(s.block.X) {
			return fmt.Errorf("block %d: %d threads, want %d", b, v, s.block.X)
		}
	}
	return nil
}

// checkRetsnoop: one record per thread, each inside the kernel's window.
func (r *runner) checkRetsnoop(s *sample, dev bool) error {
	in, win, err := r.userPatched(s, "kernelretsnoop", dev, 1<<17, 9)
	if err != nil {
		return err
	}
	defer in.close()
	var bad error
	seen := map[[2]uint64]bool{}
	read := func(fn func(shm.Record)) int {
		return in.rings["exits"].NewConsumer(shm.ConsumerOptions{}).Read(0, fn)
	}
	if dev {
		read = in.records
	}
	n := read(func(rec shm.Record) {
		p := rec.Payload
		if len(p) < 64 {
			bad = fmt.Errorf("record of %d bytes", len(p))
			return
		}
		bx, tx, ts := binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[24:]), binary.LittleEndian.Uint64(p[48:])
		if ts < win.start || ts > win.end {
			bad = fmt.Errorf("exit time %d outside [%d, %d]", ts, win.start, win.end)
		}
		seen[[2]uint64{bx, tx}] = true
	})
	if bad != nil {
		return bad
	}
	if uint64(n) != s.threads() || uint64(len(seen)) != s.threads() {
		return fmt.Errorf("%d records for %d distinct threads, want %d", n, len(seen), s.threads())
	}
	return nil
}

// checkMemcount: two 4-byte loads and one 4-byte store per element.
func (r *runner) checkMemcount(s *sample, dev bool) error {
	in, _, err := r.userPatched(s, "memcount", dev, 2, 11)
	if err != nil {
		return err
	}
	defer in.close()
	n := s.scalars[0]
	want := []uint64{2 * n, n, 8 * n, 4 * n}
	for k, w := range want {
		v, err := in.arrays["mem_counters"].Uint64(uint64(k), 0)
		if err != nil {
			return err
		}
		if v != w {
			return fmt.Errorf("counter %d = %d, want %d", k, v, w)
		}
	}
	return nil
}
