package patcher

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// manyKernels returns PTX text with n one-instruction kernels.
func manyKernels(n int) []byte {
	b := []byte(".version 7.8\n.target sm_80\n.address_size 64\n\n")
	for i := 0; i < n; i++ {
		b = fmt.Appendf(b, ".visible .entry k%d()\n{\n\tret;\n}\n", i)
	}
	return b
}

func zstdEntry(t testing.TB, text []byte) fatbintest.BombEntry {
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	text = append(text, 0)
	return fatbintest.BombEntry{Flags: fatbintest.FlagsZstd, Arch: 80, Payload: enc.EncodeAll(text, nil), Claim: uint64(len(text))}
}

func lz4Entry(t testing.TB, text []byte) fatbintest.BombEntry {
	text = append(text, 0)
	buf := make([]byte, lz4.CompressBlockBound(len(text)))
	n, err := lz4.CompressBlock(text, buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fatbintest.BombEntry{Flags: fatbintest.FlagsLZ4, Arch: 80, Payload: buf[:n], Claim: uint64(len(text))}
}

// TestPatchLimits: requests built to exhaust memory are answered NOPATCH,
// naming the limit, after allocating little. Guards against each of them
// allocating gigabytes or dying with "fatal error: out of memory".
func TestPatchLimits(t *testing.T) {
	p := newPatcher(t)
	ptx1M := manyKernels(1_000_000) // 30 MB
	dense := append([]byte(".version 7.8\n.target sm_80\n.address_size 64\n.entry k()\n{\n"), bytes.Repeat([]byte("ld [a];"), 3<<20)...)
	dense = append(dense, "}\n"...)
	tests := []struct {
		name  string
		image []byte
		want  string  // in the NOPATCH message
		alloc float64 // bytes allocated at most, per byte of inflated text
	}{
		{"zstd claims 1 GiB (98 KB request)", fatbintest.Container(fatbintest.BombEntry{Flags: fatbintest.FlagsZstd, Arch: 80,
			Payload: fatbintest.ZstdBomb(t, 8<<20), Claim: 1 << 30}), "offset 0x10", 0},
		{"zstd 10^6 kernels", fatbintest.Container(zstdEntry(t, ptx1M)), "Limits.MaxKernels", 3},
		{"lz4 10^6 kernels", fatbintest.Container(lz4Entry(t, ptx1M)), "Limits.MaxKernels", 3},
		{"lz4 bomb (4.2 MB)", fatbintest.Container(fatbintest.BombEntry{Flags: fatbintest.FlagsLZ4, Arch: 80,
			Payload: fatbintest.LZ4Bomb(1 << 30), Claim: 1 << 30}), "Limits.MaxEntry", 0},
		{"loose PTX, 10^6 kernels", ptx1M, "Limits.MaxKernels", 0},
		{"tokens (22 MB of ld [a];)", dense, "Limits.MaxMemory", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			n := fatbintest.Allocated(func() {
				_, err = p.Patch(&agentwire.PatchRequest{Arch: 80, Image: tt.image}, ringBinder(t))
			})
			var np *agentwire.NoPatch
			if !errors.As(err, &np) || np.Code != agentwire.NoPatchError || !strings.Contains(np.Message, tt.want) {
				t.Fatalf("error %v, want NOPATCH code 3 naming %q", err, tt.want)
			}
			limit := uint64(4<<20) + uint64(tt.alloc*float64(len(ptx1M)))
			if n > limit {
				t.Errorf("allocated %d bytes, want at most %d", n, limit)
			}
			t.Logf("%d-byte image: %d bytes allocated: %s", len(tt.image), n, np.Message)
		})
	}
	if u := p.mem.Used(); u != 0 {
		t.Errorf("%d bytes of patch memory still held", u)
	}
}

// TestPatchConcurrentMemory: many clients patching at once hold at most
// Limits.MaxMemory of patch work; those that find no room in MaxWait are
// answered NOPATCH (the report: four 2.4 MB PTX files took RSS from 49 MB
// to 4.26 GB in 3 s).
func TestPatchConcurrentMemory(t *testing.T) {
	progs, err := probes.Load(probes.KernelPhases)
	if err != nil {
		t.Fatal(err)
	}
	const maxMem = 96 << 20
	p, err := New(Options{Programs: progs, DeviceOnly: probes.KernelPhasesDeviceOnly, MaxThreads: 4096,
		RingDevice: probes.KernelPhasesRingDevice, Keys: kpKeys(len(progs)), CacheEntries: 1,
		Limits: Limits{MaxMemory: maxMem, MaxWait: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer debug.SetGCPercent(debug.SetGCPercent(20))
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)

	var peak atomic.Uint64
	stop := make(chan struct{})
	var sampled sync.WaitGroup
	sampled.Add(1)
	go func() {
		defer sampled.Done()
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
		}
	}()
	var wg sync.WaitGroup
	var patched, refused atomic.Int32
	bind := ringBinder(t)
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Distinct modules, so the cache serves none of them.
			img := append(manyKernels(600), fmt.Sprintf("// client %d\n", i)...)
			_, err := p.Patch(&agentwire.PatchRequest{Arch: 80, Image: img}, bind)
			var np *agentwire.NoPatch
			switch {
			case err == nil:
				patched.Add(1)
			case errors.As(err, &np) && strings.Contains(np.Message, "Limits.MaxMemory"):
				refused.Add(1)
			default:
				t.Errorf("client %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	close(stop)
	sampled.Wait()
	grew := int64(peak.Load()) - int64(base.HeapAlloc)
	t.Logf("%d patched, %d refused; heap grew by %d MiB at most (MaxMemory %d MiB)", patched.Load(), refused.Load(), grew>>20, maxMem>>20)
	if patched.Load() == 0 {
		t.Error("no request was patched")
	}
	if grew > 2*maxMem {
		t.Errorf("heap grew by %d bytes, want at most 2 × MaxMemory (%d)", grew, 2*maxMem)
	}
	if u := p.mem.Used(); u != 0 {
		t.Errorf("%d bytes of patch memory still held", u)
	}
}
