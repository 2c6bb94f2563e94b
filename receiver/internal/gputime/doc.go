// Package gputime turns the kernel windows of every process on one
// physical GPU into per-process GPU time that never exceeds wall time.
//
// A driver window (record.Window) runs from a kernel's first block to its
// last. On a GPU shared by time-slicing, a window also covers the slices
// the GPU gave other contexts meanwhile, so the windows of a GPU's
// processes overlap and their sum exceeds the GPU's busy time. This
// package holds each GPU's windows for a short horizon (Options.Lag) and
// attributes the union of them:
//
//   - a process's windows are first merged into intervals (its own
//     streams overlap each other, not other processes);
//   - time covered by one process's interval only is that process's,
//     exactly;
//   - time covered by several processes (an overlap) is split by a model
//     of the scheduler (Mode), over each busy period (a maximal span of
//     the union without a gap), so the attributed time of a busy period
//     is its length: the sum over processes never exceeds the union, and
//     the union never exceeds wall time.
//
// TimeSlicing (the default): the GPU runs one context at a time, and a
// kernel's window ends when it has had its solo duration of GPU time. So
// each (process, kernel) has a solo duration learned from its windows that
// nothing else overlapped (an exponential average), and an interval's
// demand in the overlap is its windows' solo durations less the time it
// had alone. The overlap of a busy period is split in proportion to those
// demands, each interval getting at most the overlap it was in. Intervals
// without an estimate (a kernel never seen alone) get an equal share of
// each overlapped span instead, which is what a round-robin scheduler
// gives contexts that all have work.
//
// Concurrent (MPS, green contexts): kernels of different processes run
// at once, each on its share of the SMs; an overlapped span is split in
// equal shares among the processes running in it. It is configured (the
// collector cannot see the MPS control daemon's client list).
//
// Windows arrive per client late and out of order (the shim flushes its
// activity buffers about every poll interval). Settle(now) attributes what
// lies before the watermark now − Lag, and keeps the rest; a window that
// arrives with parts before the watermark has those parts cut off and
// counted (Counters.LateNS), so settled time is never attributed twice.
// Nothing waits for the lag that need not: a GPU whose processes are all
// gone settles to the end of their last window, and Flush (the
// collector's shutdown) settles everything buffered.
//
// Hostile clients. A client chooses its windows, not its pid or the
// collector's clock: windows ending in the future are clipped to now,
// windows longer than Options.MaxWindow are cut to their last MaxWindow, a
// client's buffered windows are capped at its share of the GPU's
// (Options.MaxWindows divided among the GPU's processes, not first come):
// beyond it, its new windows merge into its latest one. In an overlap, an
// interval is guaranteed at least the smaller of its own demand and its
// equal share of the spans it overlapped, so a client claiming huge
// demands can take from another client at most the difference between
// the demand split and the equal split of the spans they shared; it
// cannot take time another process had alone, and cannot push time past
// the union. docs/security.md says the same for operators.
package gputime
