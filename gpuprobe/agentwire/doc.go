// Package agentwire is the schema of the agent protocol: the frames that
// the collector (package agent's server) and its clients (the shim
// libgpuprobe.so, package agent's Go client, test producers) exchange over
// the agent socket, their byte layouts, encoders and decoders, the
// protocol's constants and limits, and the memory budget (Budget) that
// bounds PATCH work. It imports no socket code, so the packages that build
// or read messages (config, patcher, sanpatch, the receiver's program
// maps) depend on the schema and not on the server. The shim's C reader
// of these layouts is shim/src/gp.h, session.c and patch.c; the shim's
// tests check the two against each other.
//
// # Frames
//
// Every message is a frame, all integers little-endian:
//
//	off size field
//	  0  u32  magic    0x41425047, the bytes "GPBA"
//	  4  u16  version  protocol version, 5 (version 1 had no descriptor
//	                   flags, version 2 a 24-byte PATCHED header, version
//	                   3 8 bytes of WELCOME settings with the SASS rate in
//	                   16 bits, version 4 a reserved last settings word;
//	                   their peers are answered with ERROR code 4)
//	  6  u16  type     1 HELLO, 2 WELCOME, 3 ERROR, 4 PATCH, 5 PATCHED,
//	                   6 NOPATCH (others reserved)
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
//	  4  u32  flags     client feature bits, passed to the owner; bit 0
//	                    (HelloReconnect): the reconnect extension follows
//	                    the name; bit 1 (HelloResource): the resource
//	                    extension follows (after the reconnect one, if
//	                    both); other bits 0
//	  8  u32  name_len  bytes of name, <= 256
//	 12  ...  name      process name, UTF-8, not NUL-terminated
//
// The reconnect extension (16 bytes after the name, only with flags bit 0)
// is sent by a client that had a session before, whose collector went
// away (the shim handshakes again with backoff):
//
//	 0  u64  lost      records the client produced that no collector read:
//	                   left unread in the old launch ring, and attempted
//	                   while disconnected
//	 8  u32  sessions  the client's sessions before this one (>= 1)
//	12  u32  reserved  0
//
// A server without the extension answers ERROR code 1; the shim then
// retries with a plain HELLO (the count goes unreported).
//
// The resource extension (only with flags bit 1) carries the
// application's own OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, read
// by the shim from its environment at its first handshake and sent as
// they are (undecoded; the collector parses them, and trusts them only
// for the process's service attributes: docs/security.md):
//
//	 0  u32  service_len  bytes of service, <= 256
//	 4  u32  attrs_len    bytes of attrs, <= 4096
//	 8  u32  omitted      bit 0: OTEL_SERVICE_NAME was longer than 256
//	                      bytes and is left out; bit 1: the same for
//	                      OTEL_RESOURCE_ATTRIBUTES (4096); other bits 0
//	12  u32  reserved     0
//	16  ...  service      OTEL_SERVICE_NAME, not NUL-terminated
//	 .  ...  attrs        OTEL_RESOURCE_ATTRIBUTES, not NUL-terminated
//
// The extension ends the payload. The shim sends it only when the
// application has either variable set and not empty (otherwise its HELLO
// is byte for byte that of a shim without it). A server without it
// answers ERROR code 1; the shim then drops it and asks again (then the
// reconnect extension, if that is refused too).
//
// WELCOME (server → client). The frame is sent with one sendmsg whose
// SCM_RIGHTS control message carries exactly count descriptors (memfds, or
// a BPF map's fd for a kernel map), in descriptor order; the client
// receives them with the frame's first bytes (recvmsg with room for 32
// descriptors) and must close any it does not use:
//
//	off size field
//	  0  u32  session   server-assigned session id
//	  4  u32  count     number of regions (and descriptors), <= 32
//	  8  ...  count descriptors of 64 bytes:
//	            0  u32  role         1 launch ring, 2 mailbox, 3 map, 4 names ring,
//	                                 5 kernel map, 6 clock; others owner-defined
//	            4  u16  kind         shm region kind (1 ring ... 5 mailbox); for
//	                                 a headerless region, its layout (2 array)
//	            6  u16  flags        bit 0: no shm header; other bits 0
//	            8  u64  region_size  bytes to mmap (the region header's, or
//	                                 for a headerless region a multiple of 4096)
//	           16  u32  id           the region header's id (headerless: 0)
//	           20  u32  reserved     0
//	           24  u8   name[40]     NUL-padded UTF-8 (e.g. the map name)
//	  8+64*count  16 bytes of settings (absent when the server asks for
//	            nothing optional):
//	            0  u32  flags        bit 0: record device windows (CUPTI kernel
//	                                 activity; record types 12 and 13);
//	                                 bit 1: the SASS route's probes (Compute
//	                                 Sanitizer); bit 2: the collector has
//	                                 programs for the route (PATCH api 3);
//	                                 bit 3: ask before probing a kernel on
//	                                 the route (PATCH api 4); other bits 0
//	            4  u32  flush_us     how often device windows and SASS
//	                                 records are handed over, in µs
//	                                 (poll_interval); 0: the client's default
//	            8  u32  device_max_per_second  with bit 1, the SASS route's
//	                                 sampling::device_max_per_second (config's
//	                                 SamplingConfig says how the route spends
//	                                 it); 0: no limit
//	           12  u32  stacks_per_second  sampling::stacks_per_second:
//	                                 launches a second of the process that
//	                                 carry their thread's stack (record
//	                                 type 15); 0: none
//
// The client maps each descriptor MAP_SHARED (region_size bytes) and checks
// its shm header (gpbr_check in shm/include/gpuprobe_shm.h) before use,
// except for a region with flags bit 0, which has no header. Before
// mapping, the shim fstat-s each descriptor: a memfd must hold at least
// region_size bytes and carry F_SEAL_SHRINK (shm regions are sealed
// SHRINK|GROW), else the region is unusable to it (a shorter file would
// SIGBUS the application); a descriptor that is no file (a BPF map's
// anonymous inode) is accepted only with flags bit 0. It also accepts a
// server only if SO_PEERCRED, read right after connect, names root or
// the uid in its GPUPROBE_SERVER_UID.
//
// Role 5, kernel map: the descriptor is the fd of a Linux
// BPF_MAP_TYPE_ARRAY created with BPF_F_MMAPABLE, which the collector's host
// programs (uprobes) use too; name is the map's name. Mapped read-write, its
// bytes [0, max_entries × round_up(value_size, 8)), rounded up to the page
// size, are the values: key k at k × round_up(value_size, 8) (Linux's
// mmapable array layout). The shim registers the mapping with
// cuMemHostRegister (DEVICEMAP | PORTABLE) so GPU programs read and write
// the values in place; if that fails, globals bound to it stay 0 (the GPU
// programs see the map as absent) and the application runs on.
//
// Role 6, clock: an shm array (kind 2) of one 8-byte value, the i64
// CLOCK_MONOTONIC − %globaltimer in ns, which the collector rewrites from
// its clock calibration; GPU programs add it to %globaltimer for
// bpf_ktime_get_ns. Bound like role 5 (no clock region, or a failed
// registration: the global stays 0 and bpf_ktime_get_ns is %globaltimer).
//
// ERROR (server → client), after which the server closes the connection:
//
//	off size field
//	  0  u32  code     1 protocol, 2 permission denied, 3 server error,
//	                   4 unsupported version, 5 too many connections (in
//	                   all or of the peer's uid)
//	  4  u32  msg_len  bytes of message, <= 1024
//	  8  ...  message  UTF-8, for logs and error messages
//
// # Patching
//
// After WELCOME the client may send PATCH frames, one at a time; the
// server answers each with PATCHED or NOPATCH (Callbacks.Patch decides;
// with no callback every answer is NOPATCH code 4). Any other frame after
// WELCOME is answered with ERROR code 1 ("frame after WELCOME") and ends
// the session. The server reads a PATCH whenever it comes and must send
// its answer within Options.PatchTimeout (default 10 s); the client bounds
// its own wait (the shim: GPUPROBE_TIMEOUT_MS) and on a timeout loads the
// original image. Answers echo the request id, so a client that gave up
// on a request skips its late answer.
//
// PATCH (client → server):
//
//	off size field
//	  0  u32  id          request id, echoed in the answer
//	  4  u32  arch        the device's SM number (90 for sm_90)
//	  8  u32  api         1 cuModuleLoadData*, 2 cuLibraryLoadData (informational);
//	                      3 the SASS route's patch module (no image; APISASS);
//	                      4 which kernels the SASS route may probe (the image:
//	                      at most 64 NUL-terminated names, inline; the
//	                      PATCHED image is empty, its kernels name those
//	                      allowed, param_index their index; APISASSKernels)
//	 12  u32  flags       bit 0: the image is in a memfd passed with the frame
//	                      (SCM_RIGHTS, exactly one descriptor, a memfd or
//	                      other shmem file: F_GET_SEALS must work); else inline
//	 16  u64  image_size  bytes of the image (<= 256 MiB)
//	 24  ...  image       inline only: image_size bytes (the frame limit applies)
//
// The image is what the application handed the driver: a fatbin
// container (the shim follows a wrapper to its container), a cubin or PTX
// text. The server picks the PTX entry of the highest architecture not
// above arch, injects the configured probes, and answers.
//
// PATCHED (server → client), sent with exactly one descriptor: a memfd
// holding image_size bytes, the patched PTX with its terminating NUL, to
// load with the same API the application called. The memfd must be sealed
// F_SEAL_WRITE|F_SEAL_SHRINK (the server adds GROW and SEAL too), so that
// what the client checked is what it loads; the shim loads the original
// image otherwise:
//
//	off size field
//	  0  u32  id          the request's id
//	  4  u32  kernels     number of kernel descriptors
//	  8  u32  globals     number of global descriptors
//	 12  u32  device_one_in  the shim keeps the launch id of one launch in N
//	                      (gp_sample_keep: a hash of the id); 0 to the
//	                      others, whose probes skip them; 0 or 1: all
//	 16  u64  image_size
//	 24  u32  device_max_per_second  sampling::device_max_per_second for the
//	                      PTX route: the shim gives a launch id to at most
//	                      N launches per second of each kernel (one at least
//	                      1/N s after the last it gave one to), after
//	                      device_one_in; 0: no limit
//	 28  u32  reserved    0
//	 32  ...  kernels descriptors, then globals descriptors
//
// Kernel descriptor (a patched kernel; its hidden launch-id parameter,
// a .u64, goes at kernelParams[param_index], the array growing by one, or
// at param_offset in a CU_LAUNCH_PARAM_BUFFER_POINTER buffer):
//
//	 0  u32  param_index
//	 4  u32  param_offset
//	 8  u32  name_len    1..4096
//	12  ...  name        the mangled kernel name
//
// Global descriptor (a module-scope .u64 to set with cuModuleGetGlobal /
// cuLibraryGetGlobal and a copy before the first launch):
//
//	 0  u32  kind        1 region: device address of WELCOME region
//	                       [region] (cuMemHostRegister DEVICEMAP, then
//	                       cuMemHostGetDevicePointer) plus value; for a
//	                       kernel map or clock region (roles 5, 6) a
//	                       failed registration gives 0 instead of
//	                       failing the module;
//	                     2 const: value;
//	                     3 ring block: the device reservation block of the
//	                       ring in WELCOME region [region]: cuMemAlloc of
//	                       size bytes, filled with init, once per region
//	                       and process, shared by every module;
//	                     4 device alloc: size bytes of zeroed device
//	                       memory private to the module; globals with the
//	                       same region number share one allocation;
//	                     5 device map: the device copy of WELCOME region
//	                       [region] plus value (shm package comment,
//	                       "Device-resident maps"): cuMemAlloc of the
//	                       region's size, filled from the host region, once
//	                       per region and process; the shim's mirror
//	                       thread copies it back every size µs
//	                       (poll_interval; 0: 10 ms);
//	                       a failed allocation gives 0, not a failed module
//	 4  u32  region      WELCOME region index (1, 3, 5) or allocation number (4)
//	 8  u64  value
//	16  u64  size        bytes to allocate (3, 4); mirror period in µs (5)
//	24  u32  name_len    1..4096
//	28  u32  init_len    <= 256 and <= size
//	32  ...  name, then init
//
// The whole description must fit one frame (64 KiB); a module whose
// description does not is answered with NOPATCH code 3.
//
// NOPATCH (server → client):
//
//	off size field
//	  0  u32  id       the request's id
//	  4  u32  code     1 no PTX for the device, 2 no kernel targeted,
//	                   3 error, 4 patching disabled
//	  8  u32  msg_len  <= 1024
//	 12  ...  message
package agentwire
