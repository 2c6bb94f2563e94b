package config

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestEnsureSocketDir: a missing directory is created 0755 (whatever the
// umask) and owned by the collector; an existing one that others could
// write into, or that another uid owns, is refused naming agent::socket.
func TestEnsureSocketDir(t *testing.T) {
	base := t.TempDir()
	mkdir := func(name string, mode os.FileMode) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	type tc struct{ name, dir, want string }
	tests := []tc{
		{"missing: created", filepath.Join(base, "created"), ""},
		{"existing private", mkdir("private", 0o750), ""},
		{"existing 0755", mkdir("open-read", 0o755), ""},
		{"parent missing", filepath.Join(base, "missing", "sub"), "agent::socket: creating directory " + filepath.Join(base, "missing", "sub")},
		{"not a directory", file, "agent::socket: " + file + " is not a directory"},
		{"group-writable", mkdir("group", 0o770), "agent::socket: directory " + filepath.Join(base, "group") + " is group- or world-writable (mode 0770)"},
		{"world-writable", mkdir("world", 0o777), "is group- or world-writable (mode 0777) without the sticky bit"},
	}
	if os.Geteuid() == 0 {
		// Root owns the directory, so sticky + world-writable is /tmp's shape.
		tests = append(tests, tc{"sticky, root-owned", mkdir("sticky", 0o777|os.ModeSticky), ""})
		other := mkdir("other", 0o755)
		if err := os.Chown(other, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		tests = append(tests, tc{"another uid's", other, "agent::socket: directory " + other + " is owned by uid 4242, want root or the collector's uid 0"})
	}
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := EnsureSocketDir(filepath.Join(tt.dir, "agent.sock"))
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("EnsureSocketDir = %v, want an error containing %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("EnsureSocketDir = %v, want nil", err)
			}
			fi, err := os.Stat(tt.dir)
			if err != nil {
				t.Fatal(err)
			}
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != uint32(os.Geteuid()) && st.Uid != 0 {
				t.Errorf("owner uid %d", st.Uid)
			}
			if tt.name == "missing: created" && fi.Mode().Perm() != 0o755 {
				t.Errorf("created with mode %04o, want 0755", fi.Mode().Perm())
			}
		})
	}
}
