package shm

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestGPUProducers runs on the GPU machine only: GPU threads produce into a
// ring (host memory registered with CUDA) while this process consumes. Build
// testdata/gpuproducer.cu there and point GPUPROBE_GPU_PRODUCER at it.
func TestGPUProducers(t *testing.T) {
	bin := os.Getenv("GPUPROBE_GPU_PRODUCER")
	if bin == "" {
		t.Skip("GPUPROBE_GPU_PRODUCER is not set (GPU machine only; see testdata/gpuproducer.cu)")
	}
	tests := []struct {
		name                   string
		slots                  uint32
		blocks, threads, count int
	}{
		{"roomy ring", 1 << 16, 8, 128, 32},
		{"overloaded ring", 1 << 10, 264, 128, 64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newRing(t, 80, tc.slots)
			var out bytes.Buffer
			cmd := exec.Command(bin, "3", fmt.Sprint(tc.blocks), fmt.Sprint(tc.threads), fmt.Sprint(tc.count))
			cmd.ExtraFiles = []*os.File{g.Region().File()}
			cmd.Stdout, cmd.Stderr = &out, os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			producers := tc.blocks * tc.threads
			next := make([]uint64, producers)
			var delivered uint64
			var bad error
			check := func(r Record) {
				id, seq, err := checkRecord(r.Payload)
				if err == nil && int(id) >= producers {
					err = fmt.Errorf("unknown producer %d", id)
				}
				if err == nil && seq < next[id] {
					err = fmt.Errorf("producer %d: seq %d after %d", id, seq, next[id])
				}
				if err != nil {
					if bad == nil {
						bad = fmt.Errorf("ticket %d: %w", r.Ticket, err)
					}
					return
				}
				next[id] = seq + 1
				delivered++
			}
			c := g.NewConsumer(ConsumerOptions{})
			for running := true; running; {
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("gpuproducer: %v", err)
					}
					running = false
				default:
				}
				c.Read(0, check)
			}
			for c.Position() < g.Stats().Head {
				if c.Read(0, check) == 0 && c.Position() < g.Stats().Head {
					t.Fatalf("consumer stuck at %d, head %d", c.Position(), g.Stats().Head)
				}
			}
			if bad != nil {
				t.Fatal(bad)
			}
			var pub, drop, over uint64
			if _, err := fmt.Sscan(strings.TrimSpace(out.String()), &pub, &drop, &over); err != nil {
				t.Fatalf("gpuproducer printed %q", out.String())
			}
			s := g.Stats()
			total := uint64(producers * tc.count)
			if pub+drop != total || pub != delivered || s.Dropped != drop || total != delivered+s.Dropped {
				t.Fatalf("produced %d: GPU published %d dropped %d; consumer delivered %d, ring dropped %d",
					total, pub, drop, delivered, s.Dropped)
			}
			t.Logf("%d GPU records: %d delivered, %d dropped (%d holes)", total, delivered, s.Dropped, c.Stats().Skipped)
		})
	}
}
