package ptx

import (
	"github.com/gpuprobe/gpuprobe/jit"
)

// TestKernel compiles p and wraps it in a standalone module with one entry
//
//	.entry NAME_test(.param .u64 mem, .param .u64 mem_len, .param .u64 result)
//
// (TestEntry gives the name)
// that runs the program once per thread of a one-dimensional launch. Each
// thread gets its own copy of mem, because programs may write it: thread t's
// copy starts at mem + t*align8(mem_len) (the host lays the copies out
// contiguously), r1 points to it (NULL when mem_len is 0), r2 = mem_len, and
// the thread stores r0 at result[t] (u64).
func TestKernel(p *jit.Program, opts Options) (string, *Func, error) {
	f, err := Compile(p, opts)
	if err != nil {
		return "", nil, err
	}
	return TestModule(f), f, nil
}

// TestEntry is the name of the test .entry of f.
func TestEntry(f *Func) string { return f.Name + "_test" }

// TestModule wraps compiled programs (with distinct prefixes, all for the
// same arch) into one module with a test entry for each, as TestKernel
// does for one. Batching many programs into one module makes ptxas runs
// cheap.
func TestModule(fs ...*Func) string {
	var e emitter
	if len(fs) == 0 {
		return ""
	}
	e.raw(Header(fs[0].Arch))
	sh, err := SharedDecls(nil, fs...)
	if err != nil {
		sh = "// " + err.Error() + "\n" // ptxas then names the duplicate
	}
	e.raw(sh)
	for _, f := range fs {
		e.raw(f.Decls + f.Body)
	}
	for _, f := range fs {
		testEntry(&e, f)
	}
	return e.String()
}

func testEntry(e *emitter, f *Func) {
	e.raw(".visible .entry ", TestEntry(f), "(.param .u64 mem, .param .u64 mem_len, .param .u64 result)\n{\n")
	e.raw("\t.reg .b64 %rd<12>;\n\t.reg .b32 %r<4>;\n\t.reg .pred %p<2>;\n")
	e.op("ld.param.u64 %rd1, [mem]")
	e.op("ld.param.u64 %rd2, [mem_len]")
	e.op("ld.param.u64 %rd3, [result]")
	e.op("cvta.to.global.u64 %rd3, %rd3")
	e.op("mov.u32 %r1, %ctaid.x")
	e.op("mov.u32 %r2, %ntid.x")
	e.op("mov.u32 %r3, %tid.x")
	e.op("mad.wide.u32 %rd4, %r1, %r2, 0")
	e.op("cvt.u64.u32 %rd5, %r3")
	e.op("add.s64 %rd4, %rd4, %rd5")
	e.op("add.s64 %rd6, %rd2, 7")
	e.op("and.b64 %rd6, %rd6, -8")
	e.op("mad.lo.u64 %rd7, %rd4, %rd6, %rd1")
	e.op("setp.eq.u64 %p1, %rd2, 0")
	e.op("@%p1 mov.u64 %rd7, 0")
	e.raw("\t{\n\t.param .b64 a0;\n\t.param .b64 a1;\n\t.param .b64 rv;\n")
	e.op("st.param.b64 [a0], %rd7")
	e.op("st.param.b64 [a1], %rd2")
	e.op("call (rv), ", f.Name, ", (a0, a1)")
	e.op("ld.param.b64 %rd8, [rv]")
	e.raw("\t}\n")
	e.op("shl.b64 %rd9, %rd4, 3")
	e.op("add.s64 %rd9, %rd3, %rd9")
	e.op("st.global.u64 [%rd9], %rd8")
	e.op("ret")
	e.raw("}\n\n")
}
