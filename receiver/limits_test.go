package receiver

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/fatbin/fatbintest"
)

// TestPatchLimitCounted: an image refused by a limit, by the patcher
// (a zstd entry claiming 1 GiB) or by the agent (PatchRefused), is
// answered NOPATCH naming the limit and counted in patch.failures.
func TestPatchLimitCounted(t *testing.T) {
	cfg := testConfig(t)
	cfg.Probes.KernelPhases = true
	tr, mr, _, _ := startBoth(t, cfg)
	defer mr.Shutdown(context.Background())
	defer tr.Shutdown(context.Background())
	r := tr.(*handle).r

	sess, err := agent.Dial(cfg.Agent.Socket, agentwire.Hello{PID: uint32(os.Getpid()), Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	bomb := fatbintest.Container(fatbintest.BombEntry{Flags: fatbintest.FlagsZstd, Arch: 80,
		Payload: fatbintest.ZstdBomb(t, 1<<20), Claim: 1 << 30})
	_, err = sess.Patch(agentwire.PatchRequest{Arch: 90, API: agentwire.APIModule, Image: bomb}, 30*time.Second)
	var np *agentwire.NoPatch
	if !errors.As(err, &np) || np.Code != agentwire.NoPatchError || !strings.Contains(np.Message, "Limits.MaxEntry") {
		t.Fatalf("bomb: %v, want NOPATCH naming Limits.MaxEntry", err)
	}
	if f := r.patch.failed.Load(); f != 1 {
		t.Fatalf("patch.failures %d after the bomb, want 1", f)
	}
	r.onPatchRefused(&agent.Peer{PID: 1}, 2, errors.New("image memfd is sparse"))
	if f := r.patch.failed.Load(); f != 2 {
		t.Fatalf("patch.failures %d after a refusal, want 2", f)
	}
}
