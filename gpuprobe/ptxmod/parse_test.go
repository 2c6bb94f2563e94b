package ptxmod

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// A module that uses every construct the parser knows, in the spacing
// styles nvcc and hand-written PTX use.
const kitchenSink = `//
// hand-written test module /* not a block comment */
//
.version 7.8
.target sm_80, debug
.address_size 64

/* a block
   comment { with braces } */
.extern .func (.param .b32 func_retval0) vprintf
(
	.param .b64 vprintf_param_0,
	.param .b64 vprintf_param_1
)
;
.global .align 4 .u32 counter;
.const .align 4 .b8 table[16] = {1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0};
.global .align 1 .b8 $str[6] = {104, 101, 108, 108, 111, 0};
.extern .shared .align 16 .b8 dyn[];
.weak .global .align 8 .u64 weakvar;

.func  (.param .b32 func_retval0) helper(
	.param .b64 helper_param_0
)
{
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<2>;

	ld.param.u64 	%rd1, [helper_param_0];
	ld.u32 	%r1, [%rd1];
	st.param.b32 	[func_retval0+0], %r1;
	ret;
}

.visible .entry kern(
	.param .u64 kern_param_0,
	.param .align 8 .b8 kern_param_1[16],
	.param .u64 .ptr .global .align 4 kern_param_2
)
.maxntid 256, 1, 1
.minnctapersm 2
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<10>;
	.reg .f32 	%f<9>;
	.reg .b64 	%rd<10>;
	.local .align 8 .b8 	__local_depot1[16];
	.shared .align 4 .b8 tile[1024];

	.pragma "nounroll";
	ld.param.u64 	%rd1, [kern_param_0];
	mov.u32 	%r1, %tid.x;
	setp.eq.s32 	%p1, %r1, 0;
	@%p1 bra 	$L__BB1_2;
	@!%p1 ret;
	ld.global.nc.v4.f32 	{%f1, %f2, %f3, %f4}, [%rd1+16];
	st.global.v2.u64 	[%rd1+-8], {%rd2, %rd3};
	ld.shared::cta.u32 	%r2, [tile+4];
	ld.global.L1::no_allocate.b128 	%rd4, [%rd1];
	st.local.u8 	[__local_depot1], %r2;
	atom.global.add.u32 	%r3, [counter], 1;
	{ // callseq 0, 0
	.reg .b32 temp_param_reg;
	.param .b64 param0;
	st.param.b64 	[param0+0], %rd1;
	.param .b32 retval0;
	call.uni (retval0), 
	helper, 
	(
	param0
	);
	ld.param.b32 	%r4, [retval0+0];
	} // callseq 0
	// begin inline asm
	{
	 .reg .pred p;
	 setp.ne.u32 p, %r4, 0;
	 @p exit;
	}
	// end inline asm
	mov.b64 	{%r5, %r6}, %rd1;
	add.f32 	%f5, %f1, 0f3F800000;
	bar.warp.sync 	-1;
prototype_0 : .callprototype (.param .b32 _) _ (.param .b64 _);
$L__BB1_2:
	ret;

}
`

func TestParseKitchenSink(t *testing.T) {
	m, err := Parse([]byte(kitchenSink))
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.Bytes()
	if err != nil || string(out) != kitchenSink {
		t.Fatalf("round trip: %v\n%s", err, out)
	}
	if m.Major != 7 || m.Minor != 8 || !reflect.DeepEqual(m.Target, []string{"sm_80", "debug"}) || m.AddressSize != 64 {
		t.Errorf("header: %d.%d %v %d", m.Major, m.Minor, m.Target, m.AddressSize)
	}
	if len(m.Funcs) != 3 {
		t.Fatalf("%d functions, want 3", len(m.Funcs))
	}
	var labels []string
	m.Funcs[2].Walk(func(s *Stmt) {
		if s.Kind == StmtLabel {
			labels = append(labels, s.Label)
		}
	})
	if !reflect.DeepEqual(labels, []string{"prototype_0", "$L__BB1_2"}) {
		t.Errorf("labels %q", labels)
	}
}

func TestParseStructure(t *testing.T) {
	m, err := Parse([]byte(kitchenSink))
	if err != nil {
		t.Fatal(err)
	}
	var decls []string
	for _, d := range m.Decls {
		decls = append(decls, d.Linkage+d.Directive+":"+d.Name)
	}
	want := []string{".version:", ".target:", ".address_size:", ".global:counter", ".const:table", ".global:$str", ".extern.shared:dyn", ".weak.global:weakvar"}
	if !reflect.DeepEqual(decls, want) {
		t.Errorf("decls %q, want %q", decls, want)
	}

	if len(m.Funcs) != 3 {
		t.Fatalf("%d functions, want 3", len(m.Funcs))
	}
	ext, helper, kern := m.Funcs[0], m.Funcs[1], m.Funcs[2]
	if ext.Name != "vprintf" || ext.HasBody || ext.Linkage != ".extern" || len(ext.Returns) != 1 || len(ext.Params) != 2 {
		t.Errorf("extern: %+v", ext)
	}
	if helper.Entry || !helper.HasBody || helper.Returns[0].Name != "func_retval0" || helper.Returns[0].Type != ".b32" {
		t.Errorf("helper: %+v", helper)
	}
	if !kern.Entry || kern.Linkage != ".visible" || kern.Name != "kern" {
		t.Errorf("kern: entry %v linkage %q name %q", kern.Entry, kern.Linkage, kern.Name)
	}
	if got := m.Kernels(); len(got) != 1 || got[0] != kern || m.Func("helper") != helper || m.Func("nope") != nil {
		t.Errorf("Kernels/Func lookups wrong")
	}
	wantParams := []Param{
		{Space: ".param", Type: ".u64", Name: "kern_param_0"},
		{Space: ".param", Type: ".b8", Align: 8, Name: "kern_param_1", ArraySize: 16},
		{Space: ".param", Type: ".u64", Name: "kern_param_2", Ptr: true},
	}
	for i, w := range wantParams {
		g := kern.Params[i]
		if g.Space != w.Space || g.Type != w.Type || g.Align != w.Align || g.Name != w.Name || g.ArraySize != w.ArraySize || g.Ptr != w.Ptr {
			t.Errorf("param %d: %+v, want %+v", i, g, w)
		}
	}
	if !reflect.DeepEqual(kern.Performance, []string{".maxntid 256, 1, 1", ".minnctapersm 2"}) {
		t.Errorf("performance directives %q", kern.Performance)
	}
	if m.Text(kern.ParamList)[0] != '(' || !strings.HasSuffix(m.Text(kern.ParamList), "kern_param_2\n)") {
		t.Errorf("param list span %q", m.Text(kern.ParamList))
	}

	// Top: the .pragma after the declarations.
	if kern.Top == nil || m.Text(kern.Top.Span) != `.pragma "nounroll";` {
		t.Errorf("top = %+v", kern.Top)
	}
	var exits []string
	for _, s := range kern.Exits {
		exits = append(exits, m.Text(s.Span))
	}
	if want := []string{"@!%p1 ret;", "@p exit;", "ret;"}; !reflect.DeepEqual(exits, want) {
		t.Errorf("exits %q, want %q", exits, want)
	}
	if g := kern.Exits[0]; g.Guard != "%p1" || !g.GuardNot || g.Depth != 0 {
		t.Errorf("guarded ret: guard %q not %v depth %d", g.Guard, g.GuardNot, g.Depth)
	}
	if g := kern.Exits[1]; g.Guard != "p" || g.GuardNot || g.Depth != 1 {
		t.Errorf("inline asm exit: guard %q not %v depth %d", g.Guard, g.GuardNot, g.Depth)
	}

	type acc struct {
		store       bool
		space, typ  string
		vec, size   int
		base        string
		off         int64
		kind        OperandKind
		elemsOfData int
	}
	var got []acc
	for _, a := range kern.Mem {
		got = append(got, acc{a.Store, a.Space, a.Type, a.Vec, a.Size, a.Addr.Base, a.Addr.Offset, a.Addr.Kind, 0})
	}
	wantMem := []acc{
		{false, "param", "u64", 1, 8, "kern_param_0", 0, OperandAddress, 0},
		{false, "global", "f32", 4, 16, "%rd1", 16, OperandAddress, 0},
		{true, "global", "u64", 2, 16, "%rd1", -8, OperandAddress, 0},
		{false, "shared", "u32", 1, 4, "tile", 4, OperandAddress, 0},
		{false, "global", "b128", 1, 16, "%rd1", 0, OperandAddress, 0},
		{true, "local", "u8", 1, 1, "__local_depot1", 0, OperandAddress, 0},
		{true, "param", "b64", 1, 8, "param0", 0, OperandAddress, 0},
		{false, "param", "b32", 1, 4, "retval0", 0, OperandAddress, 0},
	}
	if !reflect.DeepEqual(got, wantMem) {
		t.Errorf("mem accesses:\n got %+v\nwant %+v", got, wantMem)
	}
	if g := kern.GlobalAccesses(false); len(g) != 3 {
		t.Errorf("%d global accesses, want 3", len(g))
	}
	if g := helper.GlobalAccesses(true); len(g) != 1 || !g[0].Generic() {
		t.Errorf("helper: generic accesses %+v, want the ld.u32", g)
	}

	// Operands of a few instructions.
	var vec, call *Stmt
	kern.Walk(func(s *Stmt) {
		switch s.Opcode {
		case "mov.b64":
			vec = s
		case "call.uni":
			call = s
		}
	})
	if vec == nil || vec.Operands[0].Kind != OperandVector || !reflect.DeepEqual(vec.Operands[0].Elems, []string{"%r5", "%r6"}) || vec.Operands[1].Kind != OperandRegister {
		t.Errorf("vector operand: %+v", vec)
	}
	if call == nil || len(call.Operands) != 3 || call.Operands[0].Kind != OperandList || call.Operands[1].Kind != OperandSymbol ||
		!reflect.DeepEqual(call.Operands[2].Elems, []string{"param0"}) || call.Depth != 1 {
		t.Errorf("call operands: %+v", call)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name      string
		src       string
		line, col int
		msg       string
	}{
		{"unterminated block comment", ".version 7.8\n/* x", 2, 1, "unterminated /* comment"},
		{"unterminated string", ".version 7.8\n.pragma \"abc\n", 2, 9, "string not closed"},
		{"stray byte", ".version 7.8\n\x01", 2, 1, "unexpected byte"},
		{"instruction at module scope", ".version 7.8\nret;\n", 2, 1, "expected a directive at module scope"},
		{"bad version", ".version seven\n", 1, 1, ".version needs one number"},
		{"version not major.minor", ".version 7\n", 1, 10, "not MAJOR.MINOR"},
		{"two versions", ".version 7.0\n.version 7.1\n", 2, 1, "second .version"},
		{"bad address size", ".address_size 48\n", 1, 15, "want 32 or 64"},
		{"declaration without ;", ".version 7.8\n.global .u32 x\n", 3, 1, "declaration at 2:1 is not terminated by ';'"},
		{"unclosed body", ".version 7.8\n.entry k()\n{\n\tret;\n", 5, 1, "'{' at 3:1 is not closed"},
		{"unclosed section", ".section .debug_info\n{\n.b8 1\n", 2, 1, "'{' is not closed"},
		{"instruction without ;", ".entry k()\n{\n\tret\n}\n", 4, 1, "unbalanced"},
		{"missing function name", ".entry (\n", 1, 8, "expected a function name"},
		{"unclosed params", ".entry k(.param .u32 a\n", 1, 9, "parameter list is not closed"},
		{"empty param", ".entry k(.param .u32 a,)\n{\n}\n", 1, 24, "empty parameter"},
		{"param without name", ".entry k(.param .u32)\n{\n}\n", 1, 10, "has no name"},
		{"junk after header", ".entry k() foo {\n}\n", 1, 12, "expected '{', ';' or a directive"},
		{"bad guard", ".entry k()\n{\n\t@ 1 ret;\n}\n", 3, 4, "expected a predicate register"},
		{"register as opcode", ".entry k()\n{\n\t%r1;\n}\n", 3, 2, "expected an instruction"},
		{"stray punctuation in body", ".entry k()\n{\n\t, ret;\n}\n", 3, 2, "unexpected \",\" in a function body"},
		{"unbalanced bracket", ".entry k()\n{\n\tld.u32 %r1, [%rd1);\n}\n", 3, 19, "unbalanced"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.src))
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("error %v, want a *SyntaxError", err)
			}
			if se.Line != tt.line || se.Col != tt.col || !strings.Contains(se.Msg, tt.msg) {
				t.Errorf("error %q, want %d:%d: ...%s...", err, tt.line, tt.col, tt.msg)
			}
		})
	}
}

func TestMemAccessSizes(t *testing.T) {
	tests := []struct {
		opcode string
		store  bool
		space  string
		size   int
	}{
		{"ld.global.u32", false, "global", 4},
		{"ld.global.v4.f32", false, "global", 16},
		{"ld.global.nc.v2.f64", false, "global", 16},
		{"st.global.u8", true, "global", 1},
		{"st.global.v4.b16", true, "global", 8},
		{"ld.f32", false, "", 4},
		{"st.v2.u64", true, "", 16},
		{"ld.volatile.global.s16", false, "global", 2},
		{"ld.relaxed.gpu.global.u64", false, "global", 8},
		{"st.release.sys.global.b32", true, "global", 4},
		{"ldu.global.f16x2", false, "global", 4},
		{"ld.shared::cluster.u32", false, "shared", 4},
		{"ld.param::entry.b64", false, "param", 8},
		{"ld.global.v8.f16", false, "global", 16},
		{"st.global.b128", true, "global", 16},
		{"ld.global", false, "global", 0},
	}
	for _, tt := range tests {
		t.Run(tt.opcode, func(t *testing.T) {
			s := &Stmt{Kind: StmtInstr, Opcode: tt.opcode, Operands: []Operand{{Text: "a"}, {Text: "b"}}}
			m, ok := memAccess(s)
			if !ok || m.Store != tt.store || m.Space != tt.space || m.Size != tt.size {
				t.Errorf("memAccess: ok %v store %v space %q size %d, want store %v space %q size %d", ok, m.Store, m.Space, m.Size, tt.store, tt.space, tt.size)
			}
			want := "b"
			if tt.store {
				want = "a"
			}
			if m.Addr.Text != want {
				t.Errorf("address operand %q, want %q", m.Addr.Text, want)
			}
		})
	}
	for _, op := range []string{"atom.global.add.u32", "mov.u32", "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "stmatrix.sync.aligned.m8n8.x1.shared.b16"} {
		if _, ok := memAccess(&Stmt{Opcode: op}); ok {
			t.Errorf("%s counted as ld/st", op)
		}
	}
}
