package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
)

// checkOptions are agent-dump's --expect, --racy-thread-counts and
// --summary.
type checkOptions struct {
	expect  map[string]int // kernel → launches the application reports (nil: not checked)
	racy    bool           // per-thread counters may lose concurrent updates
	summary string         // JSON summary path ("" none)
}

// evaluate runs the checks of one session: launch counts (with --expect),
// and in --patch mode the kernels patched and the contents of each program
// ring and array agent-dump knows how to check.
func (d *dumper) evaluate(s *dumpSession) []checkResult {
	var out []checkResult
	p := s.patch
	a := s.acct
	a.markCaptured()
	if d.checks.expect != nil {
		out = append(out, checkLaunches(a, d.checks.expect))
		if p != nil {
			out = append(out, checkPatched(p, d.checks.expect))
		}
	}
	if p == nil {
		return out
	}
	ls := a.patchedLaunches(p.patched)
	var kp *progRing
	for _, r := range p.rings {
		if r.warps {
			kp = r
		}
	}
	if kp != nil {
		st := kp.ring.Stats()
		if len(a.warpByID) > 0 && len(a.execByID) == 0 {
			out = append(out, checkWarps(a, ls, st.Dropped+st.Oversize))
		} else {
			out = append(out, checkExecs(a, ls, st.Dropped+st.Oversize))
		}
	}
	for _, r := range p.rings {
		if r.exit != nil {
			st := r.ring.Stats()
			out = append(out, checkExits(a, ls, r.name, st.Dropped+st.Oversize, kp != nil))
		}
	}
	if _, ok := p.arrays[threadRunsMap]; ok {
		out = append(out, checkThreadRuns(p, ls, d.checks.racy))
	}
	if _, ok := p.arrays[blockThreadsMap]; ok {
		out = append(out, checkBlockThreads(p, ls))
	}
	if _, ok := p.arrays[delayHistMap]; ok {
		out = append(out, checkDelayHist(p))
	}
	if a.errs > 0 || s.errors > 0 {
		out = append(out, failf("records decoded", "%d device and %d launch-ring errors; first: %s %v", a.errs, s.errors, a.firstErr, s.firstErr))
	}
	return out
}

// launchSummary is one launch in the JSON summary.
type launchSummary struct {
	launchInfo
	Threads     uint64 `json:"threads"`
	Warps       uint64 `json:"warps"`
	WarpRecords uint64 `json:"warp_records,omitempty"`
	ExecRecords uint64 `json:"exec_records,omitempty"`
	Lanes       uint64 `json:"active_lanes,omitempty"`
	StartNS     uint64 `json:"device_start_ns,omitempty"`
	EndNS       uint64 `json:"device_end_ns,omitempty"`
}

// sessionSummary is one client in the JSON summary.
type sessionSummary struct {
	PID          int32                     `json:"pid"`
	Name         string                    `json:"name"`
	Launches     map[string]int            `json:"launches_per_kernel"`
	Captured     int                       `json:"captured_launches"`
	Modules      int                       `json:"modules_patched"`
	Refused      int                       `json:"patch_refused"`
	Patched      []string                  `json:"kernels_patched"`
	Rings        map[string]map[string]any `json:"rings,omitempty"`
	ExitRecords  int                       `json:"exit_records"`
	PerLaunch    []launchSummary           `json:"per_launch"`
	PerLaunchCut int                       `json:"per_launch_left_out,omitempty"`
	Checks       []checkResult             `json:"checks"`
}

// maxSummaryLaunches bounds the per-launch list of the JSON summary.
const maxSummaryLaunches = 20000

func (d *dumper) sessionSummary(s *dumpSession, checks []checkResult) sessionSummary {
	a := s.acct
	ss := sessionSummary{PID: s.peer.PID, Name: s.peer.Hello.Name, Launches: map[string]int{}, Checks: checks,
		ExitRecords: len(a.exits)}
	for i := range a.launches {
		l := &a.launches[i]
		if l.Captured {
			ss.Captured++
		} else if l.Result == 0 {
			ss.Launches[l.Kernel]++
		}
		if len(ss.PerLaunch) == maxSummaryLaunches {
			ss.PerLaunchCut++
			continue
		}
		ls := launchSummary{launchInfo: *l, Threads: l.threads(), Warps: l.warps()}
		if st := a.warpByID[l.ID]; st != nil {
			ls.WarpRecords, ls.Lanes, ls.StartNS, ls.EndNS = st.records, st.lanes, st.start, st.end
		}
		if st := a.execByID[l.ID]; st != nil && len(st.wins) > 0 {
			ls.ExecRecords, ls.StartNS, ls.EndNS = st.records, st.wins[0].lo, st.wins[0].hi
		}
		ss.PerLaunch = append(ss.PerLaunch, ls)
	}
	if p := s.patch; p != nil {
		ss.Modules, ss.Refused = p.modules, p.refused
		for k := range p.patched {
			ss.Patched = append(ss.Patched, k)
		}
		sort.Strings(ss.Patched)
		ss.Rings = map[string]map[string]any{}
		for _, r := range p.rings {
			st := r.ring.Stats()
			ss.Rings[r.name] = map[string]any{"records": r.records, "dropped": st.Dropped + st.Oversize, "errors": r.errors}
		}
	}
	return ss
}

// report prints every session's checks and writes the JSON summary; it
// returns the number of failed checks.
func (d *dumper) report() (failed int, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.checks.expect == nil && d.patcher == nil && d.checks.summary == "" {
		return 0, nil
	}
	var all []sessionSummary
	if d.checks.expect != nil && len(d.sessions) != 1 {
		failed++
		fmt.Fprintf(d.out, "agent-dump: check clients: FAIL %d clients connected, --expect wants exactly 1\n", len(d.sessions))
	}
	for _, s := range d.sessions {
		checks := d.evaluate(s)
		for _, c := range checks {
			status := "ok"
			if !c.OK {
				status = "FAIL"
				failed++
			}
			fmt.Fprintf(d.out, "agent-dump: check %s: %s %s\n", c.Name, status, c.Detail)
		}
		all = append(all, d.sessionSummary(s, checks))
	}
	if d.checks.summary != "" {
		b, err := json.MarshalIndent(map[string]any{"sessions": all, "failed_checks": failed}, "", " ")
		if err != nil {
			return failed, fmt.Errorf("--summary: %w", err)
		}
		if err := os.WriteFile(d.checks.summary, append(b, '\n'), 0o644); err != nil {
			return failed, fmt.Errorf("--summary: %w", err)
		}
	}
	return failed, nil
}
