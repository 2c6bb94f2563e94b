//go:build cgo

package main

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
	"github.com/gpuprobe/gpuprobe/gpuprobe/inject"
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/interp"
	"github.com/gpuprobe/gpuprobe/jit/ptx"
	"github.com/gpuprobe/gpuprobe/shm"
)

// compatSrc is testdata/bpf/compat, relative to this package.
var compatSrc = filepath.Join("..", "..", "testdata", "bpf", "compat")

// compatObjects builds every compat program with clang (bpf.mk's flags)
// into a temporary directory and returns it.
func compatObjects(t *testing.T) string {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Fatalf("clang is needed: %v", err)
	}
	dir := t.TempDir()
	for _, c := range compatObjectNames(t) {
		src := filepath.Join(compatSrc, c+".c")
		out, err := exec.Command(clang, "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-mcpu=v3", "-I", "../../jit/include", "-c", src, "-o", filepath.Join(dir, c+".o")).CombinedOutput()
		if err != nil {
			t.Fatalf("clang %s: %v\n%s", src, err, out)
		}
	}
	return dir
}

// compatObjectNames lists testdata/bpf/compat/*.c without the suffix.
func compatObjectNames(t *testing.T) []string {
	t.Helper()
	srcs, err := filepath.Glob(filepath.Join(compatSrc, "*.c"))
	if err != nil || len(srcs) == 0 {
		t.Fatalf("no sources in %s: %v", compatSrc, err)
	}
	var names []string
	for _, s := range srcs {
		names = append(names, strings.TrimSuffix(filepath.Base(s), ".c"))
	}
	return names
}

// TestCompatCasesCoverSources: every compat source has a case, every case
// an object.
func TestCompatCasesCoverSources(t *testing.T) {
	cased := map[string]bool{}
	for _, c := range compatCases {
		cased[c.object] = true
	}
	srcs := map[string]bool{}
	for _, n := range compatObjectNames(t) {
		srcs[n] = true
		if !cased[n] {
			t.Errorf("testdata/bpf/compat/%s.c has no case in compatCases", n)
		}
	}
	for n := range cased {
		if !srcs[n] {
			t.Errorf("compatCases runs %s, but testdata/bpf/compat/%s.c is missing", n, n)
		}
	}
}

// TestCompatInject: each case's object injects into its sample kernel (PTX
// from nvcc here), with its maps in host and in device memory, every map
// global of the report has its definition (load binds them), and ptxas
// accepts the result for sm_90. Needs nvcc, ptxas and clang.
func TestCompatInject(t *testing.T) {
	ptxas, err := exec.LookPath("ptxas")
	if err != nil {
		t.Fatalf("ptxas is needed: %v", err)
	}
	dir := compatObjects(t)
	b, err := os.ReadFile(fatbintest.Build(t, fatbintest.Source(t, "inject/vectoradd.cu"), "vectoradd.ptx", "-ptx", "-arch=sm_90"))
	if err != nil {
		t.Fatal(err)
	}
	ss := samples(b, nil, nil)
	for _, c := range compatCases {
		for _, dev := range c.placements() {
			progs, err := loadCompatGPU(filepath.Join(dir, c.object+".o"))
			if err != nil {
				t.Fatal(err)
			}
			if d := jit.DeviceResidentMaps(progs); c.hostMemory && len(d) > 0 {
				t.Errorf("%s: maps %v may live in device memory; they must stay in host memory", c.name, d)
			}
			s := ss[c.sample]
			opts := inject.Options{Kernels: []string{s.kernel}, Strict: true}
			opts.PTX.PidTgid = compatPidTgid
			if dev {
				opts.PTX.DeviceMaps = jit.DeviceResidentMaps(progs)
				if len(opts.PTX.DeviceMaps) == 0 {
					t.Errorf("%s: no map may live in device memory", c.name)
				}
			}
			mod, rep, err := inject.Inject(s.ptx, progs, opts)
			if err != nil {
				t.Fatalf("%s (device maps %v): %v", c.name, dev, err)
			}
			for _, g := range rep.Globals {
				if (g.Kind == ptx.GlobalMap || g.Kind == ptx.GlobalMapLanes) && g.MapDef == nil {
					t.Errorf("%s: global %s has no map definition", c.name, g.Name)
				}
			}
			f := filepath.Join(dir, c.object+".ptx")
			if err := os.WriteFile(f, mod, 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(ptxas, "-arch=sm_90", "-o", f+".cubin", f).CombinedOutput(); err != nil {
				t.Errorf("%s (device maps %v): ptxas: %v\n%s", c.name, dev, err, out)
			}
		}
	}
}

// interpMaps reads the interpreter's maps for the compat checks.
type interpMaps struct {
	m         *interp.Maps
	types     map[string]jit.MapType
	ringBytes map[string]uint32 // max_entries of each ring: bytes of records
}

func (im interpMaps) value(name string, key, lane uint64) (uint64, error) {
	var b []byte
	var err error
	switch im.types[name] {
	case jit.MapTypePerThreadArray:
		b, err = im.m.ThreadValue(name, lane, uint32(key))
	case jit.MapTypeGPUHash:
		var ok bool
		if b, ok, err = im.m.HashValue(name, binary.LittleEndian.AppendUint32(nil, uint32(key))); err == nil && !ok {
			return 0, nil
		}
	default:
		b, err = im.m.Value(name, uint32(key))
	}
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (im interpMaps) ring(name string, size int, fn func([]byte)) (int, shm.RingStats, uint64, error) {
	recs, dropped, err := im.m.Records(name)
	if err != nil {
		return 0, shm.RingStats{}, 0, err
	}
	for _, r := range recs {
		fn(r)
	}
	return len(recs), shm.RingStats{Dropped: dropped}, uint64(im.ringBytes[name]) / ringCost(size), nil
}

// ringCost is the interpreter's ring bytes per record of size bytes.
func ringCost(size int) uint64 { return uint64(interp.RingRecordHeader + (size+7)&^7) }

// TestCompatInterp applies each case's GPU check to what its programs
// leave when the interpreter runs them over the sample's grid (interpCase).
func TestCompatInterp(t *testing.T) {
	dir := compatObjects(t)
	for _, c := range compatCases {
		t.Run(c.name, func(t *testing.T) {
			detail, err := c.check(interpCase(t, dir, c))
			if err != nil {
				t.Fatal(err)
			}
			t.Log(detail)
		})
	}
}

// TestCompatChecksFail: the checks are not vacuous: given another case's
// results, each of these fails.
func TestCompatChecksFail(t *testing.T) {
	dir := compatObjects(t)
	byName := map[string]compatCase{}
	for _, c := range compatCases {
		byName[c.name] = c
	}
	tests := []struct {
		run   string // the case whose results are checked
		check func(*compatRun) (string, error)
	}{
		{"seeded (disabled)", checkSeeded},
		{"seeded", checkSeedOff},
		{"ringshort (ring of 1024)", checkRingFull},
		{"threadcount", checkPtrjoin}, // no pj_calls map
		{"atomics", checkKshared},     // no ks_calls map
		{"kshared", checkHostmaps},    // no hm_thread map
		{"gpuhash", checkHashcount},   // no hc_count map
	}
	for _, tt := range tests {
		cr := interpCase(t, dir, byName[tt.run])
		if detail, err := tt.check(cr); err == nil {
			t.Errorf("%s's results pass another check: %s", tt.run, detail)
		}
	}
	// A thread counted twice.
	cr := interpCase(t, dir, byName["threadcount"])
	runInterp(t, &sample{grid: cr.s.grid, block: cr.s.block}, loadCompat(t, dir, "threadcount"), cr.m.(interpMaps).m)
	if _, err := checkThreadcount(cr); err == nil {
		t.Error("threadcount passes with every thread counted twice")
	}
}

func loadCompat(t *testing.T, dir, object string) []*jit.Program {
	t.Helper()
	progs, err := jit.LoadELF(filepath.Join(dir, object+".o"))
	if err != nil {
		t.Fatal(err)
	}
	return progs
}

// interpCase runs case c in the interpreter over its sample's whole grid
// (entry programs, then exit programs, per thread in launch order); rings
// hold the case's slots of 24-byte records; %globaltimer ticks once per
// read.
func interpCase(t *testing.T, dir string, c compatCase) *compatRun {
	t.Helper()
	s := samples(nil, nil, nil)[c.sample]
	progs := loadCompat(t, dir, c.object)
	im := interpMaps{m: interp.NewMaps(), types: map[string]jit.MapType{}, ringBytes: map[string]uint32{}}
	slots := uint64(max(c.ringSlots, 2))
	for _, p := range progs {
		for _, m := range p.Maps {
			if m.Type == jit.MapTypeGPURingbuf {
				m.MaxEntries = uint32(slots * ringCost(rsEventSize))
				im.ringBytes[m.Name] = m.MaxEntries
			}
			im.types[m.Name] = m.Type
		}
	}
	seedInterp(t, im.m, progs, c.seeds)
	win := runInterp(t, s, progs, im.m)
	return &compatRun{s: s, m: im, win: win}
}

// seedInterp declares the seeded maps and stores their seeds.
func seedInterp(t *testing.T, maps *interp.Maps, progs []*jit.Program, seeds compatSeeds) {
	t.Helper()
	for _, p := range progs {
		for _, m := range p.Maps {
			vals, ok := seeds[m.Name]
			if !ok {
				continue
			}
			if err := maps.Declare(m); err != nil {
				t.Fatal(err)
			}
			for k, v := range vals {
				key := binary.LittleEndian.AppendUint32(nil, uint32(k))
				if err := maps.Update(m.Name, key, binary.LittleEndian.AppendUint64(nil, v)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// runInterp runs the entry programs, then the exit programs, of every
// thread of the sample's 1-D grid; it returns the timer's window.
func runInterp(t *testing.T, s *sample, progs []*jit.Program, maps *interp.Maps) window {
	t.Helper()
	var entry, exit []*interp.Machine
	for _, p := range progs {
		m, err := interp.Prepare(p)
		if err != nil {
			t.Fatal(err)
		}
		switch p.Kind {
		case jit.ProbeEntry:
			entry = append(entry, m)
		case jit.ProbeExit:
			exit = append(exit, m)
		case jit.ProbeUprobe, jit.ProbeUretprobe:
			// A host half: Linux runs it, not the suite.
		default:
			t.Fatalf("%s: probe kind %v in a compat object", p.Name, p.Kind)
		}
	}
	const start = 1_000_000
	now := uint64(start)
	env := interp.Env{
		BlockDim: [3]uint64{uint64(s.block.X), 1, 1},
		GridDim:  [3]uint64{uint64(s.grid.X), 1, 1},
		PidTgid:  compatPidTgid,
		Maps:     maps,
		Timer:    func() uint64 { now++; return now },
	}
	for b := uint64(0); b < uint64(s.grid.X); b++ {
		for tx := uint64(0); tx < uint64(s.block.X); tx++ {
			env.BlockIdx, env.ThreadIdx = [3]uint64{b, 0, 0}, [3]uint64{tx, 0, 0}
			env.LaneID, env.WarpID, env.SMID = tx%32, tx/32, b%7
			for _, m := range append(entry[:len(entry):len(entry)], exit...) {
				if _, err := m.Run(nil, &env); err != nil {
					t.Fatalf("block %d thread %d: %v", b, tx, err)
				}
			}
		}
	}
	return window{start, now + 1}
}
