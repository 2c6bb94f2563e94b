package conformance

import (
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/verifier"
)

// Verify is the VerifyFunc of the suite: verifier.Verify with r1 pointing
// to the case's memory (ctxSize bytes) and the suite's helper 5 (unwind)
// allowed.
func Verify(p *jit.Program, ctxSize int) error {
	_, err := verifier.Verify(p, verifier.Options{CtxSize: ctxSize, Helpers: verifier.ConformanceHelpers})
	return err
}
