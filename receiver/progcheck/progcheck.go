// Package progcheck checks a configuration's programs[] against their
// eBPF objects as the receiver's start does, for `gpuprobe validate
// --host`: each object read and parsed within its bounds, the programs to
// attach found, and every map's record_types and map_values applied to
// the maps the object defines.
package progcheck

import (
	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/receiver/internal/progmaps"
)

// Check reads c's program objects and lays out their GPU maps as start
// would; errors name the config key (programs[i]::path, ::attach,
// ::record_types::<map>, ::map_values::<map>).
func Check(c *config.Config) error {
	objs, err := progmaps.ReadObjects(c.Programs)
	if err != nil {
		return err
	}
	_, err = progmaps.Load(c.Programs, objs, progmaps.Options{
		MaxThreads: c.Buffers.MaxThreads, MapEntries: c.Buffers.MapEntries})
	return err
}
