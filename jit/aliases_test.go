package jit_test

import (
	"path/filepath"
	"testing"

	"github.com/gpuprobe/gpuprobe/jit"
)

// compatObject compiles testdata/bpf/compat/<name>.c into a temporary
// object and returns its path.
func compatObject(t testing.TB, name string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), name+".o")
	if err := compileBPF(filepath.Join(bpfDir, "compat", name+".c"), dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestAliasedMapTypes: bpftime's 1504, 1512 and 1513 load as the type the
// loader lays them out as, keep the declared number, and follow its
// placement: a kernel-shared array that a host program uses is a kernel
// map; with no host program, a GPU array that may live in device memory;
// the host-memory arrays never do.
func TestAliasedMapTypes(t *testing.T) {
	tests := []struct {
		path     string
		mapName  string
		typ      jit.MapType
		declared jit.MapType
		mmapable bool
		device   bool
	}{
		{bpfObject(t, "kernelshared"), "ks_count", jit.MapTypeArray, jit.MapTypeKernelSharedArray, true, false},
		{compatObject(t, "kshared"), "ks_calls", jit.MapTypeGPUArray, jit.MapTypeKernelSharedArray, false, true},
		{compatObject(t, "hostmaps"), "hm_thread", jit.MapTypePerThreadArray, jit.MapTypePerThreadHostArray, false, false},
		{compatObject(t, "hostmaps"), "hm_start", jit.MapTypePerThreadArray, jit.MapTypePerThreadHostArray, false, false},
		{compatObject(t, "hostmaps"), "hm_shared", jit.MapTypeGPUArray, jit.MapTypeGPUHostArray, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.mapName, func(t *testing.T) {
			progs, err := jit.LoadELF(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			var m *jit.Map
			for _, p := range progs {
				for _, pm := range p.Maps {
					if pm.Name == tt.mapName {
						if m != nil && m != pm {
							t.Fatalf("programs see two definitions of %s", tt.mapName)
						}
						m = pm
					}
				}
			}
			if m == nil {
				t.Fatalf("no program uses %s", tt.mapName)
			}
			if m.Type != tt.typ || m.Declared != tt.declared {
				t.Errorf("type %d declared %d, want %d declared %d", m.Type, m.Declared, tt.typ, tt.declared)
			}
			if m.Mmapable() != tt.mmapable {
				t.Errorf("Mmapable() = %v, want %v", m.Mmapable(), tt.mmapable)
			}
			if m.DeviceResident() != tt.device {
				t.Errorf("DeviceResident() = %v, want %v", m.DeviceResident(), tt.device)
			}
			if m.HostMemory() != (tt.declared != jit.MapTypeKernelSharedArray) {
				t.Errorf("HostMemory() = %v for declared type %d", m.HostMemory(), tt.declared)
			}
		})
	}
}
