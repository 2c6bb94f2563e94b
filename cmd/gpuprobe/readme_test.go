package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"
)

// TestREADMEShowsRunSynopsis: README.md's synopsis of `gpuprobe run` is the
// one the command prints, and README.md mentions each of its flags.
func TestREADMEShowsRunSynopsis(t *testing.T) {
	var usage bytes.Buffer
	if _, err := parseRun([]string{"-h"}, &usage); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parseRun(-h) = %v, want flag.ErrHelp", err)
	}
	line, _, _ := strings.Cut(usage.String(), "\n")
	synopsis, ok := strings.CutPrefix(line, "usage: ")
	if !ok {
		t.Fatalf("usage text starts %q, want \"usage: \"", line)
	}
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "`"+synopsis+"`") {
		t.Errorf("README.md does not show the synopsis `%s`", synopsis)
	}
	for _, f := range strings.Fields(synopsis) {
		if name, ok := strings.CutPrefix(strings.Trim(f, "[]"), "--"); ok && name != "" && !strings.Contains(string(b), "`--"+name) {
			t.Errorf("README.md does not explain --%s", name)
		}
	}
}
