package adversarial

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestDocsStateBounds keeps docs/security.md's stated bounds equal to the
// ones the suite checks.
func TestDocsStateBounds(t *testing.T) {
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("VmRSS < %d MiB", MaxRSS>>20),
		fmt.Sprintf("baseline (+%d) within %d s", fdSlack, int(FdSettle.Seconds())),
		fmt.Sprintf("`/metrics` within %d s", int(MaxScrape.Seconds())),
		fmt.Sprintf("SIGTERM ends the collector within %d s", int(MaxShutdown.Seconds())),
	} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/security.md does not state %q", want)
		}
	}
}
