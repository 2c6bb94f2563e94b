// Command gpuprobe is the user tool of gpuprobe: it launches applications
// with the shim (run), lists and patches the kernels of CUDA binaries
// (inspect, patch), compiles eBPF objects to PTX (compile), and runs the
// bpf_conformance suite in the interpreter or on the GPU.
//
//	gpuprobe <command> [flags] [args]
//
// Exit status, for every command: 0 on success and after -h or --help, 1
// when the work failed (a file that cannot be read, a result that is not
// there), 2 on a usage error (a flag, a flag value, the operands). run
// exits with the application's status, 127 and 126 when it cannot be
// found or started.
//
// Commands register themselves from init functions with Register. The test
// harness commands (agent-dump, tracecheck, loadgen) are in
// cmd/gpuprobe-harness.
package main

import (
	"errors"
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

// parseArgs parses a command's flags and checks its operands: exactly one
// when many is false, at least one when it is true. When the command should
// stop it returns false and the exit status: 0 after -h, 2 after the flag
// package's message or the usage text.
func parseArgs(fs *flag.FlagSet, args []string, many bool) (int, bool) {
	if err := fs.Parse(args); err != nil {
		return usageStatus(err), false
	}
	if n := fs.NArg(); n == 0 || (!many && n != 1) {
		fs.Usage()
		return 2, false
	}
	return 0, true
}

// usageStatus is the exit status after fs.Parse failed with err: 0 when
// help was asked for, 2 for a usage error.
func usageStatus(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
