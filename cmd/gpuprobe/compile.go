package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/ptx"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
)

func init() {
	Register(&Command{
		Name:    "compile",
		Summary: "verify the GPU programs of an eBPF object (clang -target bpf) and print their PTX",
		Run:     runCompile,
	})
}

// runCompile prints, for each program of one ELF object, the verifier's
// verdict (as PTX comments) and the PTX of the accepted GPU programs, so
// that stdout is one module ptxas can assemble. Host programs are listed.
// Exit status: 0 when every selected GPU program was accepted and compiled,
// 1 when one was not or the object cannot be loaded, 2 on a usage error.
func runCompile(args []string, stdout, stderr io.Writer) int {
	fs := newUsageFlags("compile", "usage: gpuprobe compile [-arch sm_90] [-prog a,b] [-comments] [-entry] FILE.o", stderr)
	arch := fs.String("arch", ptx.DefaultArch, "PTX .target (sm_70 or newer)")
	only := fs.String("prog", "", "compile only these programs (comma-separated names)")
	comments := fs.Bool("comments", false, "annotate the PTX with each eBPF instruction and its source line")
	entry := fs.Bool("entry", false, "add a standalone test .entry per program (ptx.TestKernel), so the module can be launched")
	if code, ok := parseArgs(fs, args, false); !ok {
		return code
	}
	file := fs.Arg(0)
	progs, err := jit.LoadELF(file)
	if err != nil {
		fmt.Fprintf(stderr, "gpuprobe compile: %v\n", err)
		return 1
	}
	progs, err = selectPrograms(progs, *only)
	if err != nil {
		fmt.Fprintf(stderr, "gpuprobe compile: %s: %v\n", file, err)
		return 2
	}

	// The GPU maps live in device memory, as the collector places them.
	opts := ptx.Options{Arch: *arch, Comments: *comments, DeviceMaps: jit.DeviceResidentMaps(progs)}
	fmt.Fprintf(stdout, "// gpuprobe compile %s\n", file)
	var (
		funcs  []*ptx.Func
		failed int
		body   strings.Builder
		shared = map[string]uint64{} // .shared variables declared in the module so far
	)
	for _, p := range progs {
		fmt.Fprintf(&body, "\n// program %s: section %q, %s\n", p.Name, p.Section, describe(p))
		if !p.IsGPU() {
			fmt.Fprintf(&body, "//   host program: loaded into Linux by the collector, not compiled to PTX\n")
			continue
		}
		res, err := verifier.Verify(p, verifier.Options{CtxSize: programCtxSize(p.Kind)})
		if err != nil {
			failed++
			fmt.Fprintf(&body, "//   verifier: REJECTED: %s\n", comment(err.Error()))
			fmt.Fprintf(stderr, "gpuprobe compile: %s: program %s rejected: %v\n", file, p.Name, err)
			continue
		}
		fmt.Fprintf(&body, "//   verifier: accepted (%s, %s, %s, call depth %d, stack %d bytes)\n",
			plural(len(p.Insns), "instruction"), plural(len(res.Funcs), "function"), plural(len(res.BackEdges), "loop"),
			res.MaxCallDepth, maxStack(res))
		po := opts
		po.Verified = res
		f, err := ptx.Compile(p, po)
		if err != nil {
			failed++
			fmt.Fprintf(&body, "//   compiler: FAILED: %s\n", comment(err.Error()))
			fmt.Fprintf(stderr, "gpuprobe compile: %s: program %s: %v\n", file, p.Name, err)
			continue
		}
		fmt.Fprintf(&body, "//   .func %s", f.Name)
		for _, g := range f.Globals {
			fmt.Fprintf(&body, "; global %s (%s%s)", g.Name, g.Kind, mapSuffix(g.Map))
		}
		body.WriteString("\n")
		if *entry {
			fmt.Fprintf(&body, "//   test entry %s\n", ptx.TestEntry(f))
		} else {
			sh, err := ptx.SharedDecls(shared, f)
			if err != nil {
				failed++
				fmt.Fprintf(&body, "//   FAILED: %s\n", comment(err.Error()))
				fmt.Fprintf(stderr, "gpuprobe compile: %s: program %s: %v\n", file, p.Name, err)
				continue
			}
			body.WriteString(sh + f.Decls + f.Body)
		}
		funcs = append(funcs, f)
	}

	switch {
	case *entry && len(funcs) > 0:
		// TestModule writes the header, every program and the entries.
		io.WriteString(stdout, body.String())
		io.WriteString(stdout, "\n"+ptx.TestModule(funcs...))
	default:
		if len(funcs) > 0 {
			io.WriteString(stdout, ptx.Header(funcs[0].Arch))
		}
		io.WriteString(stdout, body.String())
	}
	if failed > 0 {
		return 1
	}
	return 0
}

// selectPrograms keeps the programs named in the comma-separated list
// (all of them when it is empty); a name that matches nothing is an error.
func selectPrograms(progs []*jit.Program, list string) ([]*jit.Program, error) {
	if list == "" {
		return progs, nil
	}
	byName := make(map[string]*jit.Program, len(progs))
	for _, p := range progs {
		byName[p.Name] = p
	}
	var out []*jit.Program
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		p, ok := byName[n]
		if !ok {
			names := make([]string, 0, len(progs))
			for _, p := range progs {
				names = append(names, p.Name)
			}
			return nil, fmt.Errorf("-prog: no program %q (the object has %s)", n, strings.Join(names, ", "))
		}
		out = append(out, p)
	}
	return out, nil
}

// describe says where a program runs.
func describe(p *jit.Program) string {
	switch p.Kind {
	case jit.ProbeEntry:
		return "entry probe of kernel " + p.Target
	case jit.ProbeExit:
		return "exit probe of kernel " + p.Target
	case jit.ProbeMemCapture:
		if p.Target == "" {
			return "memory-access probe of every kernel"
		}
		return "memory-access probe of kernel " + p.Target
	case jit.ProbeUprobe, jit.ProbeUretprobe:
		return p.Kind.String() + " on " + p.Target
	}
	return p.Kind.String()
}

// programCtxSize is the context a GPU program of this kind gets in r1.
func programCtxSize(k jit.ProbeKind) int {
	if k == jit.ProbeMemCapture {
		return jit.MemCtxSize
	}
	return 0
}

// maxStack is the largest stack frame of the program's functions.
func maxStack(r *verifier.Result) int {
	m := 0
	for _, f := range r.Funcs {
		m = max(m, f.StackSize)
	}
	return m
}

func mapSuffix(name string) string {
	if name == "" {
		return ""
	}
	return " " + name
}

// plural writes n and the noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// comment keeps a message on one PTX comment line.
func comment(s string) string {
	return strings.ReplaceAll(s, "\n", " ")
}
