// Command gpuprobe is the user tool of gpuprobe: it launches applications
// with the shim (run), lists and patches the kernels of CUDA binaries
// (inspect, patch), compiles eBPF objects to PTX (compile), and runs the
// bpf_conformance suite in the interpreter or on the GPU.
//
//	gpuprobe <command> [flags] [args]
//
// Commands register themselves from init functions with Register. The test
// harness commands (agent-dump, tracecheck, loadgen) are in
// cmd/gpuprobe-harness.
package main

import (
	"flag"
	"io"
	"os"

	"github.com/gpuprobe/gpuprobe/internal/cli"
)

// Command is one subcommand of gpuprobe.
type Command = cli.Command

var commands = cli.Set{Prog: "gpuprobe"}

// Register adds a command; registering a name twice is a programming error
// reported at startup.
func Register(c *Command) { commands.Register(c) }

func run(args []string, stdout, stderr io.Writer) int { return commands.Run(args, stdout, stderr) }

// newFlags returns a FlagSet for a command that reports errors instead of
// exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet { return commands.Flags(name, stderr) }

// newUsageFlags is newFlags with a usage text: the line, then the flags.
func newUsageFlags(name, line string, stderr io.Writer) *flag.FlagSet {
	return commands.UsageFlags(name, line, stderr)
}

// parseArgs is cli.ParseArgs.
func parseArgs(fs *flag.FlagSet, args []string, many bool) bool { return cli.ParseArgs(fs, args, many) }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
