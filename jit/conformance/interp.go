package conformance

import (
	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/interp"
)

// HelperUnwind is the helper the bpf_conformance suite calls as 5 (directly
// and through callx): it returns its argument, and when the argument is 0
// it ends the program (r0 = 0).
const HelperUnwind = 5

// Helpers are the extra helpers conformance programs call, for interp.Env.
func Helpers() map[int32]interp.HelperFunc {
	return map[int32]interp.HelperFunc{
		HelperUnwind: func(c *interp.HelperCall) (uint64, error) {
			c.Exit = c.Args[0] == 0
			return c.Args[0], nil
		},
	}
}

// Interp runs cases in the reference interpreter as one thread.
type Interp struct{}

// Name is "interp".
func (Interp) Name() string { return "interp" }

// Run runs p with r1 = a copy of the case's memory and r2 = its length.
func (Interp) Run(c *Case, p *jit.Program) (uint64, error) {
	mem := append([]byte(nil), c.Mem...)
	return interp.Run(p, mem, &interp.Env{Helpers: Helpers()})
}
