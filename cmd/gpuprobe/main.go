// Command gpuprobe is the developer tool of gpuprobe: it compiles eBPF
// objects to PTX, and runs the bpf_conformance suite in the interpreter or
// on the GPU.
//
//	gpuprobe <command> [flags] [args]
//
// Commands register themselves from init functions with Register.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
)

// Command is one subcommand of gpuprobe.
type Command struct {
	Name    string // as typed on the command line
	Summary string // one line for the usage text
	// Run executes the command with the arguments after its name and
	// returns the process exit status.
	Run func(args []string, stdout, stderr io.Writer) int
}

var commands = map[string]*Command{}

// Register adds a command; registering a name twice is a programming error
// reported at startup.
func Register(c *Command) {
	if _, dup := commands[c.Name]; dup {
		fmt.Fprintf(os.Stderr, "gpuprobe: command %q registered twice\n", c.Name)
		os.Exit(2)
	}
	commands[c.Name] = c
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: gpuprobe <command> [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, commands[n].Summary)
	}
	fmt.Fprintln(w, "\nRun `gpuprobe <command> -h` for a command's flags.")
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "gpuprobe: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	return c.Run(args[1:], stdout, stderr)
}

// newFlags returns a FlagSet for a command that reports errors instead of
// exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("gpuprobe "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// newUsageFlags is newFlags with a usage text: the line, then the flags.
func newUsageFlags(name, line string, stderr io.Writer) *flag.FlagSet {
	fs := newFlags(name, stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, line)
		fs.PrintDefaults()
	}
	return fs
}

// parseArgs parses a command's flags and checks its operands: exactly one
// when many is false, at least one when it is true. It returns false, after
// the flag package's message or the usage text, when the command should
// exit with status 2.
func parseArgs(fs *flag.FlagSet, args []string, many bool) bool {
	if err := fs.Parse(args); err != nil {
		return false
	}
	if n := fs.NArg(); n == 0 || (!many && n != 1) {
		fs.Usage()
		return false
	}
	return true
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
