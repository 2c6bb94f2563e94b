package inject

import (
	"regexp"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/ptx"
)

// TestInlined injects the testdata programs (entry, exit and memcapture,
// with bpf-to-bpf calls, loops and helpers) into every kernel of a sample,
// inlined and called, and checks where each program's code went: inlined,
// every entry and exit site is a block with its own labels and no call of
// the program's .func; memcapture programs stay calls. Both assemble.
func TestInlined(t *testing.T) {
	var progs []*jit.Program
	for _, o := range []string{"kernelretsnoop", "threadhist", "launchlate", "callfunc", "loop", "memcount"} {
		for _, p := range bpfObject(t, o) {
			if p.IsGPU() {
				progs = append(progs, p)
			}
		}
	}
	progs = append(retarget(progs, "*"), kernelPhases(t)...)
	src := samplePTX(t, "vectoradd", "sm_90")
	retRe := regexp.MustCompile(`(?m)^\$gpuprobe_i(\d+)_ret:$`)
	for _, noInline := range []bool{false, true} {
		out, rep, err := Inject(src, progs, Options{NoInline: noInline})
		if err != nil {
			t.Fatal(err)
		}
		text := string(out)
		sites := 0
		for _, k := range rep.Kernels {
			sites += len(k.Entry) + len(k.Exit)
		}
		if sites == 0 {
			t.Fatal("no entry or exit sites")
		}
		want := sites
		if noInline {
			want = 0
		}
		if n := strings.Count(text, " (inlined)\n"); n != want {
			t.Errorf("noInline=%v: %d inlined blocks, want %d", noInline, n, want)
		}
		seen := map[string]bool{}
		for _, m := range retRe.FindAllStringSubmatch(text, -1) {
			if seen[m[1]] {
				t.Errorf("inlined site %s ends twice", m[1])
			}
			seen[m[1]] = true
		}
		if len(seen) != want {
			t.Errorf("noInline=%v: %d inlined site ends, want %d", noInline, len(seen), want)
		}
		for _, p := range rep.Programs {
			called := strings.Contains(text, "call (gpuprobe_r), "+p.Func+",")
			if wantCall := noInline || p.Kind == jit.ProbeMemCapture; called != wantCall || p.Inlined == wantCall {
				t.Errorf("noInline=%v: program %s (%v): called %v, reported inlined %v; want called %v", noInline, p.Name, p.Kind, called, p.Inlined, wantCall)
			}
		}
		if !noInline {
			// Inside kernels, every label an inlined body defines has its
			// site's prefix.
			for _, blk := range strings.Split(text, " (inlined)\n")[1:] {
				body := blk[:strings.Index(blk, "_ret:\n")]
				for _, l := range regexp.MustCompile(`(?m)^\$([A-Za-z0-9_]+):$`).FindAllStringSubmatch(body, -1) {
					if !strings.HasPrefix(l[1], "gpuprobe_i") {
						t.Errorf("inlined label $%s without its site's prefix", l[1])
					}
				}
				if strings.Contains(body, "[__ctx]") || strings.Contains(body, "[__ret]") || strings.Contains(body, "\tret;") {
					t.Errorf("inlined body still reads its parameters or returns:\n%s", body)
				}
			}
		}
		ptxas(t, out, "sm_90")
	}
}

// TestInlineBody checks what newInlineBody accepts: a body it does not
// recognise is called instead, so these must be errors, not wrong splices.
func TestInlineBody(t *testing.T) {
	head := ".func (.param .b64 __ret) f(.param .b64 __ctx, .param .b64 __len)\n{\n"
	tests := []struct {
		name, body, err string
	}{
		{"plain", head + "\t.reg .b64 %r<2>;\n\tld.param.b64 %r1, [__ctx];\n$L1:\n\tst.param.b64 [__ret], %r0;\n\tret;\n}\n", ""},
		{"no definition", ".func (.param .b64 __ret) g(.param .b64 __ctx)\n{\n\tret;\n}\n", "definition not found"},
		{"no body", head[:len(head)-2], "body not found"},
		{"no end", head + "\tret;\n", "end of body not found"},
		{"predicated ret", head + "\t@%p1 ret;\n\tret;\n}\n", "a ret other than the function's own"},
		{"no ret", head + "\tmov.u64 %r0, 0;\n}\n", "no ret"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := newInlineBody(&ptx.Func{Name: "f", Body: tc.body})
			if tc.err == "" {
				if err != nil || !b.labels["L1"] {
					t.Fatalf("err %v, labels %v", err, b)
				}
				var sb strings.Builder
				b.write(&sb, "p", 7, "%gpuprobe_mctx", "16", "%gpuprobe_lid")
				want := "\t{ // gpuprobe: p (inlined)\n\t.reg .b64 %r<2>;\n\tmov.b64 %r1, %gpuprobe_mctx;\n$gpuprobe_i7_L1:\n\tbra.uni $gpuprobe_i7_ret;\n$gpuprobe_i7_ret:\n\t}\n"
				if sb.String() != want {
					t.Fatalf("spliced\n%q\nwant\n%q", sb.String(), want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err %v, want %q", err, tc.err)
			}
		})
	}
}

// TestRelabel: only the body's own labels get the prefix, whole names only.
func TestRelabel(t *testing.T) {
	b := &inlineBody{labels: map[string]bool{"L3": true, "Lexit": true}}
	tests := []struct{ in, want string }{
		{"\tbra $L3;", "\tbra $gpuprobe_i2_L3;"},
		{"$L3:", "$gpuprobe_i2_L3:"},
		{"\t@%p0 bra.uni $Lexit;", "\t@%p0 bra.uni $gpuprobe_i2_Lexit;"},
		{"\tbra $L33;", "\tbra $L33;"},
		{"\tbra $L_top;", "\tbra $L_top;"},
		{"\tmov.u64 %r0, gpuprobe_blk_x;", "\tmov.u64 %r0, gpuprobe_blk_x;"},
		{"\tbra $L3; // $Lexit", "\tbra $gpuprobe_i2_L3; // $gpuprobe_i2_Lexit"},
	}
	for _, tc := range tests {
		if got := b.relabel(tc.in, "gpuprobe_i2_"); got != tc.want {
			t.Errorf("relabel(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
