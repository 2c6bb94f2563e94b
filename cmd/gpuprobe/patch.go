package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin"
	"github.com/gpuprobe/gpuprobe/gpuprobe/inject"
	"github.com/gpuprobe/gpuprobe/gpuprobe/probes"
	"github.com/gpuprobe/gpuprobe/internal/cli"
	"github.com/gpuprobe/gpuprobe/jit"
)

func init() {
	Register(&Command{
		Name:    "patch",
		Summary: "print the PTX that a probe set would produce for the kernels of a PTX file, fatbin or CUDA binary",
		Run:     runPatch,
	})
}

// runPatch injects the selected probe programs into every PTX module of a
// file (a PTX file, a fatbin, or a host binary whose fatbins carry PTX) and
// prints each patched module, preceded by a comment that says what was
// done: patched kernels, probe sites, the hidden launch-id parameter, and
// the globals the loader sets. Exit status: 0 when at least one module was
// patched, 1 when none was (no PTX, or no kernel targeted) or the file
// cannot be read or patched, 2 on a usage error (a flag value, a -probe or
// -prog that names no loadable program).
func runPatch(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("patch", stderr)
	arch := fs.String("arch", "", "the GPU (sm_90): with -raise, the .target given to modules that target an older architecture than the probes need")
	raise := fs.Bool("raise", false, "raise a module's .target to -arch when it is older than sm_70")
	probe := fs.String("probe", "", "built-in probe sets (comma-separated): "+strings.Join(probes.Names(), ", "))
	progFiles := fs.String("prog", "", "eBPF objects (clang -target bpf; comma-separated) whose GPU programs to inject")
	kernels := fs.String("kernel", "", "patch only these kernels (comma-separated names, base names or patterns)")
	generic := fs.Bool("generic", false, "memcapture programs also follow generic loads and stores that reach global memory")
	noInline := fs.Bool("noinline", false, "call entry and exit programs as .func calls instead of splicing their bodies into the kernel")
	launch := fs.String("launch-id", "param", "how probes get the launch id: param (hidden kernel parameter) or global")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gpuprobe patch [-probe kernel_phases] [-prog a.o,b.o] [-kernel K] [-arch sm_90 -raise] [-generic] [-noinline] [-launch-id param|global] FILE")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return usageStatus(err)
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	file := fs.Arg(0)
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "gpuprobe patch: "+format+"\n", a...)
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "gpuprobe patch: "+format+"\n", a...)
		return 1
	}
	if *probe == "" && *progFiles == "" {
		*probe = probes.KernelPhases
	}
	opts := inject.Options{Arch: *arch, RaiseTarget: *raise, Generic: *generic, NoInline: *noInline, Kernels: cli.SplitList(*kernels)}
	switch *launch {
	case "param":
		opts.LaunchID = inject.LaunchIDParam
	case "global":
		opts.LaunchID = inject.LaunchIDGlobal
	default:
		return usage("-launch-id %q: want param or global", *launch)
	}
	progs, err := patchPrograms(cli.SplitList(*probe), cli.SplitList(*progFiles))
	if err != nil {
		return usage("%v", err)
	}
	f, err := fatbin.Open(file)
	if err != nil {
		return fail("%v", err)
	}
	entries, err := f.PTX()
	if errors.Is(err, fatbin.ErrNoPTX) {
		fmt.Fprintf(stderr, "gpuprobe patch: %s: no PTX (SASS only): PTX injection cannot reach its kernels\n", file)
		return 1
	}
	if err != nil {
		return fail("%s: %v", file, err)
	}
	patched := 0
	for i, e := range entries {
		src, err := e.PTX()
		if err != nil {
			return fail("%s: PTX entry %d: %v", file, i, err)
		}
		out, rep, err := inject.Inject(src, progs, opts)
		var nk *inject.NoKernelError
		if errors.As(err, &nk) {
			fmt.Fprintf(stdout, "// gpuprobe patch %s: PTX entry %d (%s): not patched: %v\n", file, i, entryArch(e), err)
			continue
		}
		if err != nil {
			return fail("%s: PTX entry %d (%s): %v", file, i, entryArch(e), err)
		}
		patched++
		writeReport(stdout, file, i, entryArch(e), rep)
		stdout.Write(out)
	}
	if patched == 0 {
		fmt.Fprintf(stderr, "gpuprobe patch: %s: no module has a kernel the programs target\n", file)
		return 1
	}
	return 0
}

// patchPrograms loads the built-in probe sets and the GPU programs of the
// objects.
func patchPrograms(sets, files []string) ([]*jit.Program, error) {
	var progs []*jit.Program
	for _, s := range sets {
		ps, err := probes.Load(s)
		if err != nil {
			return nil, fmt.Errorf("-probe: %w", err)
		}
		progs = append(progs, ps...)
	}
	for _, file := range files {
		ps, err := jit.LoadELF(file)
		if err != nil {
			return nil, fmt.Errorf("-prog: %w", err)
		}
		n := 0
		for _, p := range ps {
			if p.IsGPU() {
				progs = append(progs, p)
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("-prog: %s has no GPU programs (kprobe/, kretprobe/, kprobe/__memcapture sections)", file)
		}
	}
	return progs, nil
}

// writeReport writes what Inject did as PTX comments.
func writeReport(w io.Writer, file string, i int, arch string, rep *inject.Report) {
	fmt.Fprintf(w, "// gpuprobe patch %s: PTX entry %d (%s): .version %s, .target %s", file, i, arch, rep.Version, rep.Target)
	if rep.TargetRaised {
		fmt.Fprint(w, " (raised)")
	}
	fmt.Fprintln(w)
	for _, k := range rep.Kernels {
		fmt.Fprintf(w, "//   kernel %s: entry [%s] exit [%s] (%d sites) memcapture [%s] (%d sites)", k.Name,
			strings.Join(k.Entry, " "), strings.Join(k.Exit, " "), k.ExitSites, strings.Join(k.MemCapture, " "), k.MemSites)
		if k.Launch != nil {
			fmt.Fprintf(w, "; launch id: parameter %d at offset %d", k.Launch.Index, k.Launch.Offset)
		}
		fmt.Fprintln(w)
	}
	for _, p := range rep.Programs {
		how := "called"
		if p.Inlined {
			how = "inlined"
		}
		fmt.Fprintf(w, "//   program %s (%v, .func %s): %s\n", p.Name, p.Kind, p.Func, how)
	}
	for _, g := range rep.Globals {
		fmt.Fprintf(w, "//   global %s (%s%s) of %s\n", g.Name, g.Kind, mapSuffix(g.Map), g.Program)
	}
	if len(rep.Unmatched) > 0 {
		fmt.Fprintf(w, "//   programs with no kernel here: %s\n", strings.Join(rep.Unmatched, ", "))
	}
}

// entryArch names a PTX entry's architecture ("PTX" for a loose PTX file).
func entryArch(e *fatbin.Entry) string {
	if e.Arch == 0 {
		return "PTX"
	}
	return e.ArchName()
}
