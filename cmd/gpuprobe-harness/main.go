// Command gpuprobe-harness is gpuprobe's test bench, kept apart from the
// user CLI (cmd/gpuprobe): agent-dump stands in for the collector's agent
// server and checks what the shim and the patched kernels record,
// tracecheck checks the collector's file-exporter output, and loadgen is a
// synthetic shim that writes launch records. The GPU checks (scripts/) and
// the e2e tests run it as bin/gpuprobe-harness.
//
//	gpuprobe-harness <command> [flags] [args]
package main

import (
	"flag"
	"io"
	"os"

	"github.com/gpuprobe/gpuprobe/internal/cli"
)

// Command is one subcommand of gpuprobe-harness.
type Command = cli.Command

var commands = cli.Set{Prog: "gpuprobe-harness"}

// Register adds a command; registering a name twice is a programming error
// reported at startup.
func Register(c *Command) { commands.Register(c) }

// newFlags returns a FlagSet for a command that reports errors instead of
// exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet { return commands.Flags(name, stderr) }

// newUsageFlags is newFlags with a usage text: the line, then the flags.
func newUsageFlags(name, line string, stderr io.Writer) *flag.FlagSet {
	return commands.UsageFlags(name, line, stderr)
}

func run(args []string, stdout, stderr io.Writer) int { return commands.Run(args, stdout, stderr) }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
