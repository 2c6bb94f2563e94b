// Package cli is the subcommand frame shared by gpuprobe's commands: the
// user CLI (cmd/gpuprobe) and the test harness (cmd/gpuprobe-harness).
package cli

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// Command is one subcommand.
type Command struct {
	Name    string // as typed on the command line
	Summary string // one line for the usage text
	// Run executes the command with the arguments after its name and
	// returns the process exit status.
	Run func(args []string, stdout, stderr io.Writer) int
}

// Set is a program's commands.
type Set struct {
	Prog     string // the program name, e.g. "gpuprobe"
	commands map[string]*Command
}

// Register adds a command; registering a name twice is a programming error
// reported at startup.
func (s *Set) Register(c *Command) {
	if _, dup := s.commands[c.Name]; dup {
		fmt.Fprintf(os.Stderr, "%s: command %q registered twice\n", s.Prog, c.Name)
		os.Exit(2)
	}
	if s.commands == nil {
		s.commands = map[string]*Command{}
	}
	s.commands[c.Name] = c
}

// Names returns the registered command names, sorted.
func (s *Set) Names() []string {
	names := make([]string, 0, len(s.commands))
	for n := range s.commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Usage writes the command list.
func (s *Set) Usage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s <command> [flags] [args]\n", s.Prog)
	fmt.Fprintln(w, "\ncommands:")
	for _, n := range s.Names() {
		fmt.Fprintf(w, "  %-12s %s\n", n, s.commands[n].Summary)
	}
	fmt.Fprintf(w, "\nRun `%s <command> -h` for a command's flags.\n", s.Prog)
}

// Run dispatches args (without the program name) to a command and returns
// the exit status.
func (s *Set) Run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		s.Usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := s.commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q\n", s.Prog, args[0])
		s.Usage(stderr)
		return 2
	}
	return c.Run(args[1:], stdout, stderr)
}

// Flags returns a FlagSet for command name that reports errors instead of
// exiting.
func (s *Set) Flags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(s.Prog+" "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// UsageFlags is Flags with a usage text: the line, then the flags.
func (s *Set) UsageFlags(name, line string, stderr io.Writer) *flag.FlagSet {
	fs := s.Flags(name, stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, line)
		fs.PrintDefaults()
	}
	return fs
}

// ParseArgs parses a command's flags and checks its operands: exactly one
// when many is false, at least one when it is true. It returns false, after
// the flag package's message or the usage text, when the command should
// exit with status 2.
func ParseArgs(fs *flag.FlagSet, args []string, many bool) bool {
	if err := fs.Parse(args); err != nil {
		return false
	}
	if n := fs.NArg(); n == 0 || (!many && n != 1) {
		fs.Usage()
		return false
	}
	return true
}

// SplitList splits a comma-separated flag value, dropping empty items.
func SplitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}
