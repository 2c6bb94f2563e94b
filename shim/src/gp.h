/*
 * gp.h - internal interfaces of libgpuprobe.so (the in-application shim).
 *
 * Layout of the sources:
 *   intercept.c  dlsym and cuGetProcAddress interposition, the API table and
 *                the wrapper slots
 *   wrap_load.c  module/library loads, function and kernel lookups, cuLink*
 *   wrap_launch.c launches (cuLaunchKernel*, cuLaunchCooperativeKernel*,
 *                cuGraphLaunch) and graph instantiation
 *   wrap_graph.c kernel nodes built explicitly: the hidden launch id
 *   wrap_misc.c  synchronisation and memcpy records
 *   capture.c    stream capture: captured launches write no record
 *   session.c    the agent socket handshake, the launch and names rings, fork
 *   handles.c    function handle -> kernel name table, name records
 *   image.c      classifying code images; the patching hook
 *   patch.c      PATCH/PATCHED: loading patched code
 *   patch_async.c patching off the application's threads: compile, then swap
 *   cache.c      the node's cache of compiled patched images (GPUPROBE_CACHE_DIR)
 *   sha256.c     SHA-256, for the cache's names and checks
 *   bind.c       the values of patched modules' globals (regions, allocations)
 *   pfunc.c      the patched-function table read at launch
 *   trust.c      who may serve the socket; checks of passed descriptors
 *   reconnect.c  after a collector restart: limbo, backoff, a new session
 *   mirror.c     device-resident maps (global kind 5) and their mirror thread
 *   ctxgone.c    context release and destruction: device maps' final pass
 *   calib.c      calibration records: %globaltimer against CLOCK_MONOTONIC
 *   devices.c    device records: each ordinal's GPU (UUID), per session
 *   clock.c      cheap CLOCK_MONOTONIC timestamps (TSC) for the launch path
 *   trace.c      GPUPROBE_TRACE logging and the exit summary
 *   selftime.c   GP_SELFTIME builds: the launch wrappers' own cost
 *   cupti.c      exact device windows of every kernel (CUPTI activity)
 *   sass.c       the SASS route: windows in SASS-only kernels (Compute Sanitizer)
 *   sass_ctx.c   the SASS route per context: its patch image, its record ring
 *   sass_user.c  the SASS route's user programs: the collector's module, ptxas
 *   sass_filter.c the SASS route's kernel filter: the collector says which kernels
 *   spanctx.c    the application's span context (gpuprobe_shim.h, TRACEPARENT)
 *   stack.c      the launching thread's native and Python stack, sampled
 *
 * Only dlsym, the cu* entry points and the application API of
 * ../include/gpuprobe_shim.h are exported (-fvisibility=hidden).
 */
#ifndef GPUPROBE_SHIM_GP_H
#define GPUPROBE_SHIM_GP_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "cutypes.h"
#include "gpuprobe_record.h"
#include "gpuprobe_shm.h"

#define GP_HIDDEN __attribute__((visibility("hidden")))
#define GP_EXPORT __attribute__((visibility("default")))
/* GP_HOT_VAR marks a variable that every recorded launch reads after the
 * driver call. They share one section, which the linker lays out in one
 * piece (two or three cache lines instead of one line each across .data
 * and .bss), so that fewer lines come back into L1 after the driver's own
 * work has evicted them. */
#define GP_HOT_VAR __attribute__((section("gp_hot")))
#define GP_LIKELY(x) __builtin_expect(!!(x), 1)
#define GP_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Default agent socket: config.DefaultSocket of the receiver. */
#define GP_DEFAULT_SOCKET "/run/gpuprobe/agent.sock"
/* Default bound on connect + HELLO + WELCOME, in milliseconds. */
#define GP_DEFAULT_TIMEOUT_MS 200

/*
 * The wrapped driver API. X(ID, base name, exported name 0, exported name 1,
 * per-thread-stream mask, min_ver, max_ver):
 *   - the exported names are the ABI symbols libcuda exports for this
 *     signature (bit i of the mask: name i is a _ptsz/_ptds variant);
 *   - min_ver/max_ver: the cudaVersion range of cuGetProcAddress requests
 *     for which a pointer that matches none of the exported names may still
 *     be wrapped by name (the signature never changed in that range);
 *     min_ver -1 = only a pointer that matches an exported name is wrapped.
 */
#define GP_APIS(X)                                                                              \
	X(GETPROC, "cuGetProcAddress", "cuGetProcAddress", NULL, 0, 11030, 12000)                \
	X(GETPROC2, "cuGetProcAddress", "cuGetProcAddress_v2", NULL, 0, 12000, 0)                \
	X(MOD_LOAD, "cuModuleLoad", "cuModuleLoad", NULL, 0, 0, 0)                                \
	X(MOD_LOAD_DATA, "cuModuleLoadData", "cuModuleLoadData", NULL, 0, 0, 0)                   \
	X(MOD_LOAD_DATA_EX, "cuModuleLoadDataEx", "cuModuleLoadDataEx", NULL, 0, 0, 0)            \
	X(MOD_LOAD_FATBIN, "cuModuleLoadFatBinary", "cuModuleLoadFatBinary", NULL, 0, 0, 0)       \
	X(MOD_GET_FUNCTION, "cuModuleGetFunction", "cuModuleGetFunction", NULL, 0, 0, 0)          \
	X(MOD_UNLOAD, "cuModuleUnload", "cuModuleUnload", NULL, 0, 0, 0)                          \
	X(LIB_UNLOAD, "cuLibraryUnload", "cuLibraryUnload", NULL, 0, 12000, 0)                    \
	X(LIB_LOAD_DATA, "cuLibraryLoadData", "cuLibraryLoadData", NULL, 0, 12000, 0)             \
	X(LIB_LOAD_FILE, "cuLibraryLoadFromFile", "cuLibraryLoadFromFile", NULL, 0, 12000, 0)     \
	X(LIB_GET_KERNEL, "cuLibraryGetKernel", "cuLibraryGetKernel", NULL, 0, 12000, 0)          \
	X(KERNEL_GET_FUNCTION, "cuKernelGetFunction", "cuKernelGetFunction", NULL, 0, 12000, 0)   \
	X(LINK_CREATE, "cuLinkCreate", "cuLinkCreate", "cuLinkCreate_v2", 0, 0, 0)                \
	X(LINK_ADD_DATA, "cuLinkAddData", "cuLinkAddData", "cuLinkAddData_v2", 0, 0, 0)           \
	X(LINK_ADD_FILE, "cuLinkAddFile", "cuLinkAddFile", "cuLinkAddFile_v2", 0, 0, 0)           \
	X(LINK_COMPLETE, "cuLinkComplete", "cuLinkComplete", NULL, 0, 0, 0)                       \
	X(LAUNCH, "cuLaunchKernel", "cuLaunchKernel", "cuLaunchKernel_ptsz", 2, 0, 0)             \
	X(LAUNCH_EX, "cuLaunchKernelEx", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz", 2, 11060, 0) \
	X(LAUNCH_COOP, "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel",                  \
	  "cuLaunchCooperativeKernel_ptsz", 2, 0, 0)                                               \
	X(GRAPH_LAUNCH, "cuGraphLaunch", "cuGraphLaunch", "cuGraphLaunch_ptsz", 2, 0, 0)          \
	X(GRAPH_INST_FLAGS, "cuGraphInstantiateWithFlags", "cuGraphInstantiateWithFlags", NULL,   \
	  0, 11040, 0)                                                                             \
	X(GRAPH_INST_PARAMS, "cuGraphInstantiateWithParams", "cuGraphInstantiateWithParams",      \
	  "cuGraphInstantiateWithParams_ptsz", 2, 12000, 0)                                        \
	X(GRAPH_INST_V2, "cuGraphInstantiate", "cuGraphInstantiate", "cuGraphInstantiate_v2", 0,  \
	  -1, 0)                                                                                   \
	X(GRAPH_ADD_KNODE, "cuGraphAddKernelNode", "cuGraphAddKernelNode", NULL, 0, 10000, 12000) \
	X(GRAPH_ADD_KNODE2, "cuGraphAddKernelNode", "cuGraphAddKernelNode_v2", NULL, 0, 12000, 0) \
	X(GRAPH_KNODE_SET, "cuGraphKernelNodeSetParams", "cuGraphKernelNodeSetParams", NULL, 0,   \
	  10000, 12000)                                                                            \
	X(GRAPH_KNODE_SET2, "cuGraphKernelNodeSetParams", "cuGraphKernelNodeSetParams_v2", NULL,  \
	  0, 12000, 0)                                                                             \
	X(GRAPH_EXEC_KNODE_SET, "cuGraphExecKernelNodeSetParams",                                 \
	  "cuGraphExecKernelNodeSetParams", NULL, 0, 10010, 12000)                                 \
	X(GRAPH_EXEC_KNODE_SET2, "cuGraphExecKernelNodeSetParams",                                \
	  "cuGraphExecKernelNodeSetParams_v2", NULL, 0, 12000, 0)                                  \
	X(GRAPH_ADD_NODE, "cuGraphAddNode", "cuGraphAddNode", NULL, 0, 12020, 12030)              \
	X(GRAPH_ADD_NODE2, "cuGraphAddNode", "cuGraphAddNode_v2", NULL, 0, 12030, 0)              \
	X(GRAPH_NODE_SET, "cuGraphNodeSetParams", "cuGraphNodeSetParams", NULL, 0, 12020, 0)     \
	X(GRAPH_EXEC_NODE_SET, "cuGraphExecNodeSetParams", "cuGraphExecNodeSetParams", NULL, 0,   \
	  12020, 0)                                                                                \
	X(CAPTURE_BEGIN, "cuStreamBeginCapture", "cuStreamBeginCapture_v2",                       \
	  "cuStreamBeginCapture_v2_ptsz", 2, 10010, 0)                                             \
	X(CAPTURE_BEGIN1, "cuStreamBeginCapture", "cuStreamBeginCapture",                         \
	  "cuStreamBeginCapture_ptsz", 2, 10000, 10010)                                            \
	X(CAPTURE_TO_GRAPH, "cuStreamBeginCaptureToGraph", "cuStreamBeginCaptureToGraph",         \
	  "cuStreamBeginCaptureToGraph_ptsz", 2, 12030, 0)                                         \
	X(CAPTURE_END, "cuStreamEndCapture", "cuStreamEndCapture", "cuStreamEndCapture_ptsz", 2,  \
	  10000, 0)                                                                                \
	X(STREAM_SYNC, "cuStreamSynchronize", "cuStreamSynchronize", "cuStreamSynchronize_ptsz",  \
	  2, 0, 0)                                                                                 \
	X(CTX_SYNC, "cuCtxSynchronize", "cuCtxSynchronize", NULL, 0, -1, 0)                       \
	X(MEMCPY, "cuMemcpy", "cuMemcpy", "cuMemcpy_ptds", 2, 4000, 0)                            \
	X(MEMCPY_ASYNC, "cuMemcpyAsync", "cuMemcpyAsync", "cuMemcpyAsync_ptsz", 2, 4000, 0)       \
	X(MEMCPY_HTOD, "cuMemcpyHtoD", "cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds", 2, 3020, 0)     \
	X(MEMCPY_DTOH, "cuMemcpyDtoH", "cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds", 2, 3020, 0)     \
	X(MEMCPY_DTOD, "cuMemcpyDtoD", "cuMemcpyDtoD_v2", "cuMemcpyDtoD_v2_ptds", 2, 3020, 0)     \
	X(MEMCPY_HTOD_ASYNC, "cuMemcpyHtoDAsync", "cuMemcpyHtoDAsync_v2",                         \
	  "cuMemcpyHtoDAsync_v2_ptsz", 2, 3020, 0)                                                 \
	X(MEMCPY_DTOH_ASYNC, "cuMemcpyDtoHAsync", "cuMemcpyDtoHAsync_v2",                         \
	  "cuMemcpyDtoHAsync_v2_ptsz", 2, 3020, 0)                                                 \
	X(PRIMARY_RELEASE, "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease",              \
	  "cuDevicePrimaryCtxRelease_v2", 0, 7000, 0)                                              \
	X(PRIMARY_RESET, "cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxReset",                    \
	  "cuDevicePrimaryCtxReset_v2", 0, 7000, 0)                                                \
	X(CTX_DESTROY, "cuCtxDestroy", "cuCtxDestroy", "cuCtxDestroy_v2", 0, 3020, 0)

enum gp_api_id {
#define GP_X_ENUM(ID, ...) GP_FN_##ID,
	GP_APIS(GP_X_ENUM)
#undef GP_X_ENUM
	GP_FN_COUNT
};

/* Slots per API: GP_XSLOTS for the exported symbols (index = name index),
 * then GP_NDYN for pointers handed out by dlsym/cuGetProcAddress. */
#define GP_XSLOTS 2
#define GP_NDYN 4
#define GP_NSLOTS (GP_XSLOTS + GP_NDYN)

/* One wrapper's state: the real entry point it calls. */
struct gp_slot {
	void *real;      /* the driver's function (atomic; set once) */
	uint32_t claim;  /* dynamic slots: 1 once taken */
	uint16_t api;    /* enum gp_api_id */
	uint8_t ptsz;    /* a per-thread-default-stream variant */
	uint8_t called;  /* the first call was traced */
};

struct gp_api {
	const char *base;
	const char *names[GP_XSLOTS];
	unsigned ptsz_mask;
	int min_ver, max_ver;
	struct gp_slot *slots;   /* GP_NSLOTS */
	void *const *wrappers;   /* GP_NDYN, for slots GP_XSLOTS.. */
};

#define GP_X_DECL(ID, ...)                                  \
	extern GP_HIDDEN struct gp_slot gp_slots_##ID[GP_NSLOTS]; \
	extern GP_HIDDEN void *const gp_wrappers_##ID[GP_NDYN];
GP_APIS(GP_X_DECL)
#undef GP_X_DECL

extern GP_HIDDEN const struct gp_api gp_apis[GP_FN_COUNT];

/* Defines the slots of an API and its GP_NDYN dynamic wrappers; needs
 * GP_P_<ID> (parameter list), GP_A_<ID> (argument list) and
 * gp_i_<ID>(struct gp_slot *, params) defined before. */
#define GP_DYN_WRAPPER(ID, i)                                 \
	static CUresult gp_w_##ID##_##i(GP_P_##ID)            \
	{                                                      \
		return gp_i_##ID(&gp_slots_##ID[GP_XSLOTS + i], GP_A_##ID); \
	}
#define GP_DEFINE_API(ID)                                                          \
	GP_HIDDEN struct gp_slot gp_slots_##ID[GP_NSLOTS] = {                      \
		[0 ... GP_NSLOTS - 1] = {.api = GP_FN_##ID}};                     \
	GP_DYN_WRAPPER(ID, 0)                                                      \
	GP_DYN_WRAPPER(ID, 1)                                                      \
	GP_DYN_WRAPPER(ID, 2)                                                      \
	GP_DYN_WRAPPER(ID, 3)                                                      \
	GP_HIDDEN void *const gp_wrappers_##ID[GP_NDYN] = {                        \
		(void *)gp_w_##ID##_0, (void *)gp_w_##ID##_1, (void *)gp_w_##ID##_2, \
		(void *)gp_w_##ID##_3};
/* Exports NAME (exported name index i of ID) for apps linked with -lcuda. */
#define GP_EXPORT_AS(ID, i, NAME)                              \
	GP_EXPORT CUresult NAME(GP_P_##ID);                    \
	GP_EXPORT CUresult NAME(GP_P_##ID)                     \
	{                                                       \
		return gp_i_##ID(&gp_slots_##ID[i], GP_A_##ID); \
	}

/* intercept.c */
GP_HIDDEN void *gp_resolve_export(struct gp_slot *s);
GP_HIDDEN void gp_first_call(struct gp_slot *s);
GP_HIDDEN void *gp_real_dlsym(void *handle, const char *name);
GP_HIDDEN void *gp_libcuda(void);
GP_HIDDEN void *gp_cuda_sym(const char *name);
GP_HIDDEN void *gp_cuda_sym_once(void **slot, int *looked, const char *name);

/* gp_real returns the function a slot forwards to (NULL: none). It also
 * traces the slot's first call. */
static inline void *gp_real(struct gp_slot *s)
{
	void *p = __atomic_load_n(&s->real, __ATOMIC_ACQUIRE);
	if (GP_UNLIKELY(!s->called))
		gp_first_call(s);
	if (GP_UNLIKELY(p == NULL))
		p = gp_resolve_export(s);
	return p;
}

/* GP_REAL(ID, slot): the slot's real function, typed. */
#define GP_REAL(ID, s) ((CUresult(*)(GP_P_##ID))gp_real(s))

/* GP_FORWARD_OR_FAIL: a wrapper with nothing to call fails like a missing
 * driver symbol. */
#define GP_FORWARD_OR_FAIL(fn)                                           \
	do {                                                             \
		if ((fn) == NULL)                                        \
			return CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND; \
	} while (0)

/* session.c */
#define GP_MAX_REGIONS 32u
/* Agent protocol version (gpuprobe/agentwire, doc.go); 2 added descriptor
 * flags (bit 0: the region has no shm header), 3 PATCHED's
 * device_max_per_second (a 32-byte header), 4 the WELCOME's 16-byte
 * settings (GP_SETTINGS_SIZE). */
#define GP_PROTO 5u
#define GP_DESC_NOHEADER 1u
/* Region roles the shim treats specially. A kernel map (a BPF_F_MMAPABLE
 * BPF array's fd, no header) and the clock region are optional: if they
 * cannot be registered, globals bound to them stay 0 and the module loads
 * anyway (the GPU programs see the map as absent, ktime as %globaltimer). */
#define GP_ROLE_LAUNCH_RING 1u
/* GP_ROLE_NAME_RING (4, gpuprobe_record.h): kernel_name records. */
#define GP_ROLE_KERNEL_MAP 5u
#define GP_ROLE_CLOCK 6u
/* A WELCOME region: its descriptor, kept for patched modules' globals. */
struct gp_region {
	int fd;         /* -1 once dropped */
	uint32_t role;  /* GP_ROLE_* or owner-defined */
	uint16_t kind;  /* shm region kind */
	uint16_t flags; /* descriptor flags (GP_DESC_NOHEADER) */
	uint64_t size;  /* bytes */
	void *host;     /* mapping, once bound (patch.c) */
	uint64_t dev;   /* device address of host, once registered */
	uint64_t block; /* ring-block device allocation, once made */
	uint64_t block_size;
	int failed;     /* mapping or registration failed: not retried */
	int unbound;    /* an optional region's failure was logged and counted */
};
extern GP_HIDDEN struct gp_region gp_regions[GP_MAX_REGIONS];
extern GP_HIDDEN uint32_t gp_nregions;
extern GP_HIDDEN int gp_timeout_ms;
/* GPUPROBE_PATCH=1: ask the collector to patch loaded images. Off by
 * default: a patched kernel launched without its hidden launch-id parameter
 * (by a path the shim does not wrap) would read past its parameters. */
extern GP_HIDDEN int gp_patch_enabled;
GP_HIDDEN int gp_agent_exchange(const uint8_t *frame, size_t n, int sendfd, uint32_t id, uint32_t *type,
				uint8_t **payload, uint32_t *plen, int *recvfd);
extern GP_HIDDEN void *gp_ring_base; /* the launch ring, or NULL */
extern GP_HIDDEN size_t gp_ring_size; /* bytes mapped there */
extern GP_HIDDEN uint32_t gp_gen;    /* session generation (bumped per handshake) */
/* The rings of session generation g are gp_rings[g & 1], written before
 * gp_gen moves to g (release), so that a thread that read g (acquire)
 * writes g's name records into g's rings (handles.c). Only two: sessions
 * are at least 100 ms apart (reconnect.c's backoff). */
struct gp_rings {
	void *launch; /* the launch ring */
	void *names;  /* the names ring (GP_ROLE_NAME_RING), or NULL */
};
extern GP_HIDDEN struct gp_rings gp_rings[2];
GP_HIDDEN void gp_connect(void);
GP_HIDDEN uint32_t gp_device(void);
/* HELLO flags bit 0: a reconnect; lost records and earlier sessions follow
 * the name (doc.go). */
#define GP_HELLO_RECONNECT 1u
/* HELLO flags bit 1: the application's OTEL_SERVICE_NAME and
 * OTEL_RESOURCE_ATTRIBUTES follow (doc.go, the resource extension), at most
 * GP_MAX_SERVICE and GP_MAX_RES_ATTRS bytes; a longer one is left out and
 * flagged (GP_RES_OMIT_*). gp_res_ext: this process sends it (cleared when
 * a collector refuses it). */
#define GP_HELLO_RESOURCE 2u
#define GP_MAX_SERVICE 256u
#define GP_MAX_RES_ATTRS 4096u
#define GP_RES_OMIT_SERVICE 1u
#define GP_RES_OMIT_ATTRS 2u
extern GP_HIDDEN int gp_res_ext;
/* An ERROR frame's code 1: the collector did not understand the HELLO. */
#define GP_ERROR_PROTOCOL 1u
/* A handshake's result before it becomes the session (gp_install). */
struct gp_conn {
	int fd;
	uint32_t refused; /* an ERROR frame's code */
	void *ring;
	size_t ring_size;
	void *names; /* the names ring, or NULL */
	size_t names_size;
	uint32_t nregions;
	struct gp_region regions[GP_MAX_REGIONS];
	/* The WELCOME's settings, all 0 when it has none: flags (GP_SET_*),
	 * flush_us (how often windows and SASS records are handed over, in
	 * µs; 0: the shim's default), max_rate (sampling::
	 * device_max_per_second for the SASS route; 0: no limit) and
	 * stack_rate (sampling::stacks_per_second; 0: no stacks). */
	uint32_t settings, flush_us, max_rate, stack_rate;
};
#define GP_SETTINGS_SIZE 16u /* u32 flags, u32 flush_us, u32 device_max_per_second, u32 stacks_per_second */
#define GP_SET_WINDOWS 1u /* record device windows (cupti.c) */
#define GP_SET_SASS 2u    /* SASS-route probes (sass.c) */
#define GP_SET_SASS_PROGRAMS 4u /* the collector has GPU programs for the SASS route (sass_user.c) */
#define GP_SET_SASS_FILTER 8u   /* the collector filters the SASS route's kernels (sass_filter.c) */
#define GP_SET_GRAPH_WHOLE 16u  /* time graph launches whole (cupti.c) */
GP_HIDDEN int gp_handshake(const char *path, int timeout_ms, int ext, uint64_t lost, uint32_t sessions,
			   struct gp_conn *c, const char **why);
GP_HIDDEN void gp_install(struct gp_conn *c);
/* devices.c: a Device record per device into the session's ring. */
GP_HIDDEN void gp_devices_announce(void *ring);
GP_HIDDEN uint64_t gp_session_lost(void);
GP_HIDDEN uint64_t gp_limbo_dropped(void);
/* patch.c's lock: PATCH exchanges and the region table; the session is
 * replaced under it. */
extern GP_HIDDEN pthread_mutex_t gp_patch_mu;

/* trust.c: who may serve the socket (root, GPUPROBE_SERVER_UID) and what a
 * passed descriptor must be. */
GP_HIDDEN void gp_trust_init(void);
GP_HIDDEN int gp_trust_path(const char *path, const char **why);
GP_HIDDEN int gp_trust_peer(int fd, const char **why);
GP_HIDDEN int gp_fd_check(int fd, uint64_t need, int seals, int anon, const char **why);

/* reconnect.c: the thread that notices a lost collector and handshakes
 * again with backoff; gp_reconnects counts the sessions after the first. */
GP_HIDDEN void gp_reconnect_start(const char *path, int fd);
GP_HIDDEN void gp_reconnect_forked(void);
extern GP_HIDDEN uint32_t gp_reconnects;

/* wrap_launch.c: gp_ring_prefault faults the new session's ring in;
 * gp_rec_device is gp_device without a driver call when the process sees
 * one device. */
GP_HIDDEN void gp_ring_prefault(void);
GP_HIDDEN uint32_t gp_device_slow(void);
extern GP_HIDDEN int gp_ndev;
static inline uint32_t gp_rec_device(void)
{
	return GP_LIKELY(__atomic_load_n(&gp_ndev, __ATOMIC_RELAXED) == 1) ? 0 : gp_device_slow();
}

/* capture.c: gp_captures counts the streams in a stream capture (begun
 * and not ended); while it is not 0, a launch asks the driver whether its
 * stream captures (gp_captured_slow): a captured launch does not run, so it
 * writes no launch record (its graph's cuGraphLaunch does). */
extern GP_HIDDEN uint32_t gp_captures;
GP_HIDDEN int gp_captured_slow(uint64_t stream);
static inline int gp_captured(uint64_t stream)
{
	return GP_UNLIKELY(__atomic_load_n(&gp_captures, __ATOMIC_RELAXED) != 0) && gp_captured_slow(stream);
}

/* gp_stream is the stream a call names: the per-thread default stream's
 * handle for stream 0 in a _ptsz variant. */
static inline uint64_t gp_stream(const struct gp_slot *s, CUstream st)
{
	uint64_t v = (uint64_t)st;
	return v == 0 && s->ptsz ? GP_CU_STREAM_PER_THREAD : v;
}

extern GP_HIDDEN int gp_state;
enum { GP_IDLE = 0, GP_CONNECTING = 1, GP_READY = 2, GP_OFF = 3 };

/*
 * Self-timing build (selftime.c): -DGP_SELFTIME=1 builds
 * bin/libgpuprobe-selftime.so, whose launch wrappers time their own
 * instructions with the TSC (rdtscp) at entry, just before the forwarded
 * driver call, just after it and at exit, into per-thread counters, and
 * print one "gpuprobe selftime:" line at process exit. With GP_SELFTIME 0
 * (the default, every production build) none of it exists.
 */
#ifndef GP_SELFTIME
#define GP_SELFTIME 0
#endif
#if GP_SELFTIME
#if !defined(__x86_64__)
#error "GP_SELFTIME needs x86-64 (rdtsc)"
#endif
/* One thread's launch timings. Written only by its thread (relaxed atomic
 * stores: plain moves on x86-64), read by the exit summary. */
struct gp_st_thread {
	uint64_t launches;     /* launch wrapper calls that reached the driver */
	uint64_t pre, post;    /* ticks: entry to before the call, after it to exit */
	uint64_t forwarded;    /* timed launches with no session (forward only) */
	uint64_t handshakes;   /* launches that ran the handshake: not timed */
	uint64_t slow;         /* launches through gp_patch_args_slow */
	uint64_t stacks;       /* launch stacks taken (gp_stack_take calls) */
	uint64_t stack_ticks;  /* ticks in them (part of post) */
	uint64_t handshake_at; /* TSC when this thread last began a handshake */
	struct gp_st_thread *next; /* registry of live threads (selftime.c) */
	int registered;
};
extern GP_HIDDEN __thread struct gp_st_thread gp_st __attribute__((tls_model("initial-exec")));
extern GP_HIDDEN int gp_st_rdtscp; /* the CPU has rdtscp (set at load) */
GP_HIDDEN void gp_st_register(void);

/* gp_st_now reads the TSC once every earlier instruction has executed and
 * its loads are done (rdtscp; "lfence; rdtsc" on a CPU without it), so an
 * interval between two reads ends when the work in it has completed: see
 * selftime.c for why no fence follows the read. */
static inline uint64_t gp_st_now(void)
{
	uint32_t lo, hi;
	if (GP_LIKELY(gp_st_rdtscp))
		__asm__ __volatile__("rdtscp" : "=a"(lo), "=d"(hi) : : "rcx", "memory");
	else
		__asm__ __volatile__("lfence\n\trdtsc" : "=a"(lo), "=d"(hi) : : "memory");
	return (uint64_t)hi << 32 | lo;
}

#define GP_ST_ADD(field, v) __atomic_store_n(&gp_st.field, gp_st.field + (v), __ATOMIC_RELAXED)

/* gp_st_done accounts one launch: its stamps at entry, before the call,
 * after it and at exit; recorded is 0 for a forward-only launch. A launch
 * that ran the handshake (milliseconds, once per process) is counted but
 * not timed. Called after the exit stamp: not part of what is timed. */
static inline void gp_st_done(uint64_t entry, uint64_t call, uint64_t ret, uint64_t exit, int recorded)
{
	if (GP_UNLIKELY(!gp_st.registered))
		gp_st_register();
	GP_ST_ADD(launches, 1);
	if (GP_UNLIKELY(gp_st.handshake_at >= entry)) {
		GP_ST_ADD(handshakes, 1);
		return;
	}
	GP_ST_ADD(pre, call - entry);
	GP_ST_ADD(post, exit - ret);
	if (!recorded)
		GP_ST_ADD(forwarded, 1);
}
#endif

/* gp_session returns the launch ring, starting the handshake at the first
 * call of the process (or of a fork child); NULL: record nothing. */
static inline void *gp_session(void)
{
	void *r = __atomic_load_n(&gp_ring_base, __ATOMIC_ACQUIRE);
	if (GP_LIKELY(r != NULL))
		return r;
	if (__atomic_load_n(&gp_state, __ATOMIC_RELAXED) == GP_IDLE) {
#if GP_SELFTIME
		__atomic_store_n(&gp_st.handshake_at, gp_st_now(), __ATOMIC_RELAXED);
#endif
		gp_connect();
		gp_ring_prefault();
	}
	return __atomic_load_n(&gp_ring_base, __ATOMIC_ACQUIRE);
}

/* Per-thread state (session.c): kept tiny (static TLS, initial-exec). */
struct gp_thread {
	uint32_t tid;
	uint32_t corr;    /* CUPTI's correlation id of the thread's last launch call, once filed (cupti.c) */
	uint64_t pending; /* the launch id of the launch call in progress, for cupti.c's and sass.c's callbacks */
	uint8_t in_graph; /* a cuGraphLaunch is in progress (sass.c samples no graph node) */
	uint8_t sass;     /* sass.c sampled the launch call in progress */
	uint64_t next_id, end_id;
};
extern GP_HIDDEN __thread struct gp_thread gp_self __attribute__((tls_model("initial-exec")));
extern GP_HIDDEN uint32_t gp_pid_cache;
GP_HIDDEN uint32_t gp_pid_slow(void);
GP_HIDDEN uint32_t gp_tid_slow(void);
GP_HIDDEN uint64_t gp_next_launch_id_slow(void);

/* gp_pid: the process id (cached; the cache is reset in a fork child). */
static inline uint32_t gp_pid(void)
{
	uint32_t p = __atomic_load_n(&gp_pid_cache, __ATOMIC_RELAXED);
	return GP_LIKELY(p != 0) ? p : gp_pid_slow();
}

/* gp_tid: the calling thread's id (cached per thread). */
static inline uint32_t gp_tid(void)
{
	return GP_LIKELY(gp_self.tid != 0) ? gp_self.tid : gp_tid_slow();
}

/* gp_next_launch_id hands out process-unique ids from per-thread blocks, so
 * threads touch the shared counter once per block. */
static inline uint64_t gp_next_launch_id(void)
{
	if (GP_LIKELY(gp_self.next_id != gp_self.end_id))
		return gp_self.next_id++;
	return gp_next_launch_id_slow();
}

static inline uint64_t gp_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* clock.c: TSC timestamps converted to CLOCK_MONOTONIC (see clock.c). */
struct gp_cal {
	uint64_t mono, tsc; /* anchor */
	uint64_t mult;      /* ns per tick, 32.32 fixed point */
	uint64_t recal;     /* ticks after which to refit (about 1 s) */
};
extern GP_HIDDEN int gp_tsc_on;      /* timestamps come from the TSC */
extern GP_HIDDEN int gp_tsc_pending; /* the TSC is usable, not fitted yet */
extern GP_HIDDEN struct gp_cal gp_cals[2];
extern GP_HIDDEN uint32_t gp_cal_cur;
GP_HIDDEN void gp_recalibrate(void);

/* A pair of launch-path timestamps: gp_stamp_begin before the call,
 * gp_stamp_end after it, both as CLOCK_MONOTONIC ns. */
struct gp_stamp {
	uint64_t t0, t1;
	int tsc;
};
static inline void gp_stamp_begin(struct gp_stamp *s)
{
#if defined(__x86_64__)
	s->tsc = __atomic_load_n(&gp_tsc_on, __ATOMIC_ACQUIRE);
	if (GP_LIKELY(s->tsc)) {
		s->t0 = __builtin_ia32_rdtsc();
		return;
	}
#else
	s->tsc = 0;
#endif
	s->t0 = gp_now();
}
static inline void gp_stamp_end(struct gp_stamp *s)
{
#if defined(__x86_64__)
	if (GP_LIKELY(s->tsc)) {
		uint64_t c = __builtin_ia32_rdtsc();
		const struct gp_cal *k = &gp_cals[__atomic_load_n(&gp_cal_cur, __ATOMIC_ACQUIRE)];
		uint64_t d0 = s->t0 - k->tsc, d1 = c - k->tsc;
		if (GP_UNLIKELY(s->t0 < k->tsc || d1 > k->recal)) {
			/* Before this anchor (another thread refitted) or due. */
			gp_recalibrate();
			s->t1 = gp_now();
			s->t0 = s->t1 - (uint64_t)(((unsigned __int128)(c - s->t0) * k->mult) >> 32);
			return;
		}
		s->t0 = k->mono + (uint64_t)(((unsigned __int128)d0 * k->mult) >> 32);
		s->t1 = k->mono + (uint64_t)(((unsigned __int128)d1 * k->mult) >> 32);
		return;
	}
#endif
	s->t1 = gp_now();
	if (GP_UNLIKELY(gp_tsc_pending))
		gp_recalibrate(); /* the first fit, 5 ms or more after load */
}

/* handles.c */
GP_HIDDEN void gp_name_set(uint64_t handle, uint64_t module, const char *name);
GP_HIDDEN int gp_name_copy(uint64_t from, uint64_t to);
GP_HIDDEN void gp_name_emit(uint64_t function);
/* A thread's handles whose name record is in this session's ring, direct-
 * mapped by handle, so that a launch of one does not read the shared
 * table: its 1.5 MiB hold one random line per handle, which the driver's
 * own work tends to evict between two launches. gp_names_epoch moves when
 * any handle is (re)named, which empties every thread's cache. */
struct gp_seen {
	uint64_t f;
	uint32_t gen, epoch;
};
#define GP_SEEN 16
extern GP_HIDDEN __thread struct gp_seen gp_seen[GP_SEEN] __attribute__((tls_model("initial-exec")));
extern GP_HIDDEN uint32_t gp_names_epoch;
static inline struct gp_seen *gp_seen_slot(uint64_t f)
{
	return &gp_seen[(f * 0x9E3779B97F4A7C15ull) >> 60];
}
/* gp_name_emit_fast: gp_name_emit, unless this thread saw f's whole name
 * record go into this session's rings since f was last named. */
static inline void gp_name_emit_fast(uint64_t f)
{
	const struct gp_seen *s = gp_seen_slot(f);
	if (GP_LIKELY(s->f == f && s->gen == __atomic_load_n(&gp_gen, __ATOMIC_ACQUIRE) &&
		      s->epoch == __atomic_load_n(&gp_names_epoch, __ATOMIC_ACQUIRE)))
		return;
	gp_name_emit(f);
}
GP_HIDDEN const char *gp_name_of(uint64_t handle);

/* image.c */
enum gp_image_kind {
	GP_IMG_UNKNOWN = 0,
	GP_IMG_FATBIN_WRAPPER = 1,
	GP_IMG_FATBIN = 2,
	GP_IMG_ELF = 3,
	GP_IMG_PTX = 4,
	GP_IMG_FILE = 5,
};
struct gp_image {
	const void *ptr;   /* what the application passed */
	const void *data;  /* the bytes (a wrapper's container) */
	size_t size;       /* bytes of data, 0 if unknown */
	int kind;          /* enum gp_image_kind */
	const char *path;  /* GP_IMG_FILE */
};
GP_HIDDEN void gp_image_classify(const void *p, struct gp_image *img);
/* The largest image file read for patching, and the largest patched image
 * taken from the collector (256 MiB). */
#define GP_IMAGE_MAX ((uint64_t)256 << 20)
/* gp_image_read_file reads and classifies the image file of a file load
 * (cuModuleLoad, cuLibraryLoadFromFile): a NUL-terminated malloc'd copy,
 * img->ptr, to free after the load; NULL with *why and *err (-errno) when
 * it is not a readable regular file of 1..GP_IMAGE_MAX bytes. Load path. */
GP_HIDDEN void *gp_image_read_file(const char *path, struct gp_image *img, const char **why, int *err);
GP_HIDDEN const char *gp_image_kind_name(int kind);
GP_HIDDEN void gp_module_loaded(const char *api, uint64_t module, const struct gp_image *img, CUresult r);

/* patch.c */
#define GP_MAX_PARAMS 1024 /* kernelParams entries a patched launch can pass */
#define GP_XBUF 32768      /* bytes of a patched launch's extra buffer */
struct gp_pfunc_info {
	uint32_t index, offset; /* the hidden launch id: kernelParams index, buffer offset */
	uint32_t one_in;        /* the launch id goes to 1 launch in one_in (PATCHED device_one_in; <= 1: all) */
	uint32_t max_rate;      /* and to at most max_rate launches a second (PATCHED device_max_per_second; 0: all) */
	uint64_t gap_ns;        /* 1 s / max_rate */
	uint64_t next_ns;       /* atomic: CLOCK_MONOTONIC before which no launch gets its id (max_rate) */
	uint64_t swap;          /* the patched kernel's handle to launch instead (0: the handle itself) */
	uint32_t state;         /* atomic: GP_PF_* */
	uint32_t amod;          /* patch_async.c's module slot + 1 (0: none) */
};
/* Patched-function states: READY launches with the hidden id (through swap
 * when set); PENDING is a kernel of a module whose patched image is still
 * compiling (launches run the original, flagged GP_LAUNCH_F_PRESWAP); OFF
 * (a slot not filled yet, a kernel not patched, its module unloaded) runs
 * the original unflagged. */
#define GP_PF_OFF 0u
#define GP_PF_READY 1u
#define GP_PF_PENDING 2u
struct gp_patch {
	const char *api;
	int lib, active;
	uint8_t *payload; /* PATCHED */
	uint32_t plen;
	void *image;      /* the patched PTX (memfd mapping) */
	size_t image_size;
};
GP_HIDDEN const void *gp_patch_begin(const char *api, int lib, struct gp_image *img, struct gp_patch *pp);
GP_HIDDEN int gp_patch_finish(struct gp_patch *pp, CUresult r, uint64_t module);
GP_HIDDEN void gp_patch_unloaded(uint64_t module);
GP_HIDDEN int gp_capture_relax(int *mode);
GP_HIDDEN void gp_capture_restore(int relaxed, int mode);
GP_HIDDEN void gp_patch_lookup(uint64_t handle, uint64_t module, const char *name);
GP_HIDDEN void gp_patch_alias(uint64_t from, uint64_t to);
/* gp_pfunc_find: handle's entry when it launches as it is with the hidden
 * id (READY, no swap), for graph nodes and the SASS route; gp_pfunc_get:
 * its entry in any state (the launch path). */
GP_HIDDEN struct gp_pfunc_info *gp_pfunc_find(uint64_t handle);
GP_HIDDEN struct gp_pfunc_info *gp_pfunc_get(uint64_t handle);
GP_HIDDEN void gp_pfunc_set(uint64_t handle, uint32_t index, uint32_t offset, uint32_t one_in, uint32_t max_rate);
/* gp_pfunc_put sets (or resets) handle's entry to in's fields, swap,
 * state and amod. Load and patch threads only. */
GP_HIDDEN void gp_pfunc_put(uint64_t handle, const struct gp_pfunc_info *in);
/* patch_async.c: patching off the application's threads. gp_patch_async:
 * the session patches asynchronously (GPUPROBE_PATCH_WAIT_MS 0).
 * gp_patch_keep copies img for the job of the load under way on this
 * thread; gp_patch_loaded queues it for the module the load returned (or
 * drops it). gp_async_lookup and gp_async_alias: kernel lookups of a
 * module patched asynchronously (1: handled). gp_async_unloaded: the
 * application unloaded module. */
GP_HIDDEN int gp_patch_async(void);
GP_HIDDEN void gp_patch_keep(const char *api, int lib, const struct gp_image *img);
GP_HIDDEN void gp_patch_loaded(uint64_t module, CUresult r);
GP_HIDDEN int gp_async_lookup(uint64_t handle, uint64_t module, const char *name);
GP_HIDDEN int gp_async_alias(uint64_t from, uint64_t to);
GP_HIDDEN void gp_async_unloaded(uint64_t module);
/* sha256.c: SHA-256, for cache.c. */
struct gp_sha256 {
	uint32_t h[8];
	uint64_t n;
	uint8_t buf[64];
};
GP_HIDDEN void gp_sha256_init(struct gp_sha256 *s);
GP_HIDDEN void gp_sha256_add(struct gp_sha256 *s, const void *data, size_t len);
GP_HIDDEN void gp_sha256_end(struct gp_sha256 *s, uint8_t out[32]);
/* cache.c: gp_cache_load loads the patched PTX image ptx (size bytes, or
 * up to its NUL) in the current context as a module (library when lib):
 * from the node's cache of compiled images when it holds it, else
 * compiled (cuLink*, on the calling thread) and stored. *cache gets the
 * enum gp_patch_cache result; the driver's result is returned. */
GP_HIDDEN CUresult gp_cache_load(int lib, const void *ptx, size_t size, uint64_t *module, uint16_t *cache);
/* patch.c, for the patch thread: gp_patch_request sends PATCH for img
 * and maps the answer's image into pp (0; nonzero: not patched, traced);
 * gp_patch_bind sets the globals of the loaded patched module and records
 * its kernels (both take gp_patch_mu). */
GP_HIDDEN int gp_patch_request(const char *api, int lib, const struct gp_image *img, struct gp_patch *pp);
GP_HIDDEN int gp_patch_bind(struct gp_patch *pp, uint64_t module, const char **why);
/* gp_patch_kernels lists the kernels of patched module (from its PATCHED
 * answer): their names and hidden-parameter fields; NULL when unknown. */
struct gp_pkernel {
	uint32_t index, offset, one_in, max_rate;
	char *name;
};
GP_HIDDEN const struct gp_pkernel *gp_patch_kernels(uint64_t module, uint32_t *n);
/* gp_region_dev maps and registers WELCOME region i (once): its device
 * address; nonzero when it could not be registered (r->host may be set). */
GP_HIDDEN int gp_region_dev(uint32_t i, uint64_t *dev);
/* patch.c's driver entry points (the real ones, never the wrappers),
 * looked up by gp_drv_init; bind.c uses them too. */
struct gp_patch_drv {
	CUresult (*ctx_get_device)(CUdevice *);
	CUresult (*ctx_set)(CUcontext);
	CUresult (*dev_attr)(int *, int, CUdevice);
	CUresult (*host_register)(void *, size_t, unsigned);
	CUresult (*host_dev_ptr)(CUdeviceptr *, void *, unsigned);
	CUresult (*mem_alloc)(CUdeviceptr *, size_t);
	CUresult (*mem_free)(CUdeviceptr);
	CUresult (*memset8)(CUdeviceptr, unsigned char, size_t);
	CUresult (*htod)(CUdeviceptr, const void *, size_t);
	CUresult (*mod_global)(CUdeviceptr *, size_t *, CUmodule, const char *);
	CUresult (*lib_global)(CUdeviceptr *, size_t *, CUlibrary, const char *);
	CUresult (*mod_unload)(CUmodule);
	CUresult (*lib_unload)(CUlibrary);
	CUresult (*ctx_get)(CUcontext *);
	CUresult (*mod_load_data)(CUmodule *, const void *);
	CUresult (*lib_load_data)(CUlibrary *, const void *, void *, void *, unsigned, void *, void *, unsigned);
	CUresult (*mod_function)(CUfunction *, CUmodule, const char *);
	CUresult (*lib_kernel)(CUkernel *, CUlibrary, const char *);
	int looked;
};
extern GP_HIDDEN struct gp_patch_drv gp_drv;
GP_HIDDEN void gp_drv_init(void);
/* Little-endian reads of the wire formats (bind.c). */
static inline uint32_t rd32(const uint8_t *b)
{
	uint32_t v;
	memcpy(&v, b, 4);
	return v;
}
static inline uint64_t rd64(const uint8_t *b)
{
	uint64_t v;
	memcpy(&v, b, 8);
	return v;
}
/* bind.c: one PATCHED global descriptor (agent's MarshalPatched), and the
 * device memory private to one module (or one context of the SASS route). */
struct gp_gdesc {
	uint32_t kind, region, il;
	uint64_t value, size;
	const uint8_t *init;
	char name[4097];
};
#define GP_MOD_ALLOCS 16
struct gp_allocs {
	uint32_t n;
	uint32_t num[GP_MOD_ALLOCS];
	uint64_t size[GP_MOD_ALLOCS];
	CUdeviceptr dev[GP_MOD_ALLOCS];
};
GP_HIDDEN int gp_global_next(const uint8_t **p, const uint8_t *end, struct gp_gdesc *g, const char **why);
GP_HIDDEN int gp_global_value(const char *api, const struct gp_gdesc *g, struct gp_allocs *allocs, uint64_t *v,
			      const char **why);
/* gp_sample_keep: whether launch id keeps its id under device sampling 1 in
 * n. The id is mixed first (splitmix64's finaliser, high half: its low bits
 * are biased for small ids): ids are consecutive per thread, and a loop that
 * launches k kernels in turn would otherwise probe only the kernels at the
 * positions that id % n picks. */
static inline int gp_sample_keep(uint64_t id, uint32_t n)
{
	id ^= id >> 30;
	id *= 0xbf58476d1ce4e5b9ull;
	id ^= id >> 27;
	id *= 0x94d049bb133111ebull;
	id ^= id >> 31;
	return (id >> 32) % n == 0;
}

/* PATCH load APIs of the SASS route (agent.APISASS, APISASSKernels). */
#define GP_API_SASS 3u
#define GP_API_SASS_KERNELS 4u
/* gp_patch_fetch asks the collector for the SASS route's patch module;
 * gp_patch_query which of the kernels named in q (n bytes of
 * NUL-terminated names) the route may probe: the PATCHED payload (patch.c). */
GP_HIDDEN uint8_t *gp_patch_fetch(uint32_t arch, uint32_t *plen, void **image, size_t *size);
GP_HIDDEN uint8_t *gp_patch_query(const char *q, size_t n, uint32_t *plen);
/* gp_arch returns the current context's device SM number (0: unknown). */
GP_HIDDEN uint32_t gp_arch(void);
/* sass_user.c: the collector's patch module bound for context ctx; the
 * program bits of a launch (agent's SASSTargetShift, SASSMaxPrograms). */
#define GP_SASS_TARGET_SHIFT 48
#define GP_SASS_PROGRAMS 15
struct gp_sass_targets {
	uint32_t n;
	char *pat[GP_SASS_PROGRAMS]; /* by program bit */
};
GP_HIDDEN int gp_sass_user_bind(CUcontext ctx, uint8_t **img, size_t *n, int *mem,
				 const struct gp_sass_targets **targets);
GP_HIDDEN uint64_t gp_sass_user_mask(const struct gp_sass_targets *t, CUfunction f, const char *name, uint32_t gen);
/* sass_ctx.c: writes v over a magic in a patch image (the hits). */
GP_HIDDEN int gp_sass_poke(uint8_t *img, size_t n, uint64_t magic, uint64_t v);
/* sass.c: a module or library was unloaded. */
GP_HIDDEN void gp_sass_unloaded(void);


/* mirror.c: gp_devmap_bind returns the device copy of WELCOME region i
 * (made once per region and process), mirrored to the host every
 * period_us; nonzero (logged once and counted) when it cannot be made. */
GP_HIDDEN int gp_devmap_bind(const char *api, uint32_t i, uint64_t period_us, uint64_t *dev);
/* gp_devmap_ctx_ending is called before the application releases or
 * destroys context ctx (NULL: the primary context of device dev): one
 * final pass, bounded to about 100 ms, over the maps in it; nonzero when
 * there are such maps, and then gp_devmap_ctx_ended must follow the
 * driver call, saying whether the context died (those maps are then never
 * touched again). Not for the launch path (it takes the mirror's lock). */
GP_HIDDEN int gp_devmap_ctx_ending(CUcontext ctx, CUdevice dev);
GP_HIDDEN void gp_devmap_ctx_ended(int gone);
/* Graph kernel nodes of patched kernels carry a reserved launch id: the
 * high bit set, then a counter (wrap_graph.c). */
#define GP_GRAPH_ID_BIT ((uint64_t)1 << 63)
GP_HIDDEN uint64_t gp_graph_node_id(uint64_t func, void **params, void **extra);
GP_HIDDEN void gp_graph_exec_node_set(uint64_t exec, uint64_t node, uint64_t func, uint64_t id);
/* gp_any_patched: some module was patched (launches look functions up). */
extern GP_HIDDEN int gp_any_patched;

/* trace.c */
extern GP_HIDDEN int gp_trace_fd;
GP_HIDDEN void gp_tracef(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define GP_TRACE(...)                           \
	do {                                    \
		if (GP_UNLIKELY(gp_trace_fd >= 0)) \
			gp_tracef(__VA_ARGS__);  \
	} while (0)

/* Counters for the trace summary (relaxed atomics, bumped only when
 * tracing, so the hot path pays nothing otherwise). */
struct gp_stats {
	uint64_t launches, graph_launches, captured, published, dropped, names, loads, syncs, memcpys;
	uint64_t unbound; /* optional regions (kernel map, clock) that could not be registered: always counted */
	uint64_t names_cut; /* kernel names cut to fit a launch slot (flagged): always counted */
	uint64_t devmap_bound, devmap_unbound, devmap_stopped; /* device maps made, refused, stopped: always counted */
};
extern GP_HIDDEN struct gp_stats gp_stats;
#define GP_COUNT(field, n)                                                              \
	do {                                                                             \
		if (GP_UNLIKELY(gp_trace_fd >= 0))                                      \
			__atomic_fetch_add(&gp_stats.field, (n), __ATOMIC_RELAXED);    \
	} while (0)

/* gp_reserve takes a ring slot for a record of len bytes that the caller
 * writes in place (gpbr_ring_payload) and publishes with gp_ring_commit; NULL
 * when the ring is full (counted). */
static inline struct gpbr_slot *gp_reserve(void *ring, uint32_t len, uint64_t *ticket)
{
	int why;
	struct gpbr_slot *s = gpbr_ring_reserve(ring, len, ticket, &why);
	if (s == NULL)
		GP_COUNT(dropped, 1);
	return s;
}

/* gp_ring_commit hands a slot of gp_reserve to the consumer. */
static inline void gp_ring_commit(struct gpbr_slot *s, uint64_t ticket, uint32_t type, uint32_t len)
{
	gpbr_ring_publish(s, ticket, type, len);
	GP_COUNT(published, 1);
}

/* spanctx.c: the application's span context. gp_spanctx_emit runs just
 * before a launch, memcpy or sync record is written: it writes the
 * thread's span_context record when the thread's context changed since
 * its latest one in this session (never when no context was ever set). */
extern GP_HIDDEN int gp_spanctx_used;
GP_HIDDEN void gp_spanctx_check(void *ring);
GP_HIDDEN void gp_spanctx_env(void);
GP_HIDDEN const char *gp_traceparent_parse(const char *s, uint8_t trace[16], uint8_t span[8], uint8_t *flags);
static inline void gp_spanctx_emit(void *ring)
{
	if (GP_UNLIKELY(__atomic_load_n(&gp_spanctx_used, __ATOMIC_RELAXED)))
		gp_spanctx_check(ring);
}

/* stack.c: launch stacks at the collector's stacks_per_second.
 * gp_stack_emit runs just before a launch record is written, with the
 * launch's return time: past gp_stack_next, the thread's stack goes into
 * the ring as stack records. gp_stack_start(rate) at each session (0: off). */
#define GP_STACK_NATIVE 64 /* native frames a stack holds at most */
#define GP_STACK_PYTHON 32 /* Python frames */
extern GP_HIDDEN uint64_t gp_stack_next;
GP_HIDDEN void gp_stack_start(uint32_t rate);
GP_HIDDEN void gp_stack_take(void *ring, uint64_t id, uint64_t now);
GP_HIDDEN void gp_stack_summary(void);
static inline void gp_stack_emit(void *ring, uint64_t id, uint64_t now)
{
	if (GP_UNLIKELY(now >= __atomic_load_n(&gp_stack_next, __ATOMIC_RELAXED))) {
#if GP_SELFTIME
		uint64_t s0 = gp_st_now();
		gp_stack_take(ring, id, now);
		GP_ST_ADD(stack_ticks, gp_st_now() - s0);
		GP_ST_ADD(stacks, 1);
#else
		gp_stack_take(ring, id, now);
#endif
	}
}

/* gp_ring_prefetch asks for the cache lines of the slot that the ring's
 * next record of len bytes will most likely take (the one at head). The
 * launch wrappers issue it before the driver call: the slot was last
 * written a lap (megabytes) ago, so its lines are cold, and they now
 * arrive while the driver works instead of being fetched by the record's
 * stores after it. Only a hint: if another thread takes that ticket, the
 * prefetch was wasted and nothing else changes. With gp_hot, in-process
 * A/B on H200s (scripts/gpu/launch-cost.sh's ab): 4-7 ns less added per launch
 * (medians of 9-15 rounds against the build before). */
static inline void gp_ring_prefetch(void *ring, uint32_t len)
{
	uint64_t hd = __atomic_load_n(gpbr_u64(ring, GPBR_RING_HEAD), __ATOMIC_RELAXED);
	const char *s = (const char *)gpbr_ring_slot(ring, hd);
	__builtin_prefetch(s, 1, 3);
	__builtin_prefetch(s + GPBR_SLOT_HEADER + len - 1, 1, 3);
}

/* gp_produce writes one record into the ring and counts the outcome. */
static inline void gp_produce(void *ring, uint32_t type, const void *rec, uint32_t len)
{
	int r = gpbr_ring_produce(ring, type, rec, len);
	if (r == GPBR_PUBLISHED)
		GP_COUNT(published, 1);
	else
		GP_COUNT(dropped, 1);
}

/* cupti.c: device windows. gp_windows_start turns them on (once, when the
 * first session is up; flush_us: how often CUPTI hands records over, µs;
 * settings: the WELCOME's GP_SET_* flags);
 * gp_win_expect, before a launch call, names its launch id: CUPTI's callback
 * at the call's entry files its correlation id under it (before the kernel
 * can run, so before its record can come); gp_win_note, after the call,
 * returns the launch record's flag: GP_LAUNCH_F_NO_WINDOW when no window
 * will come. gp_ids_handed: launch ids handed out so far (the rate cap). */
GP_HIDDEN uint64_t gp_ids_handed(void);
GP_HIDDEN void gp_windows_start(uint32_t flush_us, uint32_t settings);
GP_HIDDEN void gp_windows_forked(void);
extern GP_HIDDEN int gp_win_on;
static inline void gp_win_expect(uint64_t id) { gp_self.pending = id; }
static inline uint32_t gp_win_note(void)
{
	gp_self.pending = 0;
	if (gp_self.corr != 0) {
		gp_self.corr = 0;
		return 0;
	}
	return GP_LAUNCH_F_NO_WINDOW;
}

/* sass.c: the SASS route. gp_sass_start turns it on or off (the
 * collector's settings: sampling::device_max_per_second, 0 for no limit;
 * the flush period in µs); gp_sass_note, after
 * a launch call, turns the launch record's flags into those of a launch
 * that runs the route's probes when sass.c sampled it. */
GP_HIDDEN void gp_sass_start(int on, uint32_t rate, uint32_t flush_us, uint32_t settings);
GP_HIDDEN void gp_sass_summary(void);
GP_HIDDEN void gp_sass_pause(void);
GP_HIDDEN int gp_sass_aside(int on, const char *what);
/* gp_sass_holds_callbacks: the process subscribed the Sanitizer API
 * (GPUPROBE_SASS=1), whose subscriber CUPTI cannot share, even released. */
GP_HIDDEN int gp_sass_holds_callbacks(void);
static inline uint32_t gp_sass_note(uint32_t fl)
{
	if (GP_LIKELY(!gp_self.sass))
		return fl;
	gp_self.sass = 0;
	return (fl & ~GP_LAUNCH_F_UNPROBED) | GP_LAUNCH_F_SASS;
}

#endif /* GPUPROBE_SHIM_GP_H */
