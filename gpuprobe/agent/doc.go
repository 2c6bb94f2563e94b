// Package agent is the collector's end of the agent socket: the unix stream
// socket that the in-application shim (libgpuprobe.so), test producers and
// the load generator connect to, to be handed the shared-memory regions
// (package shm) they write into. It also holds a Go client (Dial).
//
// # Connection
//
// The server listens on a unix stream socket at a configured path with a
// configured file mode (the socket is bound under a temporary name,
// chmod-ed, then renamed into place, so it is never reachable with looser
// permissions). On accept it reads the peer's credentials with SO_PEERCRED
// and checks them: with no allowed UIDs and no allowed GIDs configured, only
// root and the collector's own uid may connect; otherwise a peer is admitted
// when its uid is in the allowed UIDs or its primary or a supplementary gid
// (/proc/PID/status, read while the connecting process is pinned by
// SO_PEERPIDFD or its start time: proc.go) is in the allowed GIDs. A
// rejected peer is sent an ERROR frame (code 2) saying which uid/gid was
// refused, the connection is closed, and the server logs the rejection.
// After HELLO, still pinned, the server reads the peer's /proc/PID/exe,
// comm and cgroup (at most MaxCgroupRead bytes) and hands them to the
// owner with the start time (Peer.Proc): who the process is, from the
// collector's side.
//
// The handshake (HELLO from the client, then WELCOME or ERROR from the
// server) must complete within the handshake timeout (default 5 s); every
// read and write of it has that deadline, so a silent or slow client only
// ties up its own connection. After the handshake the connection stays open:
// its closing is how the server learns that the client is gone (the owner's
// Disconnect callback runs then, or at Server.Close).
//
// # Connection limits
//
// The defaults are the Default* constants (Options names each limit;
// PATCH work has its own limits, below).
// Until its HELLO a connection holds a pre-HELLO slot (MaxPending in all,
// MaxPendingPerUID per uid); when they are full the oldest pre-HELLO
// connection of the same uid (or of the uid holding the most) whose
// HELLO has not wholly arrived is closed, so silent connections cannot
// keep out a client that says HELLO at once.
// A session (after HELLO) holds a session slot (MaxConns in all,
// MaxConnsPerUID per uid: agent::max_connections_per_uid); past either,
// ERROR code 5. After WELCOME a frame's first byte may take any time, but
// its rest must follow within FrameTimeout, and it may carry at most one
// descriptor (a PATCH's memfd): more, or a frame left incomplete, is
// answered ERROR code 1 and ends the session, every received descriptor
// closed. A session silent for IdleTimeout (agent::idle_timeout) whose
// process maps none of its shm regions (/proc/PID/maps: one read, cut at
// 32 MiB, serves all the process's sessions for a second; past the cut,
// the session is ended and counted in Stats.MapsTruncated), or has
// exited, is ended. A client can thus make the server hold at most three of
// its descriptors (the connection, a pidfd of the peer, one PATCH memfd);
// the owner closes the memfds it made for a session once WELCOME is sent
// (Callbacks.Welcomed), keeping only their mappings.
//
// # Ring memory
//
// The rings the owner makes for a session stay mapped after it ends,
// until they are drained, so their memory is charged from Peer.Reserve
// until the owner releases the Lease, open or closed: Options.Rings
// bounds it node-wide (agent::max_ring_memory, 256 MiB) and per uid
// (agent::max_ring_memory_per_uid, 128 MiB). A session gets its rings at
// full size while they leave the smallest rings for the sessions the
// limits still allow and take at most half of the rest, smaller ones
// after, and ERROR code 5 when not even the smallest fit within 100 ms; closed sessions
// not yet drained beyond the session limits, or in the way of a request
// of their uid, are asked to drain early (Lease.OnEvict). rings.go.
//
// # Frames
//
// The frames and their byte layouts (HELLO, WELCOME, ERROR, PATCH,
// PATCHED, NOPATCH) are the protocol's schema, specified in package
// agentwire beside their encoders; this package sends and receives them.
//
// # Limits
//
// Every byte of a PATCH is the client's choice, so its cost to the
// collector is bounded before the work is done; a request past a limit
// is answered NOPATCH code 3 with a message that names the limit and the
// entry offset or PTX line (the application loads its original image),
// and the receiver counts it in gpuprobe.receiver.patch.failures.
//
//   - Image memfd: fstat first; refused unless a regular shmem file
//     (F_GET_SEALS works: a FUSE or network file could block the reads)
//     of at least image_size and at most MaxImage (256 MiB) bytes with as
//     many bytes allocated (holes cost the client nothing). The image's size is held
//     in a server-wide budget (Options.ImageMemory, 512 MiB) until the
//     answer is sent; no room within Options.ImageWait (2 s): NOPATCH.
//   - Decompression (package fatbin): 64 MiB inflated for the patched
//     entry, 128× at most, checked against the entry header before any
//     work; the claim is then the hard cap of a streaming decompression
//     whose buffer grows as bytes arrive.
//   - PTX (package ptxmod, patcher.Limits): 64 MiB of text, 1<<24 tokens,
//     1<<16 functions, 8192 .entry directives (counted before parsing).
//   - Patch memory (patcher.Limits.MaxMemory, agent::max_patch_memory,
//     1 GiB): a semaphore over all clients. 3× the claimed size is taken
//     before inflating, then ptxmod.Cost of the parse (320 bytes a token,
//     measured worst case), the text and 80 KiB a kernel before parsing;
//     a request that needs more than all of it, or finds no room within
//     2 s, is answered NOPATCH.
//
// Memory bound: beyond its baseline, the collector's live heap for
// patching stays under ImageMemory + MaxPatchMemory + the injection cache
// (256 MiB, patched modules and their reports) + one 64 KiB frame per
// connection (MaxConns 256 sessions + MaxPending 64 before HELLO):
// about 1.8 GiB by default, whatever the
// clients send. The per-kernel charge is measured with kernel_phases;
// programs with much larger bodies cost more per kernel. The Go runtime
// may keep up to GOGC% more as garbage: set GOMEMLIMIT to hold RSS too.
package agent
