package inject

import (
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/ptxmod"
	"github.com/gpuprobe/gpuprobe/jit"
)

// TestExitSites checks that every ret/exit of a patched kernel, guarded,
// negated, labelled or nested, becomes a branch to the common exit block
// under the same guard, that the block is the only ret left, and that the
// labels stay on the first inserted instruction.
func TestExitSites(t *testing.T) {
	src := readTestdata(t, "exits.ptx")
	out, rep, err := Inject(src, []*jit.Program{emptyProbe(jit.ProbeExit, "exits")}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Kernels[0].ExitSites; got != 4 {
		t.Errorf("ExitSites = %d, want 4", got)
	}
	m := parse(t, out)
	f := m.Func("exits")
	if len(f.Exits) != 1 || m.Text(f.Exits[0].Span) != "ret;" {
		var ex []string
		for _, s := range f.Exits {
			ex = append(ex, m.Text(s.Span))
		}
		t.Fatalf("exits after patching: %q, want the exit block's ret only", ex)
	}
	text := m.Text(f.Span)
	for _, want := range []string{
		"\t@%p1 bra $gpuprobe_exit; // gpuprobe: was @%p1 ret;\n",
		"$L_ret1:\n\tbra $gpuprobe_exit; // gpuprobe: was ret;\n",
		"\t@%p3 bra $gpuprobe_exit; // gpuprobe: was @%p3 exit;\n",
		"$L_end: bra $gpuprobe_exit; // gpuprobe: was ret;\n",
		"$gpuprobe_exit:\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("patched kernel lacks %q", want)
		}
	}
	// The device function keeps its own ret.
	if tw := m.Func("twice"); len(tw.Exits) != 1 {
		t.Errorf("device function twice: %d exits, want its own ret", len(tw.Exits))
	}
	// The exit block runs the program (inlined: its body, not a call)
	// and ends the kernel.
	blk := text[strings.Index(text, "$gpuprobe_exit:"):]
	if !strings.Contains(blk, "{ // gpuprobe: empty_exit (inlined)\n") || strings.Contains(blk, "call (gpuprobe_r), gpuprobe_empty_exit") ||
		!strings.Contains(blk, "$gpuprobe_i1_ret:\n\t}\n") || !strings.HasSuffix(blk, "\tret;\n}") {
		t.Errorf("exit block:\n%s", blk)
	}
	ptxas(t, out, "sm_80")
}

// TestNegatedGuard checks @!%p ret.
func TestNegatedGuard(t *testing.T) {
	src := []byte(".version 7.8\n.target sm_90\n.address_size 64\n\n.visible .entry k(\n\t.param .u32 k_p\n)\n{\n\t.reg .pred %p<2>;\n\t.reg .b32 %r<2>;\n\tld.param.u32 %r1, [k_p];\n\tsetp.eq.u32 %p1, %r1, 0;\n\t@!%p1 ret;\n\tret;\n}\n")
	out, _, err := Inject(src, []*jit.Program{emptyProbe(jit.ProbeExit, "k")}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "\t@!%p1 bra $gpuprobe_exit; // gpuprobe: was @!%p1 ret;\n") {
		t.Errorf("negated guard lost:\n%s", numbered(out))
	}
	ptxas(t, out, "sm_90")
}

// TestMemSites checks that a memcapture program follows every global load
// and store (and, with Generic, every generic one, behind isspacep.global),
// with the access's size and direction in the context, under its guard.
func TestMemSites(t *testing.T) {
	src := readTestdata(t, "exits.ptx")
	orig := parse(t, src).Func("exits")
	nGlobal, nGeneric := len(orig.GlobalAccesses(false)), len(orig.GlobalAccesses(true))
	tests := []struct {
		name    string
		opts    Options
		sites   int
		generic bool
	}{
		{"global", Options{}, nGlobal, false},
		{"generic too", Options{Generic: true}, nGeneric, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, rep, err := Inject(src, retarget(bpfObject(t, "memcount"), "exits"), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Kernels[0].MemSites != tc.sites {
				t.Errorf("MemSites = %d, want %d", rep.Kernels[0].MemSites, tc.sites)
			}
			text := funcText(t, parse(t, out), "exits")
			if got := strings.Count(text, "call (gpuprobe_r), gpuprobe_memcount,"); got != tc.sites {
				t.Errorf("%d memcount calls, want %d", got, tc.sites)
			}
			for _, want := range []string{
				// ld.global.u32 [%rd4]: size 4, load.
				"\tmov.u64 %gpuprobe_maddr, %rd4; // gpuprobe: address of the next access\n\tld.global.u32 %r3, [%rd4];\n\t// gpuprobe: memcapture\n\tst.local.u64 [gpuprobe_memctx], %gpuprobe_maddr;\n\tmov.u64 %gpuprobe_t, 4;\n",
				// st.global.v2.u32 [%rd4+8]: size 8, store (flags 1 << 32).
				"\tadd.s64 %gpuprobe_maddr, %gpuprobe_maddr, 8;\n\tst.global.v2.u32 [%rd4+8], {%r4, %r4};\n\t// gpuprobe: memcapture\n\tst.local.u64 [gpuprobe_memctx], %gpuprobe_maddr;\n\tmov.u64 %gpuprobe_t, 4294967304;\n",
				// @%p3 st.global: the call is skipped when the store is.
				"@%p3 st.global.u32 [%rd4+-4], %r4;\n\t// gpuprobe: memcapture\n\t@!%p3 bra $gpuprobe_ms",
				// a symbol address.
				"\tmov.u64 %gpuprobe_maddr, hits; // gpuprobe: address of the next access\n\tld.global.u32 %r6, [hits];\n",
			} {
				if !strings.Contains(text, want) {
					t.Errorf("patched kernel lacks %q", want)
				}
			}
			if got := strings.Contains(text, "isspacep.global"); got != tc.generic {
				t.Errorf("isspacep.global present = %v, want %v", got, tc.generic)
			}
			// The atom.global is not a load or store: no call after it.
			if strings.Contains(text, "atom.global.add.u32 %r5, [hits], 1;\n\t// gpuprobe: memcapture") {
				t.Error("memcapture after an atomic")
			}
			ptxas(t, out, "sm_80")
		})
	}
}

// TestEntrySite checks the top of a patched kernel: declarations, the
// launch id load, then the entry calls, before the first statement (a
// label here, so that branches to it do not rerun the probe).
func TestEntrySite(t *testing.T) {
	tests := []struct {
		name     string
		mode     LaunchIDMode
		noInline bool
		load     string
		params   int
		entry    string // how the entry program runs
	}{
		{"param", LaunchIDParam, false, "\tld.param.u64 %gpuprobe_lid, [__gpuprobe_launch_id];\n", 3, "{ // gpuprobe: empty_entry (inlined)\n"},
		{"global", LaunchIDGlobal, false, "\tmov.u64 %gpuprobe_lid, 0;\n", 2, "{ // gpuprobe: empty_entry (inlined)\n"},
		{"param, called", LaunchIDParam, true, "\tld.param.u64 %gpuprobe_lid, [__gpuprobe_launch_id];\n", 3, "call (gpuprobe_r), gpuprobe_empty_entry"},
		{"global, called", LaunchIDGlobal, true, "\tmov.u64 %gpuprobe_lid, 0;\n", 2, "call (gpuprobe_r), gpuprobe_empty_entry"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, rep, err := Inject(readTestdata(t, "exits.ptx"), []*jit.Program{emptyProbe(jit.ProbeEntry, "exits")}, Options{LaunchID: tc.mode, NoInline: tc.noInline})
			if err != nil {
				t.Fatal(err)
			}
			m := parse(t, out)
			f := m.Func("exits")
			if len(f.Params) != tc.params {
				t.Errorf("%d parameters, want %d", len(f.Params), tc.params)
			}
			text := m.Text(f.Span)
			i, j, k := strings.Index(text, tc.load), strings.Index(text, tc.entry), strings.Index(text, "$L_top:")
			if i < 0 || j < 0 || k < 0 || !(i < j && j < k) {
				t.Errorf("launch id load at %d, entry call at %d, first label at %d:\n%s", i, j, k, text)
			}
			if (rep.Kernels[0].Launch != nil) != (tc.mode == LaunchIDParam) {
				t.Errorf("Launch = %+v in mode %s", rep.Kernels[0].Launch, tc.mode)
			}
			ptxas(t, out, "sm_90")
		})
	}
}

// TestLaunchParam checks where the hidden parameter lands for the shim.
func TestLaunchParam(t *testing.T) {
	tests := []struct {
		params string
		want   LaunchParam
	}{
		{"", LaunchParam{Index: 0, Offset: 0}},
		{".param .u64 a", LaunchParam{Index: 1, Offset: 8}},
		{".param .u32 a", LaunchParam{Index: 1, Offset: 8}},
		{".param .u64 a, .param .u32 b", LaunchParam{Index: 2, Offset: 16}},
		{".param .u32 a, .param .u8 b, .param .u16 c", LaunchParam{Index: 3, Offset: 8}},
		{".param .align 16 .b8 a[20]", LaunchParam{Index: 1, Offset: 24}},
		{".param .u8 a, .param .align 8 .b8 s[12], .param .u32 c", LaunchParam{Index: 3, Offset: 24}},
		{".param .u64 .ptr .global .align 16 a", LaunchParam{Index: 1, Offset: 8}},
	}
	for _, tc := range tests {
		t.Run(tc.params, func(t *testing.T) {
			src := ".version 7.8\n.target sm_90\n.address_size 64\n.visible .entry k(" + tc.params + ")\n{\n\tret;\n}\n"
			m, err := ptxmod.Parse([]byte(src))
			if err != nil {
				t.Fatal(err)
			}
			got, err := launchParam(m.Func("k"))
			if err != nil {
				t.Fatal(err)
			}
			tc.want.Name, tc.want.Size = LaunchParamName, 8
			if *got != tc.want {
				t.Errorf("got %+v, want %+v", *got, tc.want)
			}
			out, _, err := Inject([]byte(src), []*jit.Program{emptyProbe(jit.ProbeEntry, "k")}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			ptxas(t, out, "sm_90")
		})
	}
}

// TestSkipUnidentified: with Options.SkipUnidentified every probe site of a
// patched kernel (the entry probes, the exit block, each memcapture site)
// is jumped over when the launch id is 0; without it there is no such
// guard. ptxas assembles both (TestInjectPtxas).
func TestSkipUnidentified(t *testing.T) {
	progs := append(append(kernelPhases(t), retarget(bpfObject(t, "kernelretsnoop"), "*")...), bpfObject(t, "memcount")...)
	for _, skip := range []bool{true, false} {
		out, rep, err := Inject(samplePTX(t, "vectoradd", "sm_90"), progs, Options{SkipUnidentified: skip, Generic: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range rep.Kernels {
			body := funcText(t, parse(t, out), k.Name)
			want := map[string]int{
				"setp.eq.u64 " + regNoID + ", " + regLaunch + ", 0;": 1,
				"@" + regNoID + " bra " + skipEntry + ";":            1,
				skipEntry + ":":                          1,
				"@" + regNoID + " bra " + skipExit + ";": 1,
				skipExit + ":":                           1,
			}
			for line, n := range want {
				if !skip {
					n = 0
				}
				if got := strings.Count(body, line); got != n {
					t.Errorf("skip %v: kernel %s: %q %d times, want %d", skip, k.Name, line, got, n)
				}
			}
			memGuards := strings.Count(body, "@"+regNoID+" bra "+skipLabelP)
			if want := map[bool]int{true: k.MemSites, false: 0}[skip]; memGuards != want || (skip && k.MemSites == 0) {
				t.Errorf("skip %v: kernel %s: %d memcapture guards for %d sites", skip, k.Name, memGuards, k.MemSites)
			}
			// The guard comes before the first entry probe and after the
			// launch id is loaded.
			if skip {
				ld, guard, first := strings.Index(body, "ld.param.u64 "+regLaunch), strings.Index(body, "bra "+skipEntry), strings.Index(body, "// gpuprobe: kernel_phases")
				if ld < 0 || guard < ld || first < guard {
					t.Errorf("kernel %s: launch id load at %d, entry guard at %d, first probe at %d", k.Name, ld, guard, first)
				}
			}
		}
	}
}
