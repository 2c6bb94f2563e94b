package record

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// cProducer fills each struct of include/gpuprobe_record.h with the values
// of sampleRecords (except the truncated name) and writes the bytes out.
const cProducer = `
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpuprobe_record.h"

static void out(const void *p, size_t n) { fwrite(p, 1, n, stdout); }
#define PREFIX(r, t, s) do { (r).h.type = (t); (r).h.version = GP_REC_VERSION; (r).h.size = (s); } while (0)

int main(void) {
	struct gp_rec_launch l; memset(&l, 0, sizeof l); PREFIX(l, GP_REC_LAUNCH, sizeof l);
	l.launch_id = 7; l.pid = 100; l.tid = 101; l.enqueue_ns = 1000; l.return_ns = 1500; l.stream = 0xabc;
	l.function = 0xf00; l.device = 1; l.shared_mem = 4096; l.grid[0] = 64; l.grid[1] = 2; l.grid[2] = 1;
	l.block[0] = 256; l.block[1] = 1; l.block[2] = 1; l.result = 0; l.api = GP_API_LAUNCH_KERNEL_EX | GP_LAUNCH_F_UNPROBED;
	out(&l, sizeof l);

	const char *nm = "_Z6vecAddPfS_S_i";
	size_t sz = (sizeof(struct gp_rec_kernel_name) + strlen(nm) + 7) & ~(size_t)7;
	struct gp_rec_kernel_name *k = calloc(1, sz); PREFIX(*k, GP_REC_KERNEL_NAME, sz);
	k->function = 0xf00; k->module = 0xdead; k->pid = 100; k->name_len = strlen(nm); memcpy(k->name, nm, strlen(nm));
	out(k, sz);

	struct gp_rec_warp w; memset(&w, 0, sizeof w); PREFIX(w, GP_REC_WARP, sizeof w);
	w.launch_id = 7; w.block[0] = 3; w.block[1] = 1; w.warp = 5; w.sm_id = 17; w.active_mask = 0xffff;
	w.start_ns = 10; w.end_ns = 90; w.min_exit_ns = 70; out(&w, sizeof w);

	struct gp_rec_completion c; memset(&c, 0, sizeof c); PREFIX(c, GP_REC_COMPLETION, sizeof c);
	c.launch_id = 7; c.complete_ns = 99999; c.device = 1; c.how = GP_SEEN_BY_EVENT_QUERY; out(&c, sizeof c);

	struct gp_rec_memcpy m; memset(&m, 0, sizeof m); PREFIX(m, GP_REC_MEMCPY, sizeof m);
	m.bytes = 1 << 20; m.start_ns = 5; m.end_ns = 9; m.stream = 3; m.pid = 100; m.tid = 102; m.device = 0;
	m.kind = GP_MEMCPY_DTOH; m.flags = GP_MEMCPY_ASYNC; out(&m, sizeof m);

	struct gp_rec_sync s; memset(&s, 0, sizeof s); PREFIX(s, GP_REC_SYNC, sizeof s);
	s.start_ns = 1; s.end_ns = 2; s.pid = 100; s.tid = 100; s.kind = GP_SYNC_CONTEXT; out(&s, sizeof s);

	struct gp_rec_calibration cb; memset(&cb, 0, sizeof cb); PREFIX(cb, GP_REC_CALIBRATION, sizeof cb);
	cb.mono_ns = 1000000000ull; cb.realtime_ns = 1700000000000000000ull; cb.gpu_ns = 500000000ull;
	cb.device = 1; cb.uncertainty_ns = 300; out(&cb, sizeof cb);

	size_t tsz = sizeof(struct gp_rec_thread_count) + 3 * 8;
	struct gp_rec_thread_count *t = calloc(1, tsz); PREFIX(*t, GP_REC_THREAD_COUNT, tsz);
	t->launch_id = 7; t->first_thread = 256; t->count = 3; t->counts[0] = 1; t->counts[1] = 2; t->counts[2] = 3;
	out(t, tsz);

	struct gp_rec_device d; memset(&d, 0, sizeof d); PREFIX(d, GP_REC_DEVICE, sizeof d);
	const unsigned char u[16] = {0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
	d.device = 1; d.pid = 100; memcpy(d.uuid, u, 16); d.sm_count = 132; d.compute_cap = 90;
	strcpy(d.name, "NVIDIA H100 80GB HBM3"); out(&d, sizeof d);

	/* FNV-1a 32 of the mangled name, as the shim hashes it. */
	uint32_t hash = 2166136261u;
	for (const char *p = nm; *p; p++) { hash ^= (unsigned char)*p; hash *= 16777619u; }
	struct gp_rec_exec ex; memset(&ex, 0, sizeof ex); PREFIX(ex, GP_REC_EXEC, sizeof ex);
	ex.launch_id = 7; ex.start_ns = 100; ex.end_ns = 80100; ex.blocks = 65536; ex.threads = 1 << 24; out(&ex, sizeof ex);

	struct gp_rec_window wi; memset(&wi, 0, sizeof wi); PREFIX(wi, GP_REC_WINDOW, sizeof wi);
	wi.launch_id = 7; wi.start_ns = 2000; wi.end_ns = 82000; wi.device = 1; wi.name_hash = hash;
	wi.correlation = 12345; wi.flags = GP_WINDOW_F_GRAPH; out(&wi, sizeof wi);

	struct gp_rec_window_state ws; memset(&ws, 0, sizeof ws); PREFIX(ws, GP_REC_WINDOW_STATE, sizeof ws);
	ws.time_ns = 1500; ws.state = GP_WINDOWS_UNAVAILABLE; ws.reason = GP_WINDOWS_R_API_ERROR; ws.detail = 17;
	ws.dropped = 3; out(&ws, sizeof ws);

	struct gp_rec_span_context sc; memset(&sc, 0, sizeof sc); PREFIX(sc, GP_REC_SPAN_CONTEXT, sizeof sc);
	sc.pid = 100; sc.tid = 101;
	for (int i = 0; i < 16; i++) sc.trace_id[i] = (uint8_t)(0xa0 + i);
	for (int i = 0; i < 8; i++) sc.span_id[i] = (uint8_t)(0xb0 + i);
	sc.flags = GP_TRACE_FLAG_SAMPLED; sc.source = GP_SPANCTX_THREAD; out(&sc, sizeof sc);

	size_t ssz = sizeof(struct gp_rec_stack) + 4 * 8;
	struct gp_rec_stack *st = calloc(1, ssz); PREFIX(*st, GP_REC_STACK, ssz);
	st->launch_id = 7; st->pid = 100; st->tid = 101; st->part = 1; st->flags = GP_STACK_F_LAST | GP_STACK_F_NATIVE_CUT;
	st->native = 2; st->python = 1; st->py_version = 0x030b;
	st->words[0] = 0x401000; st->words[1] = 0x7f0000001234; st->words[2] = 0x7f0000100000; st->words[3] = 0x7f00001000a6;
	out(st, ssz);

	struct gp_rec_patch pa; memset(&pa, 0, sizeof pa); PREFIX(pa, GP_REC_PATCH, sizeof pa);
	pa.module = 0xdead; pa.request_ns = 2500000; pa.compile_ns = 41000000; pa.pid = 100; pa.kernels = 160;
	pa.outcome = GP_PATCH_FAILED; pa.cache = GP_PATCH_CACHE_CORRUPT; out(&pa, sizeof pa);

	const char *set = "sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum.per_second";
	uint32_t sh = 2166136261u;
	for (const char *p = set; *p; p++) { sh ^= (unsigned char)*p; sh *= 16777619u; }
	size_t csz = sizeof(struct gp_rec_counter_sample) + 3 * 8;
	struct gp_rec_counter_sample *cs = calloc(1, csz); PREFIX(*cs, GP_REC_COUNTER_SAMPLE, csz);
	cs->start_ns = 5000; cs->end_ns = 105000; cs->device = 1; cs->set_hash = sh; cs->values = 3;
	cs->flags = GP_COUNTER_F_OVERFLOW_BEFORE; cs->value[0] = 87.5; cs->value[1] = 3.2e12; cs->value[2] = -0.0;
	out(cs, csz);
	return 0;
}
`

// cConstants asserts, at compile time, that the header's enum and flag
// values are the Go constants.
func cConstants() string {
	var b strings.Builder
	for _, c := range []struct {
		c string
		v uint32
	}{
		{"GP_REC_EXEC", uint32(TypeExec)}, {"sizeof(struct gp_rec_exec)", ExecSize},
		{"GP_LAUNCH_F_UNPROBED >> 16", uint32(LaunchUnprobed)}, {"GP_LAUNCH_F_NO_WINDOW >> 16", uint32(LaunchNoWindow)},
		{"GP_LAUNCH_F_SASS >> 16", uint32(LaunchSASS)}, {"GP_LAUNCH_F_PRESWAP >> 16", uint32(LaunchPreswap)},
		{"GP_LAUNCH_F_COOPERATIVE >> 16", uint32(LaunchCooperative)}, {"GP_LAUNCH_F_CLUSTER >> 16", uint32(LaunchCluster)},
		{"GP_REC_WINDOW", uint32(TypeWindow)}, {"GP_REC_WINDOW_STATE", uint32(TypeWindowState)},
		{"GP_WINDOW_F_GRAPH", uint32(WindowGraph)}, {"GP_WINDOW_F_NO_LAUNCH", uint32(WindowNoLaunch)},
		{"GP_WINDOW_F_DEVICE_LAUNCHED", uint32(WindowDeviceLaunched)}, {"GP_WINDOW_F_UNTIMED", uint32(WindowUntimed)},
		{"GP_WINDOW_F_GRAPH_EXEC", uint32(WindowGraphExec)},
		{"GP_WINDOWS_ON", uint32(WindowsOn)}, {"GP_WINDOWS_UNAVAILABLE", uint32(WindowsUnavailable)},
		{"GP_WINDOWS_STEPPED_ASIDE", uint32(WindowsSteppedAside)}, {"GP_WINDOWS_OFF", uint32(WindowsOff)},
		{"GP_WINDOWS_R_NONE", uint32(WindowsReasonNone)}, {"GP_WINDOWS_R_NO_LIBRARY", uint32(WindowsReasonNoLibrary)},
		{"GP_WINDOWS_R_API_ERROR", uint32(WindowsReasonAPIError)}, {"GP_WINDOWS_R_PROFILER", uint32(WindowsReasonProfiler)},
		{"GP_WINDOWS_R_INJECTION", uint32(WindowsReasonInjection)}, {"GP_WINDOWS_R_CONFIG", uint32(WindowsReasonConfig)},
		{"GP_WINDOWS_R_RATE", uint32(WindowsReasonRate)}, {"GP_WINDOWS_R_SASS", uint32(WindowsReasonSASS)},
		{"sizeof(struct gp_rec_window)", WindowSize}, {"sizeof(struct gp_rec_window_state)", WindowStateSize},
		{"GP_REC_SPAN_CONTEXT", uint32(TypeSpanContext)}, {"sizeof(struct gp_rec_span_context)", SpanContextSize},
		{"GP_SPANCTX_NONE", uint32(SpanContextNone)}, {"GP_SPANCTX_THREAD", uint32(SpanContextThread)},
		{"GP_SPANCTX_ENV", uint32(SpanContextEnv)}, {"GP_TRACE_FLAG_SAMPLED", TraceFlagSampled},
		{"GP_REC_STACK", uint32(TypeStack)}, {"sizeof(struct gp_rec_stack)", StackHeaderSize},
		{"GP_STACK_F_LAST", uint32(StackLast)}, {"GP_STACK_F_NATIVE_CUT", uint32(StackNativeCut)},
		{"GP_STACK_F_PYTHON_CUT", uint32(StackPythonCut)}, {"GP_STACK_F_PY_UNKNOWN", uint32(StackPythonUnknown)},
		{"GP_STACK_MAX_WORDS", MaxStackWords},
		{"GP_REC_PATCH", uint32(TypePatch)}, {"sizeof(struct gp_rec_patch)", PatchSize},
		{"GP_PATCH_SWAPPED", uint32(PatchSwapped)}, {"GP_PATCH_UNPATCHED", uint32(PatchUnpatched)},
		{"GP_PATCH_FAILED", uint32(PatchFailed)}, {"GP_PATCH_DROPPED", uint32(PatchDropped)},
		{"GP_PATCH_CACHE_OFF", uint32(PatchCacheOff)}, {"GP_PATCH_CACHE_HIT", uint32(PatchCacheHit)},
		{"GP_PATCH_CACHE_MISS", uint32(PatchCacheMiss)}, {"GP_PATCH_CACHE_CORRUPT", uint32(PatchCacheCorrupt)},
		{"GP_REC_COUNTER_SAMPLE", uint32(TypeCounterSample)}, {"sizeof(struct gp_rec_counter_sample)", CounterHeaderSize},
		{"GP_COUNTER_F_OVERFLOW_BEFORE", uint32(CounterOverflowBefore)}, {"GP_COUNTER_MAX_VALUES", MaxCounterValues},
	} {
		fmt.Fprintf(&b, "_Static_assert(%s == %d, %q);\n", c.c, c.v, c.c)
	}
	return b.String()
}

// TestCHeaderMatches compiles a C producer against include/gpuprobe_record.h
// and checks that its bytes are exactly what the Go encoder writes.
func TestCHeaderMatches(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Fatal("no C compiler: the C layout test needs gcc")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "producer.c")
	if err := os.WriteFile(src, []byte(cProducer+cConstants()), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "producer")
	inc, _ := filepath.Abs("include")
	if out, err := exec.Command(cc, "-std=c11", "-Wall", "-Werror", "-I", inc, "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	got, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	for i, r := range sampleRecords() {
		if i == 2 {
			continue // the truncated-name sample is Go-only
		}
		want = r.Append(want)
	}
	if !bytes.Equal(got, want) {
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("C and Go differ first at byte %d (C %d bytes, Go %d bytes)", i, len(got), len(want))
			}
		}
		t.Fatalf("C wrote %d bytes, Go %d", len(got), len(want))
	}
}
