//go:build cgo

package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
	"github.com/gpuprobe/gpuprobe/jit"
)

// modelHashKeys are the keys whose hash the layout test compares.
var modelHashKeys = []uint32{0, 1, 2, 255, 256, 682, 1023, 1024, 0xdeadbeef, 0xffffffff}

// modelLayoutMain prints gpuhash_model.cuh's constants and layout, one
// "name value" a line, then "hash KEY VALUE" for each key of
// modelHashKeys; it runs on the host, with no GPU.
func modelLayoutMain() string {
	var keys []string
	for _, k := range modelHashKeys {
		keys = append(keys, strconv.FormatUint(uint64(k), 10)+"u")
	}
	return `
#include <cstddef>
int main()
{
	printf("keys %u\nslots %u\nprobes %u\nspins %u\n", HASH_KEYS, HASH_SLOTS, HASH_PROBES, HASH_SPINS);
	printf("stride %zu\nkey_at %zu\nvalue_at %zu\n", sizeof(HashSlot), offsetof(HashSlot, key), offsetof(HashSlot, value));
	printf("count_at %zu\nfull_at %zu\n", offsetof(HashHeader, count), offsetof(HashHeader, full));
	printf("empty %u\nbusy %u\nlive %u\ndeleted %u\n", HASH_EMPTY, HASH_BUSY, HASH_LIVE, HASH_DELETED);
	const unsigned keys[] = {` + strings.Join(keys, ", ") + `};
	for (unsigned k : keys)
		printf("hash %u %u\n", k, hashKey(k));
	return 0;
}
`
}

// TestGPUHashModelLayout: the CUDA C model of the GPU hash map lays out
// and hashes hashcount.c's table as jit does (jit.GPUHashLayout,
// jit.HashKey), so that the bench's model column measures the same table.
// Needs nvcc and clang; runs the model's host half only.
func TestGPUHashModelLayout(t *testing.T) {
	hdr := readRepoFile(t, "testdata/cuda/model/gpuhash_model.cuh")
	// The header's text goes into the source, so that nvcc's output cache
	// (keyed by the source) follows its changes.
	src := "#include <cuda_runtime.h>\n#include <cstdio>\n#include <cstdlib>\ntypedef unsigned long long u64;\n" +
		"#define CHECK(call) (call)\n__device__ __forceinline__ unsigned laneId() { return threadIdx.x % 32; }\n" +
		hdr + modelLayoutMain()
	f := filepath.Join(t.TempDir(), "gpuhash_layout.cu")
	if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := fatbintest.Build(t, f, "gpuhash_layout", "-arch=sm_70")
	out, err := exec.Command(exe).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", exe, err, out)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			got[k] = v
		}
	}

	m := hashcountMap(t)
	l := jit.GPUHashLayout(m)
	want := map[string]uint64{
		"keys": uint64(m.MaxEntries), "slots": uint64(l.Slots), "probes": uint64(l.Probes()), "spins": jit.HashSpinLimit,
		"stride": l.Stride, "key_at": jit.HashKeyAt, "value_at": l.ValueAt, "count_at": jit.HashCountAt, "full_at": jit.HashFullAt,
		"empty": jit.HashSlotEmpty, "busy": jit.HashSlotBusy, "live": jit.HashSlotLive, "deleted": jit.HashSlotDeleted,
	}
	for k, w := range want {
		if got[k] != strconv.FormatUint(w, 10) {
			t.Errorf("gpuhash_model.cuh: %s = %q, jit has %d", k, got[k], w)
		}
	}
	if m.MaxEntries != hashcountKeys {
		t.Errorf("hashcount.c's max_entries %d, checkHashcount's keys %d", m.MaxEntries, hashcountKeys)
	}
	for _, k := range modelHashKeys {
		line := fmt.Sprintf("%d %d", k, jit.HashKey(binary.LittleEndian.AppendUint32(nil, k)))
		if !strings.Contains(string(out), "hash "+line+"\n") {
			t.Errorf("gpuhash_model.cuh's hashKey(%d) differs from jit.HashKey (want %q):\n%s", k, line, out)
		}
	}
}

// hashcountMap is hc_count of compat/hashcount.c, built with clang.
func hashcountMap(t *testing.T) *jit.Map {
	t.Helper()
	for _, p := range loadCompat(t, compatObjects(t), "hashcount") {
		for _, m := range p.Maps {
			if m.Name == "hc_count" && m.Type == jit.MapTypeGPUHash {
				return m
			}
		}
	}
	t.Fatal("compat/hashcount.o has no GPU hash map hc_count")
	return nil
}
