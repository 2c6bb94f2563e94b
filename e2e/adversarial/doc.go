// Package adversarial runs hostile agent-socket clients against the real
// collector binary (bin/otelcol-gpuprobe-lean) and checks that the collector
// holds its bounds while an honest client keeps being served
// (`make adversarial`; part of `make test`).
//
// Each class runs for a bounded time (Duration) beside an honest producer
// (bin/gpuprobe-harness loadgen):
//
//  1. bomb: PATCH with decompression bombs and huge images
//  2. ring: a launch ring with a lying header (head far ahead, every drop
//     mark set), rewritten for the whole run
//  3. fds: descriptor trickle, one byte per sendmsg with 32 descriptors
//  4. idle: hundreds of connections that never say HELLO; a legitimate
//     client must still get WELCOME
//  5. devices: records naming 200k distinct device numbers
//  6. calibration: hostile calibration records
//  7. names: sessions that announce 100 kernel names, launch each on 64
//     devices and leave, again and again; the honest client's launches
//     must keep their own kernel name
//  8. handles: 16 sessions naming 16,384 function handles each, with
//     4 KiB names
//  9. rings: 64 sessions of one unprivileged uid holding default-size
//     rings; the collector maps at most the uid's share
//  10. tickets: sessions that take a ring ticket and leave; ring memfds
//     stay bounded and a root client is never refused
//  11. maps: idle sessions of a process whose /proc/PID/maps is 150 MiB
//
// The program and config runs check that a configured GPU program the
// verifier refuses (a helper reading past its buffer) and values that
// would wrap fail the collector's start, and a client claiming another
// pod's k8s.* attributes is checked in TestResourceClaims.
//
// and the last class runs all of them at once beside the honest client.
// One class also runs as an unprivileged uid (a setuid child of the test
// binary): admitted when agent::allowed_uids lists it, refused otherwise.
//
// Every class gets a fresh collector, so that what one class left behind
// is not blamed on the next. Throughout, a watchdog checks that the
// collector is up, that its VmRSS stays under MaxRSS, and that its
// self-metrics endpoint answers within MaxScrape. After each class the
// collector's descriptor count must return to its baseline (FdSettle), the
// honest client's launches must all be accounted (exported + dropped by
// the producer = produced), and SIGTERM must end the collector within
// MaxShutdown. A quiet run checks the self-metrics (records read + dropped
// = produced), a run sends SIGTERM while every class is connected, and
// `otelcol-gpuprobe validate` must refuse values that would wrap and a
// socket in a missing directory (without creating it).
//
// The suite needs root (the collector's deployment model; the unprivileged
// class setuids a child) and the binaries GPUPROBE_OTELCOL and GPUPROBE_HARNESS
// (built by make when unset).
package adversarial
