package ptx

import (
	"io"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/interp"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
)

// interpFaults are the interpreter's errors for a memory access it cannot
// make: a verified program must never produce one.
var interpFaults = []string{"outside the", "out of bounds", "not a valid pointer", "null pointer",
	"beyond the value", "crosses the end", "read-only", "map handles are not pointers"}

// FuzzHelperContracts runs random helper calls through the verifier, the
// interpreter and the compiled PTX on the emulator. Each program fills
// the frame with 0x41 bytes, then, from the input, stores known bytes
// (often 0, which ends a string), unknown words and calls helpers of
// jit.Helpers() with pointers anywhere in the top 200 bytes of the frame
// (misaligned too) and sizes up to 199. Whatever the verifier accepts
// must run in the interpreter without a memory fault and on the emulator
// without any fault (it maps nothing past the frame and refuses
// misaligned accesses, as the GPU does).
func FuzzHelperContracts(f *testing.F) {
	// Indexes of jit.Helpers(): 1 map_update_elem, 4 trace_printk,
	// 6 perf_event_output, 7 puts, 9 get_block_idx, 26 atomic_min_u64.
	for _, seed := range [][]byte{
		{2, 7, 8},                      // puts(r10-8)
		{0, 3, 0, 2, 7, 8},             // the same with a 0 at r10-4
		{2, 4, 168, 168},               // trace_printk(r10-168, 168)
		{2, 6, 0, 0, 0, 24, 24},        // perf_event_output(r10-24, 24)
		{1, 0, 2, 1, 0, 12, 20, 0},     // map_update_elem(key r10-12, value r10-20) over unknown bytes
		{2, 26, 9, 0, 2, 9, 8, 16, 24}, // atomic_min_u64 misaligned, get_block_idx
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p := &jit.Program{Name: "fuzz", Insns: contractFuzzProg(b), Maps: contractMaps}
		res, err := verifier.Verify(p, verifier.Options{MaxSteps: 200_000})
		if err != nil {
			return
		}
		if _, err := interp.Run(p, nil, &interp.Env{Out: io.Discard}); err != nil {
			for _, fault := range interpFaults {
				if strings.Contains(err.Error(), fault) {
					t.Fatalf("verified program faults in the interpreter: %v\n%v", err, p.Insns)
				}
			}
		}
		for _, o := range []Options{{}, {Verified: res}} {
			fn, err := Compile(p, o)
			if err != nil {
				t.Fatalf("verified program does not compile (proofs %v): %v\n%v", o.Verified != nil, err, p.Insns)
			}
			if _, _, err := emuContract(fn); err != nil {
				t.Fatalf("verified program faults on the emulator (proofs %v): %v\n%v", o.Verified != nil, err, p.Insns)
			}
		}
	})
}

// contractFuzzProg builds a program of at most 12 steps from b.
func contractFuzzProg(b []byte) asm.Instructions {
	next := func() byte {
		if len(b) == 0 {
			return 0
		}
		c := b[0]
		b = b[1:]
		return c
	}
	insns := asm.Instructions{asm.LoadImm(asm.R1, 0x4141414141414141, asm.DWord)}
	for o := int16(-jit.StackSize); o < 0; o += 8 {
		insns = append(insns, asm.StoreMem(asm.R10, o, asm.R1, asm.DWord))
	}
	ids := jit.Helpers()
	for n := 0; len(b) > 0 && n < 12; n++ {
		switch next() % 3 {
		case 0:
			off, v := -1-int16(next()%200), next()
			if v < 0x40 {
				v = 0
			}
			insns = append(insns, asm.StoreImm(asm.R10, off, int64(v), asm.Byte))
		case 1:
			insns = append(insns, call(jit.HelperGetGlobalTimer), asm.StoreMem(asm.R10, -8*(1+int16(next()%25)), asm.R0, asm.DWord))
		case 2:
			id := ids[int(next())%len(ids)]
			sig, _ := jit.HelperSignature(id)
			for a, at := range sig.Args {
				insns = append(insns, contractFuzzArg(at, asm.Register(a+1), next())...)
			}
			insns = append(insns, call(id))
		}
	}
	return append(insns, asm.Mov.Imm(asm.R0, 0), asm.Return())
}

// contractFuzzArg sets register r for an argument of type at from c: a
// pointer to r10-c (c = 0 points at the frame's top), a size c%200, the
// maps of contractMaps, or c.
func contractFuzzArg(at jit.ArgType, r asm.Register, c byte) asm.Instructions {
	switch at {
	case jit.ArgNone:
		return nil
	case jit.ArgMap:
		return asm.Instructions{mapPtr(r, "tgt")}
	case jit.ArgRingbuf:
		return asm.Instructions{mapPtr(r, "ring")}
	case jit.ArgScalar, jit.ArgAnything:
		return asm.Instructions{asm.Mov.Imm(r, int32(c))}
	case jit.ArgSize:
		return asm.Instructions{asm.Mov.Imm(r, int32(c%200))}
	}
	return asm.Instructions{asm.Mov.Reg(r, asm.R10), asm.Add.Imm(r, -int32(c%200))}
}
