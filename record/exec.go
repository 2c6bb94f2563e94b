package record

// ExecSize is the size of an Exec record.
const ExecSize = 48

// Exec is one launch's device window, aggregated on the GPU by the built-in
// kernel_phases probes and written once per launch by the last block to
// finish (type 11, 48 bytes):
//
//	offset  0  prefix {u16 type = 11, u16 version = 1, u32 size = 48}
//	offset  8  u64 launch_id    the Launch it belongs to (helper 606)
//	offset 16  u64 start_ns     %globaltimer, earliest block start (thread 0 of the block at entry)
//	offset 24  u64 end_ns       %globaltimer, latest block end (read by its last warp after the block's count completes)
//	offset 32  u64 blocks       blocks that finished (the grid's block count)
//	offset 40  u64 threads      threads that passed an exit probe
//
// start_ns ≤ end_ns. The window has block granularity: a block starts when
// its thread 0 enters the kernel and ends when its last exiting warp leaves.
type Exec struct {
	LaunchID uint64
	StartNS  uint64
	EndNS    uint64
	Blocks   uint64
	Threads  uint64
}

// Decode fills e from the record in b.
func (e *Exec) Decode(b []byte) error {
	if err := check(b, TypeExec, ExecSize); err != nil {
		return err
	}
	*e = Exec{
		LaunchID: le64(b, 8),
		StartNS:  le64(b, 16),
		EndNS:    le64(b, 24),
		Blocks:   le64(b, 32),
		Threads:  le64(b, 40),
	}
	if e.Blocks == 0 {
		return &DecodeError{Type: TypeExec, Field: "blocks", Offset: 32, Reason: "must be nonzero"}
	}
	return notBefore(TypeExec, "end_ns", 24, e.EndNS, "start_ns", e.StartNS)
}

// Append appends the encoded record to b.
func (e *Exec) Append(b []byte) []byte {
	b, r := grow(b, ExecSize)
	putPrefix(r, TypeExec, ExecSize)
	put64(r, 8, e.LaunchID)
	put64(r, 16, e.StartNS)
	put64(r, 24, e.EndNS)
	put64(r, 32, e.Blocks)
	put64(r, 40, e.Threads)
	return b
}
