package receiver

import (
	"bytes"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agentwire"
	"github.com/gpuprobe/gpuprobe/gpuprobe/patcher"
	"github.com/gpuprobe/gpuprobe/shm"
)

// TestBindingsMailboxLocks: the mailbox's binding carries its lock block's
// header (slots, timeout), which the patcher sends as a ring-block global.
func TestBindingsMailboxLocks(t *testing.T) {
	mb, err := shm.CreateMailbox(8, 3*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Close()
	b, ok := bindings([]agentwire.Offer{{Role: agentwire.RoleMailbox, Name: "mailbox", Region: mb.Region()}}, nil)[patcher.MailboxBinding]
	if !ok || b.Region != 0 || !bytes.Equal(b.RingBlock, mb.LockBlock()) {
		t.Fatalf("mailbox binding %+v, %v; want region 0 and lock block header %x", b, ok, mb.LockBlock())
	}
}
