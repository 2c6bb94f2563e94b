package interp

import (
	"fmt"
	"io"
	"time"
)

// Env is what one GPU thread sees: its coordinates in the launch, the ids
// the special-register helpers return, the clock, map storage and where
// trace_printk and puts write.
type Env struct {
	ThreadIdx [3]uint64 // %tid.{x,y,z}
	BlockIdx  [3]uint64 // %ctaid.{x,y,z}
	BlockDim  [3]uint64 // %ntid.{x,y,z}; a zero dimension counts as 1
	GridDim   [3]uint64 // %nctaid.{x,y,z}; a zero dimension counts as 1

	LaneID uint64 // %laneid (0..31)
	WarpID uint64 // %warpid
	SMID   uint64 // %smid

	PidTgid  uint64 // get_current_pid_tgid: tgid<<32 | pid of the application
	LaunchID uint64 // get_launch_id (606)

	// Timer returns %globaltimer in ns. Nil means nanoseconds since the
	// Unix epoch from the host clock.
	Timer func() uint64

	// HostClock returns bpf_ktime_get_ns (helper 5), CLOCK_MONOTONIC in
	// ns: on the GPU, %globaltimer plus the collector's offset. Nil means
	// the Timer unchanged, as on a GPU without a clock region.
	HostClock func() uint64

	// Maps holds map contents across runs. Nil gives each Run a fresh,
	// unobservable store.
	Maps *Maps

	// Out receives trace_printk and puts output. Nil discards it.
	Out io.Writer

	// Helpers adds or overrides helpers by id (for example the
	// bpf_conformance "unwind" helper 5). They take precedence over the
	// built-in ABI.
	Helpers map[int32]HelperFunc
}

// timer is %globaltimer: Timer, or the host's Unix time in ns.
func (e *Env) timer() uint64 {
	if e.Timer != nil {
		return e.Timer()
	}
	return uint64(time.Now().UnixNano())
}

// HelperFunc implements a helper call. The returned value goes to r0; an
// error aborts the program.
type HelperFunc func(c *HelperCall) (uint64, error)

// HelperCall is one call of a HelperFunc.
type HelperCall struct {
	ID   int32     // helper id
	Args [5]uint64 // r1..r5
	// Exit, when the helper sets it, ends the program; its r0 is the
	// helper's return value.
	Exit bool

	t *thread
}

// Read returns a copy of n bytes of program memory at addr (stack, context
// or map value), or an error if the range is not readable.
func (c *HelperCall) Read(addr uint64, n int) ([]byte, error) {
	b, err := c.t.mem(addr, n, false)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), b...), nil
}

// Write copies b into program memory at addr.
func (c *HelperCall) Write(addr uint64, b []byte) error {
	dst, err := c.t.mem(addr, len(b), true)
	if err != nil {
		return err
	}
	copy(dst, b)
	return nil
}

// Lane is one lane of a warp run: its context bytes and its Env. All lanes
// of a warp share one *Maps.
type Lane struct {
	Ctx []byte
	Env *Env
}

// WarpLanes derives n lanes (1..32) from base: lane i has LaneID i and
// ThreadIdx.x = base.ThreadIdx.x + i, and every lane gets its own copy of
// ctx. base.Maps is shared (created if nil).
func WarpLanes(base *Env, ctx []byte, n int) []Lane {
	if base.Maps == nil {
		base.Maps = NewMaps()
	}
	lanes := make([]Lane, n)
	for i := range lanes {
		e := *base
		e.LaneID = base.LaneID + uint64(i)
		e.ThreadIdx[0] = base.ThreadIdx[0] + uint64(i)
		lanes[i] = Lane{Ctx: append([]byte(nil), ctx...), Env: &e}
	}
	return lanes
}

// globalThreadID is the linear id of the thread in the whole grid.
func (e *Env) globalThreadID() uint64 {
	bx, by, bz := dim1(e.BlockDim[0]), dim1(e.BlockDim[1]), dim1(e.BlockDim[2])
	inBlock := e.ThreadIdx[0] + e.ThreadIdx[1]*bx + e.ThreadIdx[2]*bx*by
	return e.blockID()*bx*by*bz + inBlock
}

// blockID is the linear block index, which per-block maps (1601) are
// keyed by.
func (e *Env) blockID() uint64 {
	gx, gy := dim1(e.GridDim[0]), dim1(e.GridDim[1])
	return e.BlockIdx[0] + e.BlockIdx[1]*gx + e.BlockIdx[2]*gx*gy
}

// dim1 is a launch dimension, a zero one counting as 1.
func dim1(v uint64) uint64 {
	if v == 0 {
		return 1
	}
	return v
}

// GlobalThreadID is the linear thread id that per-thread maps (1502) are
// keyed by: linear block index × threads per block + linear thread index.
func (e *Env) GlobalThreadID() uint64 { return e.globalThreadID() }

// GlobalWarpID is the id per-warp maps (1600) are keyed by:
// GlobalThreadID / 32.
func (e *Env) GlobalWarpID() uint64 { return e.globalThreadID() / 32 }

// GlobalBlockID is the id per-block maps (1601) are keyed by: the linear
// block index BlockIdx.x + BlockIdx.y × GridDim.x + BlockIdx.z × GridDim.x
// × GridDim.y.
func (e *Env) GlobalBlockID() uint64 { return e.blockID() }

// Error is a run-time fault of the program: an out-of-bounds access, a
// bad helper argument, a call stack overflow. It names the instruction.
type Error struct {
	Index  int    // index into Program.Insns
	Source string // the instruction's source line, if known
	Reason string
}

// Error reads like `insn 4 (line 5: ldxw %r0, [%r1+8]): read of 4 bytes ...`.
func (e *Error) Error() string {
	if e.Source != "" {
		return fmt.Sprintf("insn %d (%s): %s", e.Index, e.Source, e.Reason)
	}
	return fmt.Sprintf("insn %d: %s", e.Index, e.Reason)
}
