package receiver

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
)

// waitPolls waits until r's poll loop has finished passes that began d or
// more from now, so that whatever was due by then is emitted (or would
// have been). A test that checks something does not happen waits on the
// loop with it, not on the clock: a loop starved for that long still
// has to run. It watches a ring of its own, fed one kernel name at a
// time, which it releases before it returns.
func waitPolls(t *testing.T, r *gpuReceiver, d time.Duration) {
	t.Helper()
	ring := newTestRing(t, 256, 16)
	id := r.AddRing(ring)
	name := (&record.KernelName{Function: 1, PID: uint32(os.Getpid()), Name: "waitPolls"}).Append(nil)
	// A pass reads each ring once and the ticker holds one tick at most,
	// so of the records written after due, the third is read by a pass
	// that began after due, and the fourth by one that began once that
	// pass had expired launches and sent what it built.
	due, passes := time.Now().Add(d), 0
	waitProgress(t, "poll loop passes", func() (int64, bool) {
		st := ring.Stats()
		if st.Tail < st.Head {
			return int64(st.Tail), false
		}
		if time.Now().After(due) {
			passes++
		}
		if passes == 5 {
			return int64(st.Tail), true
		}
		if res := ring.Produce(uint32(record.TypeKernelName), name); res != shm.Published {
			t.Fatalf("produce: %v", res)
		}
		return int64(st.Tail), false
	})
	r.RemoveRing(id)
	waitFor(t, "the ring of waitPolls released", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return !slices.ContainsFunc(r.srcs.list, func(s *source) bool { return s.id == id })
	})
}
