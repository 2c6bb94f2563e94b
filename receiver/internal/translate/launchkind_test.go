package translate

// The launch kinds: untimed launches by entry point, and the span
// attributes of cooperative and cluster launches.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/record"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// untimedByAPI prints the points of gpuprobe.receiver.windows.untimed as
// api=value, in order ("" when the metric is absent).
func untimedByAPI(md pmetric.Metrics) string {
	var b strings.Builder
	sm := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
	for i := range sm.Len() {
		if m := sm.At(i); m.Name() == "gpuprobe.receiver.windows.untimed" {
			for j := range m.Sum().DataPoints().Len() {
				dp := m.Sum().DataPoints().At(j)
				api, _ := dp.Attributes().Get("cuda.launch.api")
				fmt.Fprintf(&b, "%s=%d ", api.Str(), dp.IntValue())
			}
		}
	}
	return b.String()
}

// untimedWant is what untimedByAPI prints for the wanted counters want
// when the translator's are have: every entry point, once a client
// reported windows.
func untimedWant(have, want WindowCounters) string {
	if have.WindowsRead+have.WindowStates == 0 {
		return ""
	}
	var b strings.Builder
	for api, n := range want.UntimedByAPI {
		fmt.Fprintf(&b, "%s=%d ", record.LaunchAPI(api), n)
	}
	return b.String()
}

// TestLaunchKindAttributes: a cooperative launch (its own entry point, or
// cuLaunchKernelEx with the attribute) and a cluster launch say so on
// their launch span; a plain launch carries neither attribute.
func TestLaunchKindAttributes(t *testing.T) {
	const k = "_Z1kv"
	for _, tc := range []struct {
		name                 string
		api                  record.LaunchAPI
		flags                record.LaunchFlags
		cooperative, cluster any
	}{
		{"plain", record.APILaunchKernel, 0, nil, nil},
		{"cooperative entry point", record.APILaunchCooperativeKernel, 0, true, nil},
		{"Ex, cooperative attribute", record.APILaunchKernelEx, record.LaunchCooperative, true, nil},
		{"Ex, cluster dimension", record.APILaunchKernelEx, record.LaunchCluster, nil, true},
		{"Ex, both", record.APILaunchKernelEx, record.LaunchCooperative | record.LaunchCluster, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := winTr(false)
			now := time.Unix(1000, 0)
			handleAll(t, tr, now, shim(&record.KernelName{Function: 0xf, Name: k}), windowsOn,
				shim(&record.Launch{LaunchID: 9, PID: 42, TID: 43, EnqueueNS: 10_000, ReturnNS: 10_100, Stream: 7, Function: 0xf,
					Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{256, 1, 1}, Flags: tc.flags | record.LaunchUnprobed, API: tc.api}),
				shim(&record.Window{LaunchID: 9, StartNS: 10_500, EndNS: 90_800, NameHash: record.NameHash(k), Correlation: 5}))
			if expireSteps(tr, now) < 0 {
				t.Fatal("the launch was never emitted")
			}
			root := index(tr.TakeTraces()).one(t, k)
			if got := attr(root, "cuda.launch.cooperative"); got != tc.cooperative {
				t.Errorf("cuda.launch.cooperative = %v, want %v", got, tc.cooperative)
			}
			if got := attr(root, "cuda.launch.cluster"); got != tc.cluster {
				t.Errorf("cuda.launch.cluster = %v, want %v", got, tc.cluster)
			}
		})
	}
}
