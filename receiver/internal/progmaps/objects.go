package progmaps

import (
	"fmt"
	"io"
	"os"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/jit"
)

// MaxObjectBytes is the largest file a programs[i]::path may name: the
// jit's bound on an eBPF object (16 MiB), checked before the file is read
// in full.
const MaxObjectBytes = jit.MaxObjectSize

// parseObject checks and parses one object; a variable so that tests can
// count the parses.
var parseObject = jit.ParseObject

// ReadObjects reads the ELF object of each of programs once, at most
// MaxObjectBytes of it, and checks and parses it once (jit.ParseObject: the
// ELF check runs on the bytes before cilium/ebpf parses them). objs[i] is
// programs[i]'s, for Load, the patcher and the host programs to share.
// Errors name programs[i]::path.
func ReadObjects(programs []config.ProgramConfig) ([]*jit.Object, error) {
	objs := make([]*jit.Object, len(programs))
	for i, pc := range programs {
		key := fmt.Sprintf("programs[%d]::path", i)
		b, err := readBounded(pc.Path)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", key, pc.Path, err)
		}
		if objs[i], err = parseObject(b); err != nil {
			return nil, fmt.Errorf("%s %s: %w", key, pc.Path, err)
		}
	}
	return objs, nil
}

// readBounded reads the file at path, refusing one of more than
// MaxObjectBytes before reading it (by its size) or while reading it (a
// file that grows, or whose size stat does not tell).
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read eBPF object: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > MaxObjectBytes {
		return nil, fmt.Errorf("eBPF object of %d bytes exceeds the %d-byte (16 MiB) limit", st.Size(), MaxObjectBytes)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxObjectBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read eBPF object: %w", err)
	}
	if len(b) > MaxObjectBytes {
		return nil, fmt.Errorf("eBPF object of more than %d bytes exceeds the %d-byte (16 MiB) limit", MaxObjectBytes, MaxObjectBytes)
	}
	return b, nil
}
