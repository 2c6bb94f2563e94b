package hostprobe

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/gpuprobe/gpuprobe/record"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skipf("skipped: the host-probe tests load eBPF uprobes and need root (CI runs as root); euid is %d", os.Geteuid())
	}
}

func monoNow(tb testing.TB) uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		tb.Fatal(err)
	}
	return uint64(ts.Nano())
}

// wantCall is one call the stand-in app makes, with the record the probes
// must produce for it (see testdata/standin/standin_app.c).
type wantCall struct {
	api    record.HostAPI
	args   [8]uint64
	ret    int32
	thread bool // made on the app's second thread
	outer  record.HostAPI
}

const allocBase = 0xa11c00000000 // STANDIN_ALLOC_BASE
const funcBias = 0x40000000      // STANDIN_FUNC_BIAS
const streamBase = 0x5200        // STANDIN_STREAM_BASE

func launch(api record.HostAPI, fn, shmem, stream uint64) wantCall {
	h := record.HostCall{}
	h.SetDims([3]uint32{7, 3, 2}, [3]uint32{64, 6, 5})
	h.Args[0], h.Args[4], h.Args[5] = fn, shmem, stream
	return wantCall{api: api, args: h.Args}
}

// nested is a driver launch made by the runtime stand-in inside outer.
func nested(outer record.HostAPI, w wantCall) wantCall {
	w.outer = outer
	return w
}

func args(a ...uint64) (out [8]uint64) {
	copy(out[:], a)
	return out
}

func call(api record.HostAPI, ret int32, a ...uint64) wantCall {
	return wantCall{api: api, args: args(a...), ret: ret}
}

var (
	h2d = uint64(record.MemcpyHostToDevice)
	d2h = uint64(record.MemcpyDeviceToHost)
	d2d = uint64(record.MemcpyDeviceToDevice)
	h2h = uint64(record.MemcpyHostToHost)
)

// wantCalls is every HostCall one `standin_app all` produces.
var wantCalls = []wantCall{
	launch(record.HostCudaLaunchKernel, 0x1001000, 1234, 0xabc0),
	nested(record.HostCudaLaunchKernel, launch(record.HostCuLaunchKernel, 0x1001000|funcBias, 1234, 0xabc0)),
	launch(record.HostCudaLaunchKernelPtsz, 0x1002000, 1235, 0xabc1),
	nested(record.HostCudaLaunchKernelPtsz, launch(record.HostCuLaunchKernelPtsz, 0x1002000|funcBias, 1235, 0xabc1)),
	launch(record.HostCudaLaunchKernelExC, 0x1003000, 1236, 0xabc2),
	nested(record.HostCudaLaunchKernelExC, launch(record.HostCuLaunchKernelEx, 0x1003000|funcBias, 1236, 0xabc2)),
	launch(record.HostCudaLaunchKernelExCPtsz, 0x1004000, 1237, 0xabc3),
	nested(record.HostCudaLaunchKernelExCPtsz, launch(record.HostCuLaunchKernelExPtsz, 0x1004000|funcBias, 1237, 0xabc3)),
	launch(record.HostCudaLaunchCooperative, 0x1009000, 1238, 0xabc9),
	nested(record.HostCudaLaunchCooperative, launch(record.HostCuLaunchCooperativeKern, 0x1009000|funcBias, 1238, 0xabc9)),
	launch(record.HostCuLaunchKernel, 0x2005000, 1239, 0xabc5),
	launch(record.HostCuLaunchKernelPtsz, 0x2006000, 1240, 0xabc6),
	launch(record.HostCuLaunchKernelEx, 0x2007000, 1241, 0xabc7),
	launch(record.HostCuLaunchKernelExPtsz, 0x2008000, 1242, 0xabc8),
	launch(record.HostCuLaunchCooperativeKern, 0x200a000, 1243, 0xabca),

	call(record.HostCudaMemcpy, 0, 0xd020, 0x5020, 4097, h2d),
	call(record.HostCudaMemcpyPtds, 0, 0xd021, 0x5021, 4098, h2h),
	call(record.HostCudaMemcpyAsync, 0, 0xd022, 0x5022, 4099, d2h, 0xabd2),
	call(record.HostCudaMemcpyAsyncPtsz, 0, 0xd023, 0x5023, 4100, uint64(record.MemcpyUnknown), 0xabd3),
	call(record.HostCuMemcpyHtoD, 0, 0xd024, 0x5024, 4101, h2d),
	call(record.HostCuMemcpyDtoH, 700, 0xd025, 0x5025, 4102, d2h),
	call(record.HostCuMemcpyDtoD, 0, 0xd026, 0x5026, 4103, d2d),
	call(record.HostCuMemcpyHtoDAsync, 0, 0xd027, 0x5027, 4104, h2d, 0xabd7),
	call(record.HostCuMemcpyDtoHAsync, 0, 0xd028, 0x5028, 4105, d2h, 0xabd8),
	call(record.HostCuMemcpyDtoDAsync, 0, 0xd029, 0x5029, 4106, d2d, 0xabd9),
	call(record.HostCuMemcpy, 0, 0xd030, 0x5030, 4107, 0),
	call(record.HostCuMemcpyAsync, 0, 0xd031, 0x5031, 4108, 0, 0xabe1),

	call(record.HostCudaMalloc, 0, 5001, allocBase+5001),
	call(record.HostCuMemAlloc, 0, 5002, allocBase+5002),
	call(record.HostCudaMallocAsync, 0, 5003, allocBase+5003, 0, 0, 0xabf2),
	call(record.HostCuMemAllocAsync, 0, 5004, allocBase+5004, 0, 0, 0xabf3),
	call(record.HostCudaMallocHost, 0, 5005, allocBase+5005),
	call(record.HostCuMemAllocHost, 0, 5006, allocBase+5006),
	call(record.HostCudaMallocManaged, 2, 5007, 0), // fails: no pointer
	call(record.HostCuMemAllocManaged, 0, 5008, allocBase+5008),

	call(record.HostCudaFree, 0, 0xf050),
	call(record.HostCuMemFree, 0, 0xf051),
	call(record.HostCudaFreeAsync, 0, 0xf052, 0, 0, 0, 0xac02),
	call(record.HostCuMemFreeAsync, 0, 0xf053, 0, 0, 0, 0xac03),
	call(record.HostCudaFreeHost, 0, 0xf054),
	call(record.HostCuMemFreeHost, 0, 0xf055),

	call(record.HostCudaStreamSynchronize, 600, 0xac10),
	call(record.HostCudaStreamSynchronizePts, 0, 0xac11),
	call(record.HostCudaDeviceSynchronize, 0),
	call(record.HostCudaEventSynchronize, 0, 0xac13),
	call(record.HostCuStreamSynchronize, 0, 0xac14),
	{api: record.HostCuStreamSynchronizePtsz, args: args(0xac15), thread: true},
	call(record.HostCuCtxSynchronize, 0),
	call(record.HostCuEventSynchronize, -2, 0xac17), // 0xfffffffe sign-extended

	call(record.HostCudaGraphLaunch, 0, 0x6a70, 0, 0, 0, 0, 0xac20),
	call(record.HostCudaGraphLaunchPtsz, 0, 0x6a71, 0, 0, 0, 0, 0xac21),
	call(record.HostCuGraphLaunch, 0, 0x6a72, 0, 0, 0, 0, 0xac22),
	call(record.HostCuGraphLaunchPtsz, 0, 0x6a73, 0, 0, 0, 0, 0xac23),

	call(record.HostCudaStreamBeginCapture, 0, 0xca80, 1),
	call(record.HostCudaStreamBeginCapturePtsz, 0, 0xca81, 2),
	call(record.HostCudaStreamBeginCaptureToGraph, 0, 0xca82, 0x6b82),
	call(record.HostCudaStreamBeginCaptureToGraphPtsz, 0, 0xca83, 0x6b83),
	call(record.HostCudaStreamEndCapture, 0, 0xca84),
	call(record.HostCudaStreamEndCapturePtsz, 0, 0xca85),
	call(record.HostCuStreamBeginCapture, 0, 0xca86),
	call(record.HostCuStreamBeginCapturePtsz, 0, 0xca87),
	call(record.HostCuStreamBeginCaptureV2, 0, 0xca88, 2),
	call(record.HostCuStreamBeginCaptureV2Ptsz, 0, 0xca89, 0),
	call(record.HostCuStreamBeginCaptureToGraph, 0, 0xca90, 0x6b90),
	call(record.HostCuStreamBeginCaptureToGraphPtsz, 0, 0xca91, 0x6b91),
	call(record.HostCuStreamEndCapture, 0, 0xca92),
	call(record.HostCuStreamEndCapturePtsz, 900, 0xca93),

	call(record.HostCudaEventRecord, 0, 0xe100, 0x5100),
	call(record.HostCudaEventRecordPtsz, 0, 0xe101, 0x5101),
	call(record.HostCudaEventRecordWithFlags, 0, 0xe102, 0x5102, 1),
	call(record.HostCudaEventRecordWithFlagsPtsz, 0, 0xe103, 0x5103, 0),
	call(record.HostCuEventRecord, 0, 0xe104, 0x5104),
	call(record.HostCuEventRecordPtsz, 0, 0xe105, 0x5105),
	call(record.HostCuEventRecordWithFlags, 0, 0xe106, 0x5106, 1),
	call(record.HostCuEventRecordWithFlagsPtsz, 0, 0xe107, 0x5107, 1),
	call(record.HostCudaStreamWaitEvent, 0, 0x5108, 0xe108, 0),
	call(record.HostCudaStreamWaitEventPtsz, 0, 0x5109, 0xe109, 1),
	call(record.HostCuStreamWaitEvent, 0, 0x5110, 0xe110, 0),
	call(record.HostCuStreamWaitEventPtsz, 0, 0x5111, 0xe111, 1),

	// The created handle is read through the out-pointer; a priority is
	// the int32's bits, zero-extended.
	call(record.HostCudaStreamCreate, 0, streamBase+0x20), // no flags: 0
	call(record.HostCudaStreamCreateWithFlags, 0, streamBase+0x21, 1),
	call(record.HostCudaStreamCreateWithPriority, 0, streamBase+0x22, 1, 0xfffffffd), // priority -3
	call(record.HostCuStreamCreate, 0, streamBase+0x23, 1),
	call(record.HostCuStreamCreateWithPriority, 0, streamBase+0x24, 1, 0xfffffffb), // priority -5
	call(record.HostCudaStreamDestroy, 0, streamBase+0x20),
	call(record.HostCuStreamDestroy, 0, streamBase+0x23),
	call(record.HostCuStreamDestroyV2, 0, streamBase+0x24),
}

// wantNames are the KernelName records of one `standin_app all`.
var wantNames = []record.KernelName{
	{Function: 0x30d0<<8 | 1, Module: 0x30d0, Name: "_Z6vecAddPfS_S_i"},
	{Function: 0x30d1<<8 | 2, Module: 0x30d1, Name: "_Z4long" + strings.Repeat("x", nameCap-7), Truncated: true},
}

// drain reads every record the probes hold now.
func drain(tb testing.TB, p *Probes) (calls []record.HostCall, names []record.KernelName) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a done ctx drains what the ring holds, then stops
	var buf []byte
	for {
		rec, err := p.Read(ctx, buf[:0])
		if errors.Is(err, context.Canceled) {
			return calls, names
		}
		if err != nil {
			tb.Fatalf("Read: %v", err)
		}
		buf = rec
		pre, err := record.ParsePrefix(rec)
		if err != nil {
			tb.Fatal(err)
		}
		switch pre.Type {
		case record.TypeHostCall:
			var h record.HostCall
			if err := h.Decode(rec); err != nil {
				tb.Fatalf("HostCall.Decode: %v", err)
			}
			calls = append(calls, h)
		case record.TypeKernelName:
			var k record.KernelName
			if err := k.Decode(rec); err != nil {
				tb.Fatalf("KernelName.Decode: %v", err)
			}
			names = append(names, k)
		default:
			tb.Fatalf("Read returned a %s record", pre.Type)
		}
	}
}

// appRun is one finished run of the stand-in app.
type appRun struct {
	pid, threadTID uint32
	start, end     uint64 // CLOCK_MONOTONIC around the run
}

func parseSummary(tb testing.TB, out string) (pid, tid uint32) {
	tb.Helper()
	for _, l := range strings.Split(out, "\n") {
		if _, err := fmt.Sscanf(l, "pid=%d thread_tid=%d", &pid, &tid); err == nil {
			return pid, tid
		}
	}
	tb.Fatalf("no pid=… thread_tid=… line in the app's output %q", out)
	return 0, 0
}

// runApp runs `app all` to its end.
func runApp(tb testing.TB, app string) appRun {
	tb.Helper()
	r := appRun{start: monoNow(tb)}
	out, err := exec.Command(app, "all").Output()
	r.end = monoNow(tb)
	if err != nil {
		tb.Fatalf("%s all: %v", app, err)
	}
	r.pid, r.threadTID = parseSummary(tb, string(out))
	return r
}

// startWaiting starts `app wait` and returns once it has its libraries
// mapped and waits on stdin; release runs it to its end.
func startWaiting(tb testing.TB, app string) (release func() appRun) {
	tb.Helper()
	_, release = startWaitingCmd(tb, app)
	return release
}

// startWaitingCmd is startWaiting that also returns the process.
func startWaitingCmd(tb testing.TB, app string) (*exec.Cmd, func() appRun) {
	tb.Helper()
	cmd := exec.Command(app, "wait")
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	start := monoNow(tb)
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	out := bufio.NewReader(outPipe)
	if l, err := out.ReadString('\n'); err != nil || l != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		tb.Fatalf("%s wait: first line %q, %v; want \"ready\"", app, l, err)
	}
	tb.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, func() appRun {
		tb.Helper()
		if _, err := io.WriteString(in, "go\n"); err != nil {
			tb.Fatal(err)
		}
		rest, _ := io.ReadAll(out)
		if err := cmd.Wait(); err != nil {
			tb.Fatalf("%s wait: %v", app, err)
		}
		r := appRun{start: start, end: monoNow(tb)}
		r.pid, r.threadTID = parseSummary(tb, string(rest))
		return r
	}
}

// checkRun asserts that calls and names are exactly what one run produces.
func checkRun(t *testing.T, r appRun, calls []record.HostCall, names []record.KernelName) {
	t.Helper()
	checkCalls(t, r, wantCalls, calls, names)
}

// checkCalls asserts that calls are exactly the records of want and names
// those of one run.
func checkCalls(t *testing.T, r appRun, want []wantCall, calls []record.HostCall, names []record.KernelName) {
	t.Helper()
	if len(calls) != len(want) {
		t.Errorf("got %d HostCall records, want %d", len(calls), len(want))
	}
	byWant := map[int]record.HostCall{}
	for _, w := range want {
		var got []record.HostCall
		for _, c := range calls {
			if c.API == w.api && c.Args == w.args {
				got = append(got, c)
			}
		}
		if len(got) != 1 {
			var same []string
			for _, c := range calls {
				if c.API == w.api {
					same = append(same, fmt.Sprintf("%#x", c.Args))
				}
			}
			t.Errorf("%s args %#x: %d records, want exactly 1 (records of that API: %v)", w.api, w.args, len(got), same)
			continue
		}
		c := got[0]
		wantTID := r.pid
		if w.thread {
			wantTID = r.threadTID
		}
		if c.PID != r.pid || c.TID != wantTID {
			t.Errorf("%s: pid/tid %d/%d, want %d/%d", w.api, c.PID, c.TID, r.pid, wantTID)
		}
		if c.EnterNS < r.start || c.ExitNS < c.EnterNS || c.ExitNS > r.end {
			t.Errorf("%s: enter %d exit %d outside the run's CLOCK_MONOTONIC window [%d, %d] or reversed", w.api, c.EnterNS, c.ExitNS, r.start, r.end)
		}
		if c.Ret != w.ret {
			t.Errorf("%s: ret %d, want %d", w.api, c.Ret, w.ret)
		}
		if c.Flags != record.HostCallReturned {
			t.Errorf("%s: flags %#x, want %#x (returned, no faulted arguments)", w.api, c.Flags, record.HostCallReturned)
		}
		if w.outer == record.HostAPIUnknown {
			byWant[int(w.api)] = c
		}
	}
	// The runtime's launches call the driver's inside them.
	for _, w := range want {
		if w.outer == record.HostAPIUnknown {
			continue
		}
		outer, ok := byWant[int(w.outer)]
		if !ok {
			continue
		}
		for _, c := range calls {
			if c.API == w.api && c.Args == w.args && (c.EnterNS < outer.EnterNS || c.ExitNS > outer.ExitNS) {
				t.Errorf("%s [%d, %d] is not inside %s [%d, %d]", w.api, c.EnterNS, c.ExitNS, w.outer, outer.EnterNS, outer.ExitNS)
			}
		}
	}
	slices.SortFunc(names, func(a, b record.KernelName) int { return int(a.Module) - int(b.Module) })
	wantN := make([]record.KernelName, len(wantNames))
	for i, n := range wantNames {
		n.PID = r.pid
		wantN[i] = n
	}
	if !slices.Equal(names, wantN) {
		t.Errorf("KernelName records:\n got %+v\nwant %+v", names, wantN)
	}
}

func TestEveryAPIDecodes(t *testing.T) {
	requireRoot(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := buildStandins(t)
	driverSyms, runtimeSyms := splitSymbols()
	cases := []struct {
		name     string
		app      string
		attach   []string
		attached [][]string // per attached file
		before   bool       // the app is running before Attach
		opts     Options
	}{
		{"started after attach", s.app, []string{s.libcuda, s.libcudart}, [][]string{driverSyms, runtimeSyms}, false, Options{}},
		{"running before attach", s.app, []string{s.libcuda, s.libcudart}, [][]string{driverSyms, runtimeSyms}, true, Options{}},
		{"runtime linked into the executable", s.appStatic, []string{s.libcuda, s.appStatic}, [][]string{driverSyms, runtimeSyms}, false, Options{}},
		// The fallback for kernels without uprobe_multi links (before 6.6).
		{"perf-event uprobes", s.app, []string{s.libcuda, s.libcudart}, [][]string{driverSyms, runtimeSyms}, false, Options{perfLinks: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Load(tc.opts)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			defer p.Close()
			if p.multi == tc.opts.perfLinks {
				t.Fatalf("uprobe_multi links: %v, want %v (this kernel has them)", p.multi, !tc.opts.perfLinks)
			}
			var release func() appRun
			if tc.before {
				release = startWaiting(t, tc.app)
			}
			for i, f := range tc.attach {
				a, err := p.Attach(f)
				if err != nil {
					t.Fatalf("Attach(%s): %v", f, err)
				}
				if !slices.Equal(a.Attached, tc.attached[i]) {
					t.Errorf("Attach(%s).Attached = %v, want %v", f, a.Attached, tc.attached[i])
				}
				if len(a.Attached)+len(a.Missing) != len(Symbols()) || a.Stripped {
					t.Errorf("Attach(%s): %d attached + %d missing, stripped %v; want %d, not stripped", f, len(a.Attached), len(a.Missing), a.Stripped, len(Symbols()))
				}
			}
			var r appRun
			if tc.before {
				r = release()
			} else {
				r = runApp(t, tc.app)
			}
			calls, names := drain(t, p)
			checkRun(t, r, calls, names)
			if st := p.Stats(); st.Read != uint64(len(calls)+len(names)) || st.Dropped != 0 || st.DecodeErrors != 0 {
				t.Errorf("Stats = %+v, want Read %d, no drops, no decode errors", st, len(calls)+len(names))
			}
			if err := p.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if _, err := p.Read(context.Background(), nil); !errors.Is(err, ErrClosed) {
				t.Errorf("Read after Close: %v, want ErrClosed", err)
			}
		})
	}
}

// splitSymbols returns the driver symbols (libcuda's) and the runtime's, in Symbols order.
func splitSymbols() (driver, runtime []string) {
	for _, s := range Symbols() {
		if strings.HasPrefix(s, "cuda") {
			runtime = append(runtime, s)
		} else {
			driver = append(driver, s)
		}
	}
	return driver, runtime
}
