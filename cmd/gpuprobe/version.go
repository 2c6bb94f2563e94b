package main

import (
	"fmt"
	"io"
	"runtime/debug"
)

func init() {
	Register(&Command{
		Name:    "version",
		Summary: "print gpuprobe's module version, source revision and Go version",
		Run:     runVersion,
	})
}

// runVersion prints one line: the module version the binary was built
// from ("(devel)" for a build in a checkout), the VCS revision and whether
// the tree had changes, and the Go version.
func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := newUsageFlags("version", "usage: gpuprobe version", stderr)
	if err := fs.Parse(args); err != nil {
		return usageStatus(err)
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return 2
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintln(stderr, "gpuprobe version: the binary carries no build information")
		return 1
	}
	fmt.Fprintln(stdout, versionLine(info))
	return 0
}

// versionLine formats info as "gpuprobe VERSION (rev REV[, modified])
// GOVERSION"; the revision part is left out when the build recorded none.
func versionLine(info *debug.BuildInfo) string {
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	line := "gpuprobe " + v
	if rev != "" {
		line += " (rev " + rev + modified + ")"
	}
	return line + " " + info.GoVersion
}
