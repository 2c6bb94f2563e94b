//go:build cgo

package main

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/shm"
)

// hashValue is the u64 under the 4-byte key in GPU hash map m, whose table
// a holds (element 0 the header, 1+s slot s); 0 when the key is absent.
func hashValue(m *jit.Map, a *shm.Array, key uint64) (uint64, error) {
	l := jit.GPUHashLayout(m)
	es, err := l.Entries(m, func(i uint32) ([]byte, error) { return a.Value(uint64(i), 0) })
	if err != nil {
		return 0, fmt.Errorf("map %s: %w", m.Name, err)
	}
	k := binary.LittleEndian.AppendUint32(nil, uint32(key))
	for _, e := range es {
		if bytes.Equal(e.Key, k) && len(e.Value) >= 8 {
			return binary.LittleEndian.Uint64(e.Value), nil
		}
	}
	return 0, nil
}

// checkGPUHash: every warp inserted its key once and counted all its
// threads; thread 0's 8 keys into 4 entries: 4 in, 4 refused, then key 0
// deleted and key 4 inserted (compat/gpuhash.c).
func checkGPUHash(cr *compatRun) (string, error) {
	t := cr.s.threads()
	w := t / 32
	perKey := func(k uint64) uint64 {
		n := w / 32
		if k < w%32 {
			n++
		}
		return 32 * n
	}
	if err := cr.keys("gh_count", 32, perKey); err != nil {
		return "", err
	}
	if err := cr.keys("gh_res", 7, values(32, t-32, 0, 0, 4, 4, 1)); err != nil {
		return "", err
	}
	if err := cr.keys("gh_small", 8, values(0, 101, 102, 103, 104, 0, 0, 0)); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d threads, %d warps on 32 keys: one insert per key, %d -EEXIST", t, w, t-32), nil
}

// hashcountKeys is hashcount.c's HC_KEYS: its keys are blockIdx.x % 1024.
const hashcountKeys = 1024

// checkHashcount: each block's threads counted under the key blockIdx.x
// % 1024, every insert either made or refused with -EEXIST, every lookup
// after it found the key (compat/hashcount.c).
func checkHashcount(cr *compatRun) (string, error) {
	g, b := cr.blocks(), cr.block()
	perKey := func(k uint64) uint64 {
		n := g / hashcountKeys
		if k < g%hashcountKeys {
			n++
		}
		return b * n
	}
	if err := cr.keys("hc_count", hashcountKeys, perKey); err != nil {
		return "", err
	}
	if err := cr.keys("hc_err", 2, always(0)); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d blocks of %d on %d keys: %d a key, no error", g, b, min(g, hashcountKeys), perKey(0)), nil
}
