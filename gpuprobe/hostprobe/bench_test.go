package hostprobe

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// loopNs runs `app loop n` and returns the ns per call it measured.
func loopNs(b *testing.B, app string, n int) float64 {
	b.Helper()
	out, err := exec.Command(app, "loop", strconv.Itoa(n)).Output()
	if err != nil {
		b.Fatalf("%s loop %d: %v", app, n, err)
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "ns_per_call=")
	ns, err := strconv.ParseFloat(v, 64)
	if !ok || err != nil {
		b.Fatalf("%s loop: output %q is not ns_per_call=X", app, out)
	}
	return ns
}

// BenchmarkUprobeHit measures what one probed call costs the application:
// the stand-in app calls cuCtxSynchronize b.N times (at least 100000)
// without and then with the probes attached, while a reader drains the
// ring buffer as the receiver would, and ns/hit is the difference per call
// (one uprobe plus one uretprobe and one event), in the same run.
func BenchmarkUprobeHit(b *testing.B) {
	requireRoot(b)
	for _, mode := range []struct {
		name string
		opts Options
	}{{"uprobe_multi", Options{}}, {"perf_event", Options{perfLinks: true}}} {
		b.Run(mode.name, func(b *testing.B) {
			b.StopTimer()
			s := buildStandins(b)
			n := max(b.N, 100000)
			bare := loopNs(b, s.app, n)
			p, err := Load(mode.opts)
			if err != nil {
				b.Fatalf("Load: %v", err)
			}
			defer p.Close()
			if _, err := p.Attach(s.libcuda); err != nil {
				b.Fatalf("Attach: %v", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() {
				buf := make([]byte, 0, 512)
				for {
					_, err := p.Read(ctx, buf[:0])
					if errors.Is(err, context.Canceled) { // drained after cancel
						done <- nil
						return
					}
					if err != nil {
						done <- err
						return
					}
				}
			}()
			b.StartTimer()
			probed := loopNs(b, s.app, n)
			b.StopTimer()
			cancel()
			if err := <-done; err != nil {
				b.Fatalf("Read: %v", err)
			}
			st := p.Stats()
			if st.Read+st.Dropped < uint64(n) {
				b.Fatalf("%d calls but %d events read and %d dropped", n, st.Read, st.Dropped)
			}
			b.ReportMetric(probed-bare, "ns/hit")
			b.ReportMetric(bare, "ns/call-bare")
			b.ReportMetric(probed, "ns/call-probed")
			b.ReportMetric(float64(st.Dropped)/float64(n), "drops/call")
			b.Log(fmt.Sprintf("%s: %d calls: %.1f ns bare, %.1f ns probed, %d dropped", mode.name, n, bare, probed, st.Dropped))
		})
	}
}
