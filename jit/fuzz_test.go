package jit_test

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuprobe/gpuprobe/jit"
)

// FuzzLoadELF mutates the testdata objects: loading must never panic, and
// whatever loads must satisfy the invariants the verifier and the compiler
// rely on (calls and jumps land on instructions, map loads name a map of the
// program, the stream marshals). Regression inputs live in
// testdata/fuzz/FuzzLoadELF.
func FuzzLoadELF(f *testing.F) {
	boundMinimization(defaultMinimizeTime)
	bpfObject(f, "threadhist") // builds every object
	objs, err := filepath.Glob(filepath.Join(bpfDir, "*.o"))
	if err != nil || len(objs) == 0 {
		f.Fatalf("no seed objects in %s: %v", bpfDir, err)
	}
	for _, o := range objs {
		data, err := os.ReadFile(o)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(buildObject(2, 3)) // no BTF, no debug info: small, so mutations reach its headers
	f.Fuzz(func(t *testing.T, data []byte) {
		progs, err := jit.LoadELFBytes(data)
		if err != nil {
			return
		}
		for _, p := range progs {
			if _, _, err := jit.ParseSection(p.Section); err != nil {
				t.Fatalf("loaded a program with a bad section: %v", err)
			}
			checkLoaded(t, p)
		}
	})
}

// checkLoaded is checkInsns for the fuzzer: it reports with t.Fatalf.
func checkLoaded(t *testing.T, p *jit.Program) {
	starts := map[int64]bool{}
	var off int64
	for i := range p.Insns {
		starts[off] = true
		off += int64(p.Insns[i].Width())
	}
	maps := map[string]bool{}
	for _, m := range p.Maps {
		maps[m.Name] = true
	}
	off = 0
	for i := range p.Insns {
		ins := &p.Insns[i]
		if ins.IsFunctionCall() && !starts[off+1+ins.Constant] {
			t.Fatalf("%s insn %d: call lands at slot %d, not on an instruction", p.Name, i, off+1+ins.Constant)
		}
		if ins.IsLoadFromMap() && !maps[ins.Reference()] {
			t.Fatalf("%s insn %d: map %q not in Maps", p.Name, i, ins.Reference())
		}
		off += int64(ins.Width())
	}
	var buf bytes.Buffer
	if err := p.Insns.Marshal(&buf, binary.LittleEndian); err != nil {
		t.Fatalf("%s: marshal: %v", p.Name, err)
	}
}

// defaultMinimizeTime is how long the fuzzing engine may minimize each new
// input of FuzzLoadELF when -fuzzminimizetime is not given.
//
// Go's minimizer tries removing every byte and then every range of bytes of an
// input: a quadratic number of executions, which for a 7-14 KB object never
// ends within the default 60 s. The minimization runs on the worker, so with
// -parallel 1 every new input stopped fuzzing for a minute (a 10-minute run
// made 722 executions). Removing bytes from an ELF object shifts every offset
// after them, so minimization seldom keeps any of them anyway.
const defaultMinimizeTime = "1s"

// boundMinimization sets -test.fuzzminimizetime to d unless the command line
// gave it. testing reads the flag when f.Fuzz starts the fuzzing engine.
func boundMinimization(d string) {
	const name = "test.fuzzminimizetime"
	given := false
	flag.Visit(func(fl *flag.Flag) { given = given || fl.Name == name })
	if fl := flag.Lookup(name); fl != nil && !given {
		if err := fl.Value.Set(d); err != nil {
			panic(fmt.Sprintf("bad default %s %q: %v", name, d, err)) // a constant of this file
		}
	}
}
