package translate

// Launch stacks: a shim client's Stack records carry the launching
// thread's native return addresses and Python frames of a sampled launch
// (sampling::stacks_per_second), in parts, just before its launch record.
// The client keeps each thread's latest stack until its launch record
// takes it; the launch then carries it in its application context
// (appSpan.stack), the trace policy keeps it before its kernel's head
// bound (keepStack), and a kept launch's span gets code.stacktrace,
// symbolised only then (package stacksym: the process's mapped files and
// memory, bounded), with the top Python frame as code.function.name,
// code.file.path and code.line.number.

import (
	"strings"

	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/stacksym"
	"go.opentelemetry.io/collector/pdata/pcommon"
)

// Span attributes of a launch stack (OpenTelemetry semantic conventions,
// code namespace).
const (
	AttrStacktrace   = "code.stacktrace"
	AttrCodeFunction = "code.function.name"
	AttrCodeFile     = "code.file.path"
	AttrCodeLine     = "code.line.number"
)

// maxStackWords bounds the words a thread's stack gathers across parts.
const maxStackWords = 512

// launchStack is one launch's stack, its parts put together.
type launchStack struct {
	id       uint64
	complete bool
	ver      uint16
	flags    record.StackFlags
	native   []uint64
	python   []record.PyFrame
}

// threadStacks are the stacks of a client's threads being gathered or
// waiting for their launch record, by thread id.
type threadStacks map[uint32]*launchStack

// onStack takes Stack record r of source src.
func (ct *clientTable) onStack(src uint32, r *record.Stack) {
	if src == HostProbeSource {
		return
	}
	c := ct.clientOf(src)
	if c.stacks == nil {
		c.stacks = threadStacks{}
	}
	s := c.stacks[r.TID]
	if r.Part == 0 || s == nil || s.id != r.LaunchID || s.complete {
		if s == nil && len(c.stacks) >= maxThreadContexts {
			return
		}
		if r.Part != 0 {
			delete(c.stacks, r.TID) // its first parts were lost
			return
		}
		s = &launchStack{id: r.LaunchID, ver: r.PyVersion}
		c.stacks[r.TID] = s
	}
	if len(s.native)+2*len(s.python)+len(r.Native)+2*len(r.Python) > maxStackWords {
		delete(c.stacks, r.TID)
		return
	}
	s.native = append(s.native, r.Native...)
	s.python = append(s.python, r.Python...)
	s.flags |= r.Flags
	s.complete = r.Flags&record.StackLast != 0
}

// takeStack returns the complete stack of launch id of thread tid of
// source src, if it came.
func (ct *clientTable) takeStack(src, tid uint32, id uint64) *launchStack {
	c := ct.get(src)
	if c == nil {
		return nil
	}
	s := c.stacks[tid]
	if s == nil || s.id != id || !s.complete {
		return nil
	}
	delete(c.stacks, tid)
	return s
}

// putStack writes l's stack, symbolised, on its span's attributes a.
func (so *spanOut) putStack(a pcommon.Map, pid uint32, s *launchStack) {
	if s == nil {
		return
	}
	fs := so.sym.Python(pid, s.ver, s.python, nil)
	if len(fs) > 0 && fs[0].Function != "" {
		a.PutStr(AttrCodeFunction, fs[0].Function)
		a.PutStr(AttrCodeFile, fs[0].File)
		a.PutInt(AttrCodeLine, int64(fs[0].Line))
	}
	fs = so.sym.Native(pid, s.native, fs)
	var b strings.Builder
	// Innermost first: the native frames down to the launch call, then
	// the Python frames that led to them.
	for _, f := range fs[len(s.python):] {
		b.WriteString(f.String())
		b.WriteByte('\n')
	}
	for _, f := range fs[:len(s.python)] {
		b.WriteString(f.String())
		b.WriteByte('\n')
	}
	if s.flags&record.StackPythonUnknown != 0 {
		b.WriteString("  (Python frames left out: interpreter layout unknown)\n")
	}
	a.PutStr(AttrStacktrace, b.String())
}

// stackSym is the symboliser spans use (zero value ready).
type stackSym = stacksym.Resolver
