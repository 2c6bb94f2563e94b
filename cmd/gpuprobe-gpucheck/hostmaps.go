//go:build cgo

package main

import "fmt"

// checkKshared: the kernel-shared array (1504) of an object with no host
// program counts every thread, one launch and every block's threads
// (compat/kshared.c).
func checkKshared(cr *compatRun) (string, error) {
	t := cr.s.threads()
	if err := cr.keys("ks_calls", 4, values(t, 1, t, 0)); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d threads, 1 launch, %d blocks of %d", t, cr.blocks(), cr.block()), nil
}

// checkKmap: the kernel map (1504 shared with a host program) counted
// every thread and summed tid.x + 1 from the GPU; the host half did not
// run (compat/kmap.c).
func checkKmap(cr *compatRun) (string, error) {
	t, b := cr.s.threads(), cr.block()
	if err := cr.keys("km_count", 4, values(t, 0, cr.blocks()*b*(b+1)/2, 0)); err != nil {
		return "", err
	}
	return fmt.Sprintf("kernel map in host memory: %d threads, tid sum %d", t, cr.blocks()*b*(b+1)/2), nil
}

// hostmapsShared is hm_shared[k] of compat/hostmaps.c: the threads of g
// blocks of b whose tid.x % 10 is k, for k < 10; 42 at key 10.
func hostmapsShared(g, b uint64) func(uint64) uint64 {
	return func(k uint64) uint64 {
		switch {
		case k < 10:
			n := b / 10
			if k < b%10 {
				n++
			}
			return g * n
		case k == 10:
			return 42
		}
		return 0
	}
}

// checkHostmaps: the host-memory per-thread (1512) and shared (1513)
// arrays hold each thread's count, start flag and id, and the shared
// counts by tid.x % 10 (compat/hostmaps.c).
func checkHostmaps(cr *compatRun) (string, error) {
	for key, want := range []func(uint64) uint64{always(1), always(1), func(t uint64) uint64 { return t }} {
		if err := cr.lanes("hm_thread", uint64(key), want); err != nil {
			return "", err
		}
	}
	if err := cr.keys("hm_shared", 16, hostmapsShared(cr.blocks(), cr.block())); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d threads: count, start and id each; shared by tid.x %% 10", cr.s.threads()), nil
}
