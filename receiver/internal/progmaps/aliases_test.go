package progmaps

import (
	"testing"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/jit"
)

// TestAliasedMapRegions: bpftime's 1512, 1513 and a 1504 with no host
// program get the region, lanes and seeds of the type the loader lays them
// out as (1502, 1503, 1503): the same metrics follow from the same Def.
func TestAliasedMapRegions(t *testing.T) {
	tests := []struct {
		declared, as jit.MapType
	}{
		{jit.MapTypePerThreadHostArray, jit.MapTypePerThreadArray},
		{jit.MapTypeGPUHostArray, jit.MapTypeGPUArray},
		{jit.MapTypeKernelSharedArray, jit.MapTypeGPUArray},
	}
	opts := Options{MaxThreads: 256}
	for _, tt := range tests {
		alias := &jit.Map{Name: "m", Type: tt.as, Declared: tt.declared, KeySize: 4, ValueSize: 8, MaxEntries: 4}
		plain := &jit.Map{Name: "m", Type: tt.as, KeySize: 4, ValueSize: 8, MaxEntries: 4}
		got, err := newDef("x.o", alias, nil, opts)
		if err != nil {
			t.Fatalf("%d: %v", tt.declared, err)
		}
		want, err := newDef("x.o", plain, nil, opts)
		if err != nil {
			t.Fatal(err)
		}
		if got.Kind != want.Kind || got.Keys != want.Keys || got.Lanes != want.Lanes || got.Type != tt.as {
			t.Errorf("%d: kind %v keys %d lanes %d type %d, want %v %d %d %d", tt.declared,
				got.Kind, got.Keys, got.Lanes, got.Type, want.Kind, want.Keys, want.Lanes, tt.as)
		}
		if err := addSeed(got, config.MapSeed{Map: "m", Index: 1, Words: []uint64{5}}); err != nil {
			t.Errorf("%d: seed: %v", tt.declared, err)
		}
	}
}
