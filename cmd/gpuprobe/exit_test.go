package main

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"
)

// TestExitCodes: every command exits 0 after -h and --help (printing its
// usage) and 2 on an unknown flag; the program exits 2 without a command.
func TestExitCodes(t *testing.T) {
	names := commands.Names()
	if len(names) < 8 {
		t.Fatalf("only %d commands registered: %v", len(names), names)
	}
	type tc struct {
		args []string
		code int
		out  string // in stdout or stderr
	}
	cases := []tc{{nil, 2, "usage: gpuprobe"}, {[]string{"-h"}, 0, "usage: gpuprobe"}, {[]string{"--help"}, 0, "usage: gpuprobe"},
		{[]string{"frobnicate"}, 2, "unknown command"}}
	for _, n := range names {
		cases = append(cases, tc{[]string{n, "-h"}, 0, "usage: gpuprobe " + n},
			tc{[]string{n, "--help"}, 0, "usage: gpuprobe " + n},
			tc{[]string{n, "--no-such-flag"}, 2, "flag provided but not defined"})
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(c.args, &stdout, &stderr)
			if code != c.code || !strings.Contains(stdout.String()+stderr.String(), c.out) {
				t.Errorf("exit %d, output %q; want %d and %q", code, stdout.String()+stderr.String(), c.code, c.out)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"version"}, &stdout, &stderr); code != 0 || !strings.HasPrefix(stdout.String(), "gpuprobe ") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	if code := run([]string{"version", "extra"}, &stdout, &stderr); code != 2 {
		t.Errorf("version extra: exit %d, want 2", code)
	}
	info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "2be016a"}, {Key: "vcs.modified", Value: "true"}}}
	for _, c := range []struct {
		info *debug.BuildInfo
		want string
	}{
		{info, "gpuprobe v0.1.0 (rev 2be016a, modified) go1.26.8"},
		{&debug.BuildInfo{GoVersion: "go1.26.8"}, "gpuprobe (devel) go1.26.8"},
	} {
		if got := versionLine(c.info); got != c.want {
			t.Errorf("versionLine = %q, want %q", got, c.want)
		}
	}
}
