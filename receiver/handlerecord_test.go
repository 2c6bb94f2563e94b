package receiver

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/receiver/internal/clock"
	"github.com/gpuprobe/gpuprobe/receiver/internal/translate"
	"github.com/gpuprobe/gpuprobe/record"
	"github.com/gpuprobe/gpuprobe/shm"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestHandleRecordAllocs: handing a record to the translator allocates
// nothing of its own (the error check once allocated for every record).
func TestHandleRecordAllocs(t *testing.T) {
	tr := translate.New(translate.Options{Clock: clock.New()})
	s := &source{id: 1}
	rec := shm.Record{Payload: (&record.Completion{LaunchID: 9, CompleteNS: 1}).Append(nil)}
	now, log := time.Now(), zap.NewNop()
	handleRecord(tr, log, s, rec, now)
	if n := testing.AllocsPerRun(100, func() { handleRecord(tr, log, s, rec, now) }); n != 0 {
		t.Errorf("%v allocations per record, want 0", n)
	}
}

// TestLogInternalOnce: a bug of the translator is logged once per client;
// another error is not logged.
func TestLogInternalOnce(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	log := zap.New(core)
	s := &source{id: 3}
	logInternal(log, s, errors.New("invalid record"))
	if logs.Len() != 0 || s.internalLogged {
		t.Fatalf("an ordinary error was logged (%d entries)", logs.Len())
	}
	bug := fmt.Errorf("wrapped: %w", &translate.InternalError{Source: 3, Value: "boom", Stack: []byte("stack")})
	logInternal(log, s, bug)
	if logs.Len() != 1 || !s.internalLogged {
		t.Fatalf("%d entries after a bug, want 1", logs.Len())
	}
}
