package translate

import (
	"sort"
	"testing"

	"github.com/gpuprobe/gpuprobe/record"
)

// TestApproximateLegacy: the legacy default stream's implicit
// synchronisation with blocking streams closes shim-less launches across
// streams, in both directions, only for streams whose creation said they
// are blocking (or per-thread default streams), and only for the work
// enqueued before the ordering call.
func TestApproximateLegacy(t *testing.T) {
	const pid, tid = 90, 91
	launch := func(enter, stream uint64) rec {
		return host(launchCall(record.HostCudaLaunchKernel, pid, tid, enter, enter+100, 0xabc, stream))
	}
	call := func(api record.HostAPI, enter uint64, args ...uint64) rec {
		return host(hc(api, pid, tid, enter, enter+50, args...))
	}
	create := func(api record.HostAPI, enter, stream, flags uint64) rec { return call(api, enter, stream, flags) }
	failed := func() rec {
		c := hc(record.HostCudaStreamCreateWithFlags, pid, tid, 100, 150, 0x70, 0)
		c.Ret = 2 // cudaErrorMemoryAllocation
		return host(c)
	}
	memcpy := func(enter uint64) rec { return call(record.HostCudaMemcpy, enter, 1, 2, 64, 2) } // device to host
	tests := []struct {
		name   string
		recs   []rec // in return order
		closed []uint64
		by     string // closed_by of the first closed launch
	}{
		{"a legacy copy closes a blocking stream's earlier launches",
			[]rec{create(record.HostCudaStreamCreate, 100, 7, 0), launch(1_000, 7), memcpy(2_000)}, []uint64{1_000}, "cudaMemcpy"},
		{"a non-blocking stream waits for its own sync",
			[]rec{create(record.HostCudaStreamCreateWithFlags, 100, 7, 1), launch(1_000, 7), memcpy(2_000)}, nil, ""},
		{"a stream not seen created waits for its own sync",
			[]rec{launch(1_000, 7), memcpy(2_000)}, nil, ""},
		{"a failed creation says nothing",
			[]rec{failed(), launch(1_000, 0x70), memcpy(2_000)}, nil, ""},
		{"driver creation, blocking",
			[]rec{create(record.HostCuStreamCreate, 100, 7, 0), launch(1_000, 7), memcpy(2_000)}, []uint64{1_000}, "cudaMemcpy"},
		{"driver creation with priority, non-blocking",
			[]rec{call(record.HostCuStreamCreateWithPriority, 100, 7, 1, uint64(0xffffffff)), launch(1_000, 7), memcpy(2_000)}, nil, ""},
		{"a destroyed stream's handle is forgotten",
			[]rec{create(record.HostCudaStreamCreate, 100, 7, 0), call(record.HostCudaStreamDestroy, 200, 7), launch(1_000, 7), memcpy(2_000)}, nil, ""},
		{"a launch entered after the copy stays open",
			[]rec{create(record.HostCudaStreamCreate, 100, 7, 0), launch(1_000, 7), memcpy(2_000), launch(2_500, 7)}, []uint64{1_000}, "cudaMemcpy"},
		{"a legacy launch orders the blocking stream before a legacy stream sync",
			[]rec{create(record.HostCudaStreamCreate, 100, 7, 0), launch(1_000, 7), launch(1_500, 0),
				call(record.HostCudaStreamSynchronize, 2_000, 0)}, []uint64{1_000, 1_500}, "cudaStreamSynchronize"},
		{"the legacy stream's later work does not cover a blocking stream's later launch",
			[]rec{create(record.HostCudaStreamCreate, 100, 7, 0), launch(1_000, 0), launch(1_500, 7),
				call(record.HostCudaStreamSynchronize, 2_000, 0)}, []uint64{1_000}, "cudaStreamSynchronize"},
		{"a blocking stream waits for the legacy stream's earlier work",
			[]rec{create(record.HostCudaStreamCreate, 100, 7, 0), launch(1_000, 0), launch(1_500, 7),
				call(record.HostCudaStreamSynchronize, 2_000, 7)}, []uint64{1_000, 1_500}, "cudaStreamSynchronize"},
		{"a non-blocking stream does not wait for the legacy stream",
			[]rec{create(record.HostCudaStreamCreateWithPriority, 100, 7, 1), launch(1_000, 0), launch(1_500, 7),
				call(record.HostCudaStreamSynchronize, 2_000, 7)}, []uint64{1_500}, "cudaStreamSynchronize"},
		{"the per-thread default stream is blocking",
			[]rec{host(launchCall(record.HostCudaLaunchKernelPtsz, pid, tid, 1_000, 1_100, 0xabc, 0)), launch(1_500, 0),
				call(record.HostCudaStreamSynchronize, 2_000, 0)}, []uint64{1_000, 1_500}, "cudaStreamSynchronize"},
		{"an event record on the legacy stream orders it too",
			[]rec{create(record.HostCudaStreamCreate, 100, 7, 0), launch(1_000, 7), call(record.HostCudaEventRecord, 1_500, 0xe0, 0),
				call(record.HostCudaEventSynchronize, 2_000, 0xe0)}, []uint64{1_000}, "cudaEventSynchronize"},
		{"a wait on an older record does not replace one on a newer record",
			[]rec{launch(1_000, 7), call(record.HostCudaEventRecord, 1_150, 0xe0, 7), launch(1_200, 7),
				call(record.HostCudaEventRecord, 1_400, 0xe1, 7), call(record.HostCudaStreamWaitEvent, 1_500, 0, 0xe1, 0),
				call(record.HostCudaStreamWaitEvent, 1_600, 0, 0xe0, 0), call(record.HostCudaStreamSynchronize, 2_000, 0)},
			[]uint64{1_000, 1_200}, "cudaStreamSynchronize"},
		{"two blocking streams through the legacy stream",
			[]rec{create(record.HostCudaStreamCreate, 100, 7, 0), create(record.HostCudaStreamCreate, 200, 8, 0),
				launch(1_000, 7), launch(1_100, 0), launch(1_300, 8), call(record.HostCudaStreamSynchronize, 2_000, 8)},
			[]uint64{1_000, 1_100, 1_300}, "cudaStreamSynchronize"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x, c := approxRun(t, pid, tc.recs)
			var got []uint64
			for _, s := range x.byName["_Z3fooi"] {
				got = append(got, uint64(s.StartTimestamp())-realBase)
			}
			sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
			if len(got) != len(tc.closed) || c.ApproxSpans != uint64(len(tc.closed)) {
				t.Fatalf("approximate spans starting at %v (counted %d), want %v", got, c.ApproxSpans, tc.closed)
			}
			for i := range got {
				if got[i] != tc.closed[i] {
					t.Fatalf("approximate spans starting at %v, want %v", got, tc.closed)
				}
			}
			if len(tc.closed) > 0 {
				attrsEqual(t, x.byName["_Z3fooi"][0], map[string]any{"cuda.kernel.approximate.closed_by": tc.by})
			}
		})
	}
}
