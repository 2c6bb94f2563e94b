package patcher

import (
	"errors"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin"
	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"github.com/gpuprobe/gpuprobe/gpuprobe/ptxmod"
)

// fuzzLimits are small, so that the fuzzer reaches every limit and a
// breach of the memory bound shows up as the fuzzer's RSS limit.
var fuzzLimits = Limits{
	Inflate:    fatbin.Limits{MaxEntry: 4 << 20, MaxTotal: 4 << 20, MaxRatio: 128},
	Parse:      ptxmod.Limits{MaxBytes: 4 << 20, MaxTokens: 1 << 18, MaxFuncs: 256},
	MaxKernels: 64,
	MaxMemory:  256 << 20,
	MaxWait:    time.Millisecond,
}

// FuzzPatch feeds whole PATCH payloads (the frame after its 12-byte
// header, image inline) through UnmarshalPatch and Patch under
// fuzzLimits: nothing panics, every refusal is a NOPATCH, and no patch
// memory stays held.
func FuzzPatch(f *testing.F) {
	progs, err := probes.Load(probes.KernelPhases)
	if err != nil {
		f.Fatal(err)
	}
	p, err := New(Options{Programs: progs, DeviceOnly: probes.KernelPhasesDeviceOnly, MaxThreads: 4096,
		RingDevice: probes.KernelPhasesRingDevice, Keys: kpKeys(len(progs)), Limits: fuzzLimits})
	if err != nil {
		f.Fatal(err)
	}
	bind := func(name string) (Binding, bool) {
		if name != probes.KernelPhasesRingMap {
			return Binding{}, false
		}
		return Binding{Region: 2, Lanes: 1, RingBlock: make([]byte, 64)}, true
	}
	seed := func(image []byte) {
		frame, err := agentwire.MarshalPatch(&agentwire.PatchRequest{ID: 1, Arch: 80, API: agentwire.APIModule, Image: image}, false)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(frame[12:])
	}
	seed(manyKernels(3))
	seed(fatbintest.Container(zstdEntry(f, manyKernels(2))))
	seed(fatbintest.Container(lz4Entry(f, manyKernels(100))))
	seed(fatbintest.Container(fatbintest.BombEntry{Flags: fatbintest.FlagsLZ4, Arch: 80, Payload: fatbintest.LZ4Bomb(1 << 20), Claim: 1 << 20}))
	seed(fatbintest.Container(fatbintest.BombEntry{Flags: fatbintest.FlagsZstd, Arch: 80, Payload: fatbintest.ZstdBomb(f, 1<<20), Claim: 1000}))
	f.Fuzz(func(t *testing.T, payload []byte) {
		req, flags, _, err := agentwire.UnmarshalPatch(payload)
		if err != nil || flags != 0 {
			return
		}
		_, err = p.Patch(&req, bind)
		var np *agentwire.NoPatch
		if err != nil && !errors.As(err, &np) {
			t.Fatalf("error %T %v, want an *agentwire.NoPatch", err, err)
		}
		if u := p.mem.Used(); u != 0 {
			t.Fatalf("%d bytes of patch memory held after Patch", u)
		}
	})
}
