package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin"
	"github.com/gpuprobe/gpuprobe/gpuprobe/ptxmod"
)

func init() {
	Register(&Command{
		Name:    "inspect",
		Summary: "list the fatbin entries of a CUDA binary, fatbin, cubin or PTX file, and which kernels can be patched",
		Run:     runInspect,
	})
}

// runInspect lists a file's GPU code like cuobjdump --list-elf
// --list-ptx (same names, same order, one line per entry, with the
// architecture, compression and sizes added), then for each PTX entry its
// kernels and whether each can be patched. Exit status: 0 when the file
// was read (a file without PTX included), 1 when it cannot be read or an
// entry could not be decompressed or parsed, 2 on a usage error.
func runInspect(args []string, stdout, stderr io.Writer) int {
	fs := newUsageFlags("inspect", "usage: gpuprobe inspect [-all] [-sass] FILE", stderr)
	all := fs.Bool("all", false, "also list relocatable fatbins (__nv_relfatbin) of files that have linked ones, like cuobjdump -all")
	sass := fs.Bool("sass", false, "list the kernels of each ELF (SASS) entry too")
	if code, ok := parseArgs(fs, args, false); !ok {
		return code
	}
	file := fs.Arg(0)
	f, err := fatbin.Open(file)
	if err != nil {
		fmt.Fprintf(stderr, "gpuprobe inspect: %v\n", err)
		return 1
	}
	failed, err := inspect(stdout, file, f, *all, *sass)
	if err != nil {
		fmt.Fprintf(stderr, "gpuprobe inspect: %v\n", err)
		return 1
	}
	if failed > 0 {
		return 1
	}
	return 0
}

// shownEntries returns the entries cuobjdump would list: those of the
// linked fatbin (.nv_fatbin) of a host ELF file, or of the relocatable
// one when there is no linked one or all is set.
func shownEntries(f *fatbin.File, all bool) []*fatbin.Entry {
	linked := false
	for _, s := range f.Section {
		linked = linked || s == fatbin.SectionFatbin
	}
	var out []*fatbin.Entry
	for i, c := range f.Containers {
		if all || !linked || f.Kind != fatbin.ImageHostELF || f.Section[i] == fatbin.SectionFatbin {
			out = append(out, c.Entries...)
		}
	}
	return append(out, f.Loose...)
}

// inspect writes the listing and returns how many entries failed.
func inspect(w io.Writer, file string, f *fatbin.File, all, sass bool) (int, error) {
	base := filepath.Base(file)
	if i := strings.LastIndexByte(base, '.'); i > 0 {
		base = base[:i]
	}
	entries := shownEntries(f, all)
	fmt.Fprintf(w, "%s: %s, %d fatbin containers, %d wrappers, %d entries\n", file, f.Kind, len(f.Containers), len(f.Wrappers), len(entries))
	count := map[fatbin.Kind]int{}
	failed, ptxEntries := 0, 0
	inflater := fatbin.NewInflater(fatbin.DefaultLimits) // bounds the whole file's inflated bytes
	for _, e := range entries {
		count[e.Kind]++
		name := e.FileName(base, count[e.Kind])
		if f.Kind == fatbin.ImageCubin {
			name = base + "." + e.ArchName() + ".cubin"
		}
		if f.Kind == fatbin.ImagePTX {
			name = filepath.Base(file)
		}
		fmt.Fprintf(w, "%s file %4d: %s  [%s]\n", e.Kind, count[e.Kind], name, details(e))
		data, err := inflater.Data(e)
		if err != nil {
			failed++
			fmt.Fprintf(w, "    error: %v\n", err)
			continue
		}
		switch e.Kind {
		case fatbin.KindPTX:
			ptxEntries++
			if err := listPTX(w, data); err != nil {
				failed++
				fmt.Fprintf(w, "    error: %v\n", err)
			}
		case fatbin.KindELF:
			if sass {
				listSASS(w, data)
			}
		}
	}
	switch {
	case len(entries) == 0:
		fmt.Fprintf(w, "%s: no CUDA kernels found (no fatbin, cubin or PTX in it)\n", file)
	case ptxEntries == 0:
		fmt.Fprintf(w, "%s: no PTX: its kernels are SASS only, so PTX injection cannot reach them (launch telemetry still covers them)\n", file)
	}
	return failed, nil
}

// details describes an entry's architecture, format and sizes.
func details(e *fatbin.Entry) string {
	var parts []string
	if e.Arch != 0 {
		parts = append(parts, e.ArchName())
	}
	if e.Kind == fatbin.KindPTX && e.Major != 0 {
		parts = append(parts, fmt.Sprintf("PTX ISA %d.%d", e.Major, e.Minor))
	}
	switch c := e.Compression(); c {
	case fatbin.CompressionNone:
		parts = append(parts, fmt.Sprintf("%d bytes", e.Size()))
	default:
		parts = append(parts, fmt.Sprintf("%s %d -> %d bytes", c, e.CompressedSize, e.UncompressedSize))
	}
	if e.Flags&fatbin.FlagDebug != 0 {
		parts = append(parts, "debug")
	}
	if e.Name != "" {
		parts = append(parts, "name "+e.Name)
	}
	if e.Options != "" {
		parts = append(parts, "options "+strings.TrimSpace(e.Options))
	}
	return strings.Join(parts, ", ")
}

// maxParseCost bounds what parsing one PTX entry may allocate
// (ptxmod.Cost): a file can hold text that would cost tens of GB.
const maxParseCost = 4 << 30

// listPTX parses PTX text and lists its kernels and their patchability.
func listPTX(w io.Writer, text []byte) error {
	cost, err := ptxmod.Cost(text, ptxmod.DefaultLimits)
	if err == nil && cost > maxParseCost {
		err = fmt.Errorf("parsing %d bytes of PTX would take %d bytes of memory, over the %d-byte limit of gpuprobe inspect", len(text), cost, maxParseCost)
	}
	if err != nil {
		return fmt.Errorf("PTX not patchable: %w", err)
	}
	m, err := ptxmod.Parse(text)
	if err != nil {
		return fmt.Errorf("PTX not patchable: %w", err)
	}
	fmt.Fprintf(w, "    .version %d.%d .target %s\n", m.Major, m.Minor, strings.Join(m.Target, ", "))
	for _, k := range m.Kernels() {
		verdict := "patchable"
		if why := unpatchable(m, k); why != "" {
			verdict = "not patchable: " + why
		}
		fmt.Fprintf(w, "    kernel %s: %s (%d params, %d exits, %d global ld/st, %d generic ld/st)\n",
			k.Name, verdict, len(k.Params), len(k.Exits), len(k.GlobalAccesses(false)), len(k.GlobalAccesses(true))-len(k.GlobalAccesses(false)))
	}
	if len(m.Kernels()) == 0 {
		fmt.Fprintln(w, "    no kernels (device functions only)")
	}
	return nil
}

// unpatchable says why the injector cannot rewrite a kernel, or "".
func unpatchable(m *ptxmod.Module, k *ptxmod.Func) string {
	switch {
	case m.AddressSize == 32:
		return "32-bit addresses"
	case len(m.Target) == 0:
		return "no .target"
	case k.Top == nil:
		return "empty body"
	}
	return ""
}

// listSASS lists the kernels of a cubin (SASS only: not patchable).
func listSASS(w io.Writer, data []byte) {
	names, err := fatbin.CubinKernels(data)
	if err != nil {
		fmt.Fprintf(w, "    cubin: %v\n", err)
		return
	}
	for _, n := range names {
		fmt.Fprintf(w, "    kernel %s: SASS only, not patchable\n", n)
	}
	if len(names) == 0 {
		fmt.Fprintln(w, "    no kernels")
	}
}
