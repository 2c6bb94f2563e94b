package main

import (
	"fmt"
	"io"

	"github.com/gpuprobe/gpuprobe/jit/conformance"
)

func init() {
	Register(&Command{
		Name:    "conformance",
		Summary: "run bpf_conformance .data files (files or directories) through the verifier and the interpreter or the GPU",
		Run:     runConformance,
	})
}

func runConformance(args []string, stdout, stderr io.Writer) int {
	fs := newUsageFlags("conformance", "usage: gpuprobe conformance [-gpu] [-negative] [-v] PATH...", stderr)
	gpu := fs.Bool("gpu", false, "run the programs as PTX on the GPU instead of the interpreter")
	negative := fs.Bool("negative", false, "expect every file to be rejected (by the assembler, the verifier, a run-time fault or a wrong result)")
	verbose := fs.Bool("v", false, "print a line for every file, with the rejection reason under -negative")
	if code, ok := parseArgs(fs, args, true); !ok {
		return code
	}
	files, err := conformance.Files(fs.Args())
	if err != nil {
		fmt.Fprintf(stderr, "gpuprobe conformance: %v\n", err)
		return 1
	}
	var r conformance.Runner = conformance.Interp{}
	if *gpu {
		if r, err = conformance.GPURunner(); err != nil {
			fmt.Fprintf(stderr, "gpuprobe conformance: -gpu: %v\n", err)
			return 1
		}
	}
	_, failed := conformance.Report(stdout, files, r, conformance.Verify, *negative, *verbose)
	if failed > 0 {
		return 1
	}
	return 0
}
