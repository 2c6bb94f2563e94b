package ptxmod

import (
	"strings"
	"testing"
)

const small = `.version 7.0
.target sm_80
.address_size 64

.visible .entry k(
	.param .u64 k_param_0
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<3>;

	ld.param.u64 	%rd1, [k_param_0];
	@%p1 ret; // early
	ld.global.u32 	%r1, [%rd1];
$L__BB0_2: st.global.u32 	[%rd1+4], %r1;
	ret;
}
`

func TestEdits(t *testing.T) {
	tests := []struct {
		name string
		edit func(m *Module, k *Func) error
		want string // the expected module, as a replacement of small's lines
	}{
		{
			name: "top of body",
			edit: func(m *Module, k *Func) error { return m.InsertTop(k, "\tENTRY;\n") },
			want: strings.Replace(small, "\n\tld.param.u64", "\n\tENTRY;\n\tld.param.u64", 1),
		},
		{
			name: "before every exit",
			edit: func(m *Module, k *Func) error {
				for _, s := range k.Exits {
					m.InsertBefore(s, "\tEXIT;\n")
				}
				return nil
			},
			want: strings.Replace(strings.Replace(small, "\t@%p1 ret;", "\tEXIT;\n\t@%p1 ret;", 1), "\tret;\n}", "\tEXIT;\n\tret;\n}", 1),
		},
		{
			name: "after global accesses (one after a comment, one after a label on the same line)",
			edit: func(m *Module, k *Func) error {
				for _, a := range k.GlobalAccesses(false) {
					m.InsertAfter(a.Stmt, "\tMEM "+a.Addr.Text+";\n")
				}
				return nil
			},
			want: strings.Replace(strings.Replace(small, "[%rd1];\n", "[%rd1];\n\tMEM [%rd1];\n", 1),
				"%r1;\n\tret;", "%r1;\n\tMEM [%rd1+4];\n\tret;", 1),
		},
		{
			name: "before a statement that shares its line with a label",
			edit: func(m *Module, k *Func) error {
				m.InsertBefore(k.GlobalAccesses(false)[1].Stmt, "PROBE; ")
				return nil
			},
			want: strings.Replace(small, "$L__BB0_2: st.global", "$L__BB0_2: PROBE; st.global", 1),
		},
		{
			name: "after a statement followed by a comment",
			edit: func(m *Module, k *Func) error {
				m.InsertAfter(k.Exits[0], "\tAFTER;\n")
				return nil
			},
			want: strings.Replace(small, "// early\n", "// early\n\tAFTER;\n", 1),
		},
		{
			name: "module scope after the header, and a parameter",
			edit: func(m *Module, k *Func) error {
				m.AppendParam(k, ".param .u64 gpuprobe_launch")
				return m.InsertAfterHeader(".global .u64 gpuprobe_map;\n")
			},
			want: strings.Replace(strings.Replace(small, ".address_size 64\n", ".address_size 64\n.global .u64 gpuprobe_map;\n", 1),
				"k_param_0\n)", "k_param_0,\n\t.param .u64 gpuprobe_launch\n)", 1),
		},
		{
			name: "raise the version, keep the target",
			edit: func(m *Module, k *Func) error {
				changed, err := m.ReconcileVersion(7, 8)
				if !changed {
					t.Error("ReconcileVersion(7, 8) on 7.0 did not change it")
				}
				return err
			},
			want: strings.Replace(small, ".version 7.0", ".version 7.8", 1),
		},
		{
			name: "a lower version leaves it",
			edit: func(m *Module, k *Func) error {
				changed, err := m.ReconcileVersion(6, 5)
				if changed {
					t.Error("ReconcileVersion(6, 5) on 7.0 changed it")
				}
				return err
			},
			want: small,
		},
		{
			name: "target",
			edit: func(m *Module, k *Func) error { return m.SetTarget("sm_90") },
			want: strings.Replace(small, ".target sm_80", ".target sm_90", 1),
		},
		{
			name: "replace an exit",
			edit: func(m *Module, k *Func) error {
				m.Replace(k.Exits[1].Span, "bra.uni $L__exit;")
				return nil
			},
			want: strings.Replace(small, "\tret;\n}", "\tbra.uni $L__exit;\n}", 1),
		},
		{
			name: "several insertions at one place keep their order",
			edit: func(m *Module, k *Func) error {
				m.InsertBefore(k.Exits[1], "\tA;\n")
				m.InsertBefore(k.Exits[1], "\tB;\n")
				return nil
			},
			want: strings.Replace(small, "\tret;\n}", "\tA;\n\tB;\n\tret;\n}", 1),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse([]byte(small))
			if err != nil {
				t.Fatal(err)
			}
			if err := tt.edit(m, m.Kernels()[0]); err != nil {
				t.Fatal(err)
			}
			got, err := m.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
			if string(m.Source()) != small {
				t.Error("editing changed the source")
			}
			m.Reset()
			if got, _ := m.Bytes(); string(got) != small || m.Edited() {
				t.Error("Reset did not drop the edits")
			}
		})
	}
}

func TestEditErrors(t *testing.T) {
	m, err := Parse([]byte(small))
	if err != nil {
		t.Fatal(err)
	}
	k := m.Kernels()[0]
	m.Replace(k.Exits[1].Span, "X;")
	m.Replace(Span{k.Exits[1].Pos + 1, k.Exits[1].End}, "Y;")
	if _, err := m.Bytes(); err == nil || !strings.Contains(err.Error(), "16:3") {
		t.Errorf("overlapping replacements: %v, want an error at 16:3", err)
	}

	noHeader, err := Parse([]byte(".entry k()\n{\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noHeader.ReconcileVersion(7, 0); err == nil {
		t.Error("ReconcileVersion without .version succeeded")
	}
	if err := noHeader.SetTarget("sm_90"); err == nil {
		t.Error("SetTarget without .target succeeded")
	}
	if err := noHeader.InsertAfterHeader("x"); err == nil {
		t.Error("InsertAfterHeader without a header succeeded")
	}
	// An empty body: InsertTop goes before the closing brace, and a
	// parameter list is created.
	noHeader.InsertTop(noHeader.Funcs[0], "\tret;\n")
	noHeader.AppendParam(noHeader.Funcs[0], ".param .u64 p")
	if got, _ := noHeader.Bytes(); string(got) != ".entry k(.param .u64 p)\n{\n\tret;\n}\n" {
		t.Errorf("empty body: got %q", got)
	}
	decl, err := Parse([]byte(".extern .func f;\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := decl.InsertTop(decl.Funcs[0], "x"); err == nil {
		t.Error("InsertTop on a declaration succeeded")
	}
	decl.AppendParam(decl.Funcs[0], ".param .u32 a")
	if got, _ := decl.Bytes(); string(got) != ".extern .func f(\n\t.param .u32 a\n);\n" {
		t.Errorf("no parameter list: got %q", got)
	}
}
