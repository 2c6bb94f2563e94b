package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
)

// TestInspectBombs: gpuprobe inspect on a fatbin of 8 bomb entries (the
// reported 788 KB file ran it out of memory) reports each entry's limit
// and exits 1, allocating little.
func TestInspectBombs(t *testing.T) {
	zs := fatbintest.ZstdBomb(t, 16<<20)
	lz := fatbintest.LZ4Bomb(16 << 20)
	var entries []fatbintest.BombEntry
	for i := 0; i < 4; i++ {
		entries = append(entries,
			fatbintest.BombEntry{Flags: fatbintest.FlagsZstd, Arch: 80, Payload: zs, Claim: 1 << 30},
			fatbintest.BombEntry{Flags: fatbintest.FlagsLZ4, Arch: 80, Payload: lz, Claim: 16 << 20})
	}
	file := filepath.Join(t.TempDir(), "bombs.fatbin")
	if err := os.WriteFile(file, fatbintest.Container(entries...), 0o644); err != nil {
		t.Fatal(err)
	}
	var rc int
	var out, errOut string
	n := fatbintest.Allocated(func() { rc, out, errOut = runCompileCmd("inspect", file) })
	if rc != 1 || strings.Count(out, "Limits.MaxEntry") != 4 || strings.Count(out, "Limits.MaxRatio") != 4 {
		t.Errorf("exit %d, output %q %q; want exit 1 and each entry's limit", rc, out, errOut)
	}
	if n > 16<<20 {
		t.Errorf("allocated %d bytes, want at most 16 MiB", n)
	}
}
