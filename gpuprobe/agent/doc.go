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
// when its uid is in the allowed UIDs or its gid is in the allowed GIDs. A
// rejected peer is sent an ERROR frame (code 2) saying which uid/gid was
// refused, the connection is closed, and the server logs the rejection.
//
// The handshake (HELLO from the client, then WELCOME or ERROR from the
// server) must complete within the handshake timeout (default 5 s); every
// read and write of it has that deadline, so a silent or slow client only
// ties up its own connection. After the handshake the connection stays open:
// its closing is how the server learns that the client is gone (the owner's
// Disconnect callback runs then, or at Server.Close).
//
// # Frames
//
// Every message is a frame, all integers little-endian:
//
//	off size field
//	  0  u32  magic    0x41425047, the bytes "GPBA"
//	  4  u16  version  protocol version, 1
//	  6  u16  type     1 HELLO, 2 WELCOME, 3 ERROR (others reserved)
//	  8  u32  length   payload bytes that follow (<= 65536)
//	 12  ...  payload
//
// A frame with a wrong magic, an unsupported version, an unknown type or a
// length over the limit is answered with ERROR (code 1 or 4) and the
// connection is closed.
//
// HELLO (client → server, the first frame):
//
//	off size field
//	  0  u32  pid       the client's pid (informational: the server uses
//	                    SO_PEERCRED's pid)
//	  4  u32  flags     client feature bits, passed to the owner (0 today)
//	  8  u32  name_len  bytes of name, <= 256
//	 12  ...  name      process name, UTF-8, not NUL-terminated
//
// WELCOME (server → client). The frame is sent with one sendmsg whose
// SCM_RIGHTS control message carries exactly count memfds, in descriptor
// order; the client receives them with the frame's first bytes (recvmsg with
// room for 32 descriptors) and must close any it does not use:
//
//	off size field
//	  0  u32  session   server-assigned session id
//	  4  u32  count     number of regions (and descriptors), <= 32
//	  8  ...  count descriptors of 64 bytes:
//	            0  u32  role         1 launch ring, 2 mailbox, 3 map, 4 names ring;
//	                                 others owner-defined
//	            4  u16  kind         shm region kind (1 ring ... 5 mailbox)
//	            6  u16  flags        0
//	            8  u64  region_size  bytes to mmap (the region header's)
//	           16  u32  id           the region header's id
//	           20  u32  reserved     0
//	           24  u8   name[40]     NUL-padded UTF-8 (e.g. the map name)
//
// The client maps each descriptor MAP_SHARED (region_size bytes) and checks
// its shm header (gpbr_check in shm/include/gpuprobe_shm.h) before use.
//
// ERROR (server → client), after which the server closes the connection:
//
//	off size field
//	  0  u32  code     1 protocol, 2 permission denied, 3 server error,
//	                   4 unsupported version, 5 too many connections
//	  4  u32  msg_len  bytes of message, <= 1024
//	  8  ...  message  UTF-8, for logs and error messages
package agent
