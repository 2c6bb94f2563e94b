package translate

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// TestFrameBounds: a kernel series has points for its first
// maxFramesPerKernel frames and its process for maxFramesPerProc; later
// frames, and unresolved ones, count under "other", while a frame that has
// its point keeps counting there.
func TestFrameBounds(t *testing.T) {
	key := func(i int) frameKey { return frameKey{"f", "m.py", i} }
	for _, tc := range []struct {
		name                string
		kernels, frames     int  // distinct frames of each of so many kernels
		unresolved          bool // one more launch of each kernel, unresolved
		wantPoints          int  // frames with a point of their own, all kernels
		wantOther, wantHeld int  // launches under "other", all kernels; frames the process holds
	}{
		{"within", 2, 3, false, 6, 0, 6},
		{"kernel bound", 1, maxFramesPerKernel + 3, false, maxFramesPerKernel, 3, maxFramesPerKernel},
		{"unresolved", 1, 2, true, 2, 1, 2},
		// The last two kernels get no point: all their launches, the
		// repeated first frame's too, count under "other".
		{"process bound", maxFramesPerProc/maxFramesPerKernel + 2, maxFramesPerKernel, false, maxFramesPerProc, 2 * (maxFramesPerKernel + 1), maxFramesPerProc},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &procSeries{}
			var all []*series
			for range tc.kernels {
				s := &series{proc: p}
				all = append(all, s)
				for i := range tc.frames {
					s.addFrame(key(i), true)
				}
				s.addFrame(key(0), true) // a frame seen before counts on its point
				if tc.unresolved {
					s.addFrame(frameKey{}, false)
				}
			}
			points, other := 0, uint64(0)
			for _, s := range all {
				points += len(s.frames.order)
				other += s.frames.other
				if len(s.frames.order) > 0 && s.frames.by[key(0)] != 2 {
					t.Errorf("first frame counted %d, want 2", s.frames.by[key(0)])
				}
			}
			if points != tc.wantPoints || other != uint64(tc.wantOther) || p.held.frames != tc.wantHeld {
				t.Errorf("points %d, other %d, held %d; want %d, %d, %d", points, other, p.held.frames, tc.wantPoints, tc.wantOther, tc.wantHeld)
			}
		})
	}
}

// pyFrame runs stacksym's frame.py under CPython 3.10 (f_lasti in the
// record as the interpreter keeps it, no layout needed) and returns its
// pid, its frame's code object and instruction and the line it reports.
func pyFrame(t *testing.T) (uint32, record.PyFrame, int) {
	t.Helper()
	home, _ := os.UserHomeDir()
	cands, _ := filepath.Glob(filepath.Join(home, ".pyenv", "versions", "3.10.*", "bin", "python3.10"))
	if p, err := exec.LookPath("python3.10"); err == nil {
		cands = append(cands, p)
	}
	var bin string
	for _, c := range cands {
		if exec.Command(c, "-c", "pass").Run() == nil {
			bin = c
			break
		}
	}
	if bin == "" {
		t.Skip("python3.10 not installed (PATH, ~/.pyenv/versions)")
	}
	script, _ := filepath.Abs("../../../stacksym/testdata/frame.py")
	cmd := exec.Command(bin, script)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the script's line: %v", err)
	}
	var code, lasti uint64
	var lineno int
	if _, err := fmt.Sscan(line, &code, &lasti, &lineno); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return uint32(cmd.Process.Pid), record.PyFrame{Code: code, Instr: lasti / 2}, lineno
}

// byFrame returns the points of the launches-by-frame metric, by
// "kernel file:line function".
func byFrame(md pmetric.Metrics) map[string]int64 {
	out := map[string]int64{}
	eachMetric(md, func(m pmetric.Metric) {
		if m.Name() != MetricLaunchesByFrame {
			return
		}
		for i := range m.Sum().DataPoints().Len() {
			dp := m.Sum().DataPoints().At(i)
			a := dp.Attributes().AsRaw()
			file, _ := a[AttrCodeFile].(string)
			if file != "" {
				file = filepath.Base(file)
			}
			out[fmt.Sprintf("%v %s:%v %v", a["cuda.kernel.name"], file, a[AttrCodeLine], a[AttrCodeFunction])] += dp.IntValue()
		}
	})
	return out
}

// TestLaunchesByFrame: launches whose stacks' top Python frame is a live
// interpreter's frame count under their kernel and that frame's name,
// file and line; one whose frame is no code object counts under "other";
// launches without a stack (every fifth) are not counted.
func TestLaunchesByFrame(t *testing.T) {
	pid, frame, line := pyFrame(t)
	tr := newTr(Options{ExpectWarps: true})
	var s stream
	s.calibrate(0)
	s.add(&record.KernelName{Function: 1, Name: "matmul", PID: pid})
	s.add(&record.KernelName{Function: 2, Name: "relu", PID: pid})
	bad := record.PyFrame{Code: frame.Code + 8, Instr: frame.Instr}
	for id := range uint64(10) {
		fn, pf := uint64(1), frame
		switch {
		case id == 7:
			fn, pf = 2, bad
		case id >= 5:
			fn = 2
		}
		if id%5 != 4 { // every fifth launch is unsampled
			s.add(&record.Stack{LaunchID: id + 1, PID: pid, TID: pid + 1, Flags: record.StackLast, PyVersion: 0x030a,
				Python: []record.PyFrame{pf}})
		}
		s.policyLaunch(id+1, fn, 10_000*(id+1), pid, 0, 1000)
	}
	feed(t, tr, &s, time.Unix(5000, 0))
	got := byFrame(tr.Metrics(time.Unix(5001, 0), nil))
	at := fmt.Sprintf("frame.py:%d step", line)
	want := map[string]int64{"matmul " + at: 4, "relu " + at: 3, "relu :<nil> other": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("launches by frame %v, want %v", got, want)
	}
}
