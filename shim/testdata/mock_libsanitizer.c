/*
 * mock_libsanitizer.c - a MOCK of libsanitizer-public.so for the shim's tests
 * (CI has no GPU): the entry points sass.c uses, with the callback-data
 * layout of CUDA 13's Sanitizer_LaunchData (offsets checked on the GPU by
 * scripts/gpu/sanitizer.sh). The mock driver (mock_libcuda.c) tells it of
 * every launch before it "runs": the subscriber's LAUNCH_BEGIN callback
 * comes then, and when the launch's module is patched and its userdata is
 * set, the "GPU" writes what sass_phases.cu writes for a launch: one
 * 48-byte record {launch id, start, end, blocks, threads, seq} into the
 * host-pinned ring (the one sanitizerAllocHost allocation).
 *
 * MOCK_SANITIZER_FAIL=subscribe|patch makes that call fail (fail-open
 * tests); MOCK_SANITIZER_LOG=FILE gets its counts at exit.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define EXPORT __attribute__((visibility("default")))
#define MODS 3

typedef void (*cb_fn)(void *, uint32_t, uint32_t, const void *);
static cb_fn cb;
static void *cb_ud;
static int launch_on, token;
static uint64_t *ring;
static size_t ring_size;
static int destroy_cb_on, ring_allocs;
static int patched[MODS];
static __thread const void *cur_ud;
static uint64_t gtimer = 1000000;
static struct {
	int subscribed, unsubscribed, added, added_user, patches, user_patches, mem_patches, unpatches, launches, probed,
		bad_image, targeted;
	uint64_t bits;
} n;

static int fail(const char *what)
{
	const char *e = getenv("MOCK_SANITIZER_FAIL");
	return e && strcmp(e, what) == 0;
}

/* Three modules, by the kernel name's hash, as handles. */
static int mod_of(const char *name)
{
	uint32_t h = 2166136261u;
	for (; *name; name++)
		h = (h ^ (unsigned char)*name) * 16777619u;
	return (int)(h % MODS);
}
static void *mod_handle(int m) { return (void *)(uintptr_t)(0x5000 + 0x100 * m); }
static int mod_index(void *h)
{
	uintptr_t v = (uintptr_t)h;
	return v >= 0x5000 && v < 0x5000 + 0x100 * MODS && v % 0x100 == 0 ? (int)((v - 0x5000) / 0x100) : -1;
}

static void on_launch(void *f, const char *name, const unsigned *dims)
{
	if (cb == NULL || !launch_on)
		return;
	uint8_t d[136] = {0};
	void *ctx = (void *)0xc7c7c7c7, *hstream = (void *)0x57, *mod = mod_handle(mod_of(name)), *hl = (void *)0x1a;
	memcpy(d + 0, &ctx, 8);
	memcpy(d + 16, &hstream, 8);
	memcpy(d + 24, &mod, 8);
	memcpy(d + 32, &f, 8);
	memcpy(d + 40, &name, 8);
	memcpy(d + 48, dims, 24);
	memcpy(d + 96, &hl, 8);
	cur_ud = NULL;
	__atomic_fetch_add(&n.launches, 1, __ATOMIC_RELAXED);
	cb(cb_ud, 5, 1, d);
	if (!patched[mod_of(name)] || cur_ud == NULL || ring == NULL)
		return;
	/* The "GPU": the record sass_phases.cu's last warp writes. */
	uint64_t i = __atomic_fetch_add(&ring[0], 1, __ATOMIC_RELAXED);
	uint64_t *r = ring + 8 + 6 * (i % 4096);
	uint64_t t = __atomic_fetch_add(&gtimer, 5000, __ATOMIC_RELAXED);
	/* The collector's module strips the program bits (48..62) off the
	 * launch id before kernel_phases sees it. */
	uint64_t ud = (uint64_t)(uintptr_t)cur_ud;
	if (ud >> 48)
		__atomic_fetch_add(&n.targeted, 1, __ATOMIC_RELAXED), __atomic_fetch_or(&n.bits, ud >> 48, __ATOMIC_RELAXED);
	r[0] = ud & ((1ull << 48) - 1);
	r[1] = t;
	r[2] = t + 4000;
	r[3] = (uint64_t)dims[0] * dims[1] * dims[2];
	r[4] = r[3] * dims[3] * dims[4] * dims[5];
	__atomic_store_n(&r[5], i + 1, __ATOMIC_RELEASE);
	__atomic_fetch_add(&n.probed, 1, __ATOMIC_RELAXED);
}

/* A context's end: the subscriber hears of it first, then the pinned ring
 * is unmapped, as the real driver frees a context's memory: a shim that
 * read it afterwards would fault. */
static void on_ctx_destroy(void *driver_ctx)
{
	(void)driver_ctx;
	void *ctx = (void *)0xc7c7c7c7; /* the context the launch callbacks name (mock_libcuda.c's) */
	if (cb != NULL && destroy_cb_on) {
		uint8_t d[16] = {0};
		memcpy(d, &ctx, 8);
		cb(cb_ud, 3, 4, d);
	}
	if (ring != NULL) {
		munmap(ring, ring_size);
		ring = NULL;
	}
}

EXPORT int sanitizerSubscribe(void **sub, cb_fn fn, void *ud)
{
	if (fail("subscribe"))
		return 7;
	void (*set)(void (*)(void *, const char *, const unsigned *)) = dlsym(RTLD_DEFAULT, "mock_cuda_set_san_hook");
	if (set == NULL) {
		void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
		set = cuda ? dlsym(cuda, "mock_cuda_set_san_hook") : NULL;
	}
	if (set == NULL)
		return 7;
	set(on_launch);
	void (*setc)(void (*)(void *)) = dlsym(RTLD_DEFAULT, "mock_cuda_set_san_ctx_hook");
	if (setc == NULL) {
		void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
		setc = cuda ? dlsym(cuda, "mock_cuda_set_san_ctx_hook") : NULL;
	}
	if (setc != NULL)
		setc(on_ctx_destroy);
	cb = fn, cb_ud = ud, *sub = &token;
	n.subscribed++;
	return 0;
}
EXPORT int sanitizerUnsubscribe(void *sub)
{
	(void)sub;
	cb = NULL;
	n.unsubscribed++;
	return 0;
}
EXPORT int sanitizerEnableDomain(uint32_t on, void *sub, uint32_t domain)
{
	(void)sub;
	if (domain == 5)
		launch_on = on != 0;
	return 0;
}
EXPORT int sanitizerAlloc(void *ctx, void **p, size_t size)
{
	(void)ctx;
	*p = calloc(1, size);
	return *p ? 0 : 2;
}
EXPORT int sanitizerEnableCallback(uint32_t on, void *sub, uint32_t domain, uint32_t cbid)
{
	(void)sub;
	if (domain == 3 && cbid == 4)
		destroy_cb_on = on != 0;
	return 0;
}
EXPORT int sanitizerAllocHost(void *ctx, void **p, size_t size)
{
	(void)ctx;
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return 2;
	*p = ring = m, ring_size = size;
	ring_allocs++;
	return 0;
}
EXPORT int sanitizerMemset(void *p, int v, size_t size, void *stream)
{
	(void)stream;
	memset(p, v, size);
	return 0;
}
/* elf_size is the extent of an ELF64 image: its section header table's
 * end (where ptxas puts it, last). */
static uint64_t elf_size(const uint8_t *b)
{
	uint64_t shoff;
	uint16_t shentsize, shnum;
	memcpy(&shoff, b + 0x28, 8);
	memcpy(&shentsize, b + 0x3a, 2);
	memcpy(&shnum, b + 0x3c, 2);
	return shoff + (uint64_t)shentsize * shnum;
}

/* The image must be the built-in fatbin or the collector's module, an ELF
 * cubin (sass_user.c), with every global bound: no magic of either kind
 * (the built-in three, the collector's 0x47505347000000xx) left. */
EXPORT int sanitizerAddPatches(const void *image, void *ctx)
{
	(void)ctx;
	const uint8_t *b = image;
	uint32_t magic;
	memcpy(&magic, b, 4);
	uint64_t size;
	memcpy(&size, b + 8, 8);
	int elf = magic == 0x464c457fu;
	size = elf ? elf_size(b) : size + 16;
	if ((!elf && magic != 0xba55ed50u) || size <= 16 || size > (64u << 20)) {
		n.bad_image++;
		return 3;
	}
	for (uint64_t i = 0; i + 8 <= size; i += 8) {
		uint64_t w;
		memcpy(&w, b + i, 8);
		if ((w >= 0x4750535053435230ull && w <= 0x4750535053435232ull) ||
		    (w >= 0x4750534700000000ull && w < 0x4750534700001000ull)) {
			n.bad_image++;
			return 3;
		}
	}
	if (elf)
		n.added_user++;
	else
		n.added++;
	return 0;
}
EXPORT int sanitizerPatchInstructions(uint32_t id, void *mod, const char *fn)
{
	int builtin = (id == 1 && !strcmp(fn, "gp_sp_enter")) || (id == 2 && !strcmp(fn, "gp_sp_exit"));
	int user = (id == 1 && !strcmp(fn, "__gpuprobe_sp_enter")) || (id == 2 && !strcmp(fn, "__gpuprobe_sp_exit"));
	int mem = id == 3 && !strcmp(fn, "__gpuprobe_sp_mem");
	if (fail("patch") || mod_index(mod) < 0 || !(builtin || user || mem))
		return 3;
	n.user_patches += user;
	n.mem_patches += mem;
	return 0;
}
EXPORT int sanitizerPatchModule(void *mod)
{
	int m = mod_index(mod);
	if (m < 0)
		return 3;
	patched[m] = 1;
	n.patches++;
	return 0;
}
EXPORT int sanitizerUnpatchModule(void *mod)
{
	int m = mod_index(mod);
	if (m < 0)
		return 3;
	if (patched[m])
		n.unpatches++;
	patched[m] = 0;
	return 0;
}
EXPORT int sanitizerSetLaunchCallbackData(void *launch, void *f, void *stream, const void *ud)
{
	(void)f, (void)stream;
	if (launch != (void *)0x1a)
		return 3;
	cur_ud = ud;
	return 0;
}

__attribute__((destructor)) static void mock_san_fini(void)
{
	const char *path = getenv("MOCK_SANITIZER_LOG");
	FILE *f = path ? fopen(path, "w") : NULL;
	if (f == NULL)
		return;
	fprintf(f, "subscribed=%d unsubscribed=%d added=%d added_user=%d patches=%d user_patches=%d mem_patches=%d "
		   "unpatches=%d launches=%d probed=%d bad_image=%d rings=%d targeted=%d bits=%#llx\n",
		n.subscribed, n.unsubscribed, n.added, n.added_user, n.patches, n.user_patches, n.mem_patches, n.unpatches,
		n.launches, n.probed, n.bad_image, ring_allocs, n.targeted, (unsigned long long)n.bits);
	fclose(f);
}
