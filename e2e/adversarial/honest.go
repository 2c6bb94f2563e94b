package adversarial

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"time"

	"github.com/gpuprobe/gpuprobe/e2e"
)

// Honest is one run of the honest producer (bin/gpuprobe-harness loadgen).
type Honest struct {
	Kernel    string // its kernel name, unique per run
	Launches  int    // launches it wrote
	Published int    // records it published
	Dropped   int    // records it dropped (ring full)
}

var loadgenCounts = regexp.MustCompile(`(\d+) records published, (\d+) dropped`)

// RunHonest writes launches launches of kernel at rate per second through
// the harness's load generator (gpuprobe-harness loadgen), as a CUDA application's shim would.
// Its dial is retried for 5 s: when every class runs as one uid, their
// dials can evict its connection before its HELLO (slots are per uid).
func RunHonest(ctx context.Context, harness, socket, kernel string, launches int, rate float64) (Honest, error) {
	h := Honest{Kernel: kernel, Launches: launches}
	out, err := exec.CommandContext(ctx, harness, "loadgen", "--socket", socket,
		"--launches", strconv.Itoa(launches), "--rate", strconv.FormatFloat(rate, 'f', -1, 64),
		"--kernels", kernel, "--grid", "1,1,1", "--block", "32,1,1", "--max-warps", "1",
		"--memcpy-every", "0", "--dial-retry", "5s").CombinedOutput()
	if err != nil {
		return h, fmt.Errorf("honest loadgen: %w\n%s", err, out)
	}
	m := loadgenCounts.FindSubmatch(out)
	if m == nil {
		return h, fmt.Errorf("honest loadgen: no record counts in %q", out)
	}
	h.Published, _ = strconv.Atoi(string(m[1]))
	h.Dropped, _ = strconv.Atoi(string(m[2]))
	return h, nil
}

// Accounted checks, through the collector's exporter, that every launch
// the honest client produced is accounted: exported launches plus the
// launches whose records the producer dropped equal those produced. A
// launch is 3 records (launch, warp, completion); a dropped record may
// lose its launch, so with drops the exported count may fall short by at
// most the records dropped. It waits up to timeout for the counts.
func (h Honest) Accounted(ctx context.Context, exporter string, timeout time.Duration) error {
	return e2e.Eventually(ctx, timeout, 250*time.Millisecond, func(ctx context.Context) error {
		fams, err := e2e.Scrape(ctx, exporter)
		if err != nil {
			return err
		}
		got, ok := Counter(fams, "gpu_cuda_kernel_launches", map[string]string{"cuda_kernel_name": h.Kernel})
		if !ok {
			return fmt.Errorf("no gpu_cuda_kernel_launches series for %s (produced %d launches, %d records published, %d dropped)",
				h.Kernel, h.Launches, h.Published, h.Dropped)
		}
		n := int(got)
		if n > h.Launches || n+h.Dropped < h.Launches {
			return fmt.Errorf("%s: %d launches exported + %d records dropped by the producer, want %d produced",
				h.Kernel, n, h.Dropped, h.Launches)
		}
		return nil
	})
}
