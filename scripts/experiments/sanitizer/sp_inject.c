// Experiment: patch every module through the Compute Sanitizer API from an
// LD_PRELOAD library (or CUDA_INJECTION64_PATH), with a patch image built by
// any route (nvcc, ptxas, nvJitLink, PTX for the driver's JIT). Env:
//   SP_PATCH=file   patch image (cubin, fatbin or PTX text)
//   SP_SANITIZER=.. libsanitizer-public.so path
//   SP_MODE=warp|nop|mem|none  which callbacks are patched
//   SP_ONE_IN=N     userdata only for every Nth launch (others get NULL)
//   SP_TOGGLE=1     unpatch modules for unsampled launches, repatch for sampled
//   SP_MODE=custom  patch SP_ENTER_FN / SP_EXIT_FN / SP_MEM_FN (a gpuprobe/sanpatch
//                   module), with SP_BIND=MAGIC:BYTES,... bound to zeroed pinned
//                   host buffers whose words from byte 512 sp_dump prints (map regions)
// sp_dump() (called by the application at its end) prints what was recorded.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda.h>
#include <sanitizer.h>

#define F(name) static __typeof__(name) *p_##name
F(sanitizerSubscribe); F(sanitizerEnableDomain); F(sanitizerAlloc); F(sanitizerMemset);
F(sanitizerAddPatches); F(sanitizerPatchInstructions); F(sanitizerPatchModule);
F(sanitizerUnpatchModule); F(sanitizerSetLaunchCallbackData); F(sanitizerSetCallbackData);
F(sanitizerGetResultString); F(sanitizerAllocHost);

static Sanitizer_SubscriberHandle sub;
static int inited, adding;
static char *image; static size_t image_len;
static const char *mode = "warp";
static unsigned long one_in = 1, toggle;
static unsigned long long launches, sampled, patched_mods, patch_fail, mod_loaded;
static double patch_ms, toggle_ms; static unsigned long toggles;
static struct { unsigned long long magic; size_t bytes; unsigned long long *p; } binds[8]; static int nbind;
static CUcontext ctxs[8]; static int nctx;
static void *d_scratch, *d_recs, *d_count;
#define CAP (1u << 20)
#define NAMES 65536
static char names[NAMES][48];

static double now_ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static const char *rs(SanitizerResult r) { const char *s = "?"; if (p_sanitizerGetResultString) p_sanitizerGetResultString(r, &s); return s; }

static void replace_magic(uint64_t magic, uint64_t val)
{
	int n = 0;
	if (image_len > 8 && (memcmp(image, "//", 2) == 0 || memcmp(image, ".version", 8) == 0 || strstr(image, ".version"))) {
		char m[32], v[32]; snprintf(m, sizeof m, "%llu", (unsigned long long)magic); snprintf(v, sizeof v, "%llu", (unsigned long long)val);
		char *p = strstr(image, m);
		if (p) { size_t tail = strlen(p + strlen(m)); char *nb = malloc(image_len + 32);
			size_t pre = p - image; memcpy(nb, image, pre); strcpy(nb + pre, v); memcpy(nb + pre + strlen(v), p + strlen(m), tail + 1);
			free(image); image = nb; image_len = strlen(nb) + 1; n = 1; }
	} else {
		for (size_t i = 0; i + 8 <= image_len; i++) if (memcmp(image + i, &magic, 8) == 0) { memcpy(image + i, &val, 8); n++; }
	}
	fprintf(stderr, "sp: magic %llx replaced %d time(s)\n", (unsigned long long)magic, n);
}

static int patch(CUmodule m)
{
	SanitizerResult r = SANITIZER_SUCCESS;
	if (!strcmp(mode, "warp")) {
		r = p_sanitizerPatchInstructions(SANITIZER_INSTRUCTION_BLOCK_ENTER, m, "sp_enter");
		if (!r) r = p_sanitizerPatchInstructions(SANITIZER_INSTRUCTION_BLOCK_EXIT, m, "sp_exit");
	} else if (!strcmp(mode, "nop")) {
		r = p_sanitizerPatchInstructions(SANITIZER_INSTRUCTION_BLOCK_ENTER, m, "sp_nop");
		if (!r) r = p_sanitizerPatchInstructions(SANITIZER_INSTRUCTION_BLOCK_EXIT, m, "sp_nop");
	} else if (!strcmp(mode, "custom")) {
		const char *e = getenv("SP_ENTER_FN"), *x = getenv("SP_EXIT_FN"), *mm = getenv("SP_MEM_FN");
		if (e) r = p_sanitizerPatchInstructions(SANITIZER_INSTRUCTION_BLOCK_ENTER, m, e);
		if (!r && x) r = p_sanitizerPatchInstructions(SANITIZER_INSTRUCTION_BLOCK_EXIT, m, x);
		if (!r && mm) r = p_sanitizerPatchInstructions(SANITIZER_INSTRUCTION_GLOBAL_MEMORY_ACCESS, m, mm);
	} else if (!strcmp(mode, "mem")) {
		r = p_sanitizerPatchInstructions(SANITIZER_INSTRUCTION_GLOBAL_MEMORY_ACCESS, m, "sp_mem");
	} else return 0;
	if (!r) r = p_sanitizerPatchModule(m);
	if (r) { patch_fail++; if (patch_fail < 4) fprintf(stderr, "sp: patch: %s\n", rs(r)); return -1; }
	return 0;
}

static void on_context(CUcontext ctx)
{
	for (int i = 0; i < nctx; i++) if (ctxs[i] == ctx) return;
	if (nctx == 8) return;
	ctxs[nctx++] = ctx;
	double t0 = now_ms();
	SanitizerResult r = p_sanitizerAlloc(ctx, &d_scratch, 256 * 64 * 16);
	if (!r) r = p_sanitizerAlloc(ctx, &d_recs, (size_t)CAP * 32);
	if (!r) r = p_sanitizerAlloc(ctx, &d_count, 64);
	if (r) { fprintf(stderr, "sp: alloc: %s\n", rs(r)); return; }
	SanitizerResult m1 = p_sanitizerMemset(d_count, 0, 64, NULL);
	SanitizerResult m2 = p_sanitizerMemset(d_scratch, 0, 256 * 64 * 16, NULL);
	fprintf(stderr, "sp: memset %s %s\n", rs(m1), rs(m2));
	replace_magic(0x4750505350435458ull, (uint64_t)(uintptr_t)d_scratch);
	replace_magic(0x4750505350435459ull, (uint64_t)(uintptr_t)d_recs);
	replace_magic(0x475050535043545aull, (uint64_t)(uintptr_t)d_count);
	replace_magic(0x475050535043545bull, CAP);
	for (int i = 0; i < nbind; i++) {
		void *p = NULL;
		SanitizerResult rb = p_sanitizerAllocHost(ctx, &p, binds[i].bytes);
		if (rb || !p) { fprintf(stderr, "sp: bind alloc: %s\n", rs(rb)); continue; }
		memset(p, 0, binds[i].bytes);
		binds[i].p = p;
		replace_magic(binds[i].magic, (uint64_t)(uintptr_t)p);
	}
	adding = 1;
	r = p_sanitizerAddPatches(image, ctx);
	adding = 0;
	fprintf(stderr, "sp: sanitizerAddPatches: %s (%.2f ms with allocs)\n", rs(r), now_ms() - t0);
}

static void SANITIZERAPI cb(void *ud, Sanitizer_CallbackDomain dom, Sanitizer_CallbackId id, const void *data)
{
	(void)ud;
	if (dom == SANITIZER_CB_DOMAIN_RESOURCE && id == SANITIZER_CBID_RESOURCE_MODULE_LOADED) {
		const Sanitizer_ResourceModuleData *d = data;
		if (adding) return;
		mod_loaded++;
		on_context(d->context);
		double t0 = now_ms();
		if (patch(d->module) == 0) patched_mods++;
		patch_ms += now_ms() - t0;
	} else if (dom == SANITIZER_CB_DOMAIN_LAUNCH && id == SANITIZER_CBID_LAUNCH_BEGIN) {
		const Sanitizer_LaunchData *d = data;
		unsigned long long lid = ++launches;
		int take = lid % one_in == 0;
		if (lid < NAMES && d->functionName) snprintf(names[lid], sizeof names[lid], "%s", d->functionName);
		if (toggle) {
			static CUmodule state_mod[64]; static int state_patched[64]; int k = 0;
			for (; k < 64 && state_mod[k] && state_mod[k] != d->module; k++) ;
			if (k < 64) {
				if (!state_mod[k]) { state_mod[k] = d->module; state_patched[k] = 1; }
				double t0 = now_ms();
				if (take && !state_patched[k]) { patch(d->module); state_patched[k] = 1; toggles++; }
				else if (!take && state_patched[k]) { p_sanitizerUnpatchModule(d->module); state_patched[k] = 0; toggles++; }
				toggle_ms += now_ms() - t0;
			}
			take = 1;
		}
		if (take) sampled++;
		SanitizerResult r = p_sanitizerSetLaunchCallbackData ?
			p_sanitizerSetLaunchCallbackData(d->hLaunch, d->function, d->hStream, take ? (void *)(uintptr_t)lid : NULL) :
			p_sanitizerSetCallbackData(d->function, take ? (void *)(uintptr_t)lid : NULL);
		if (r && lid < 4) fprintf(stderr, "sp: set callback data: %s\n", rs(r));
	}
}

static int load_image(void)
{
	const char *f = getenv("SP_PATCH");
	if (!f) return -1;
	FILE *fp = fopen(f, "rb"); if (!fp) { perror(f); return -1; }
	fseek(fp, 0, SEEK_END); long n = ftell(fp); fseek(fp, 0, SEEK_SET);
	image = malloc(n + 1); image_len = fread(image, 1, n, fp); image[image_len] = 0; fclose(fp);
	if (memmem(image, image_len, ".version", 8)) image_len++; /* PTX: keep the NUL */
	return 0;
}

static void init(const char *how)
{
	if (inited++) return;
	if (load_image()) return;
	if (getenv("SP_MODE")) mode = getenv("SP_MODE");
	if (getenv("SP_ONE_IN")) one_in = strtoul(getenv("SP_ONE_IN"), 0, 10);
	if (getenv("SP_TOGGLE")) toggle = strtoul(getenv("SP_TOGGLE"), 0, 10);
	for (const char *b = getenv("SP_BIND"); b && *b && nbind < 8;) {
		char *end;
		binds[nbind].magic = strtoull(b, &end, 0);
		if (*end != ':') break;
		binds[nbind].bytes = strtoull(end + 1, &end, 0);
		nbind++;
		b = *end == ',' ? end + 1 : end;
	}
	const char *lib = getenv("SP_SANITIZER") ? getenv("SP_SANITIZER") : "libsanitizer-public.so";
	void *h = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
	if (!h) { fprintf(stderr, "sp: %s\n", dlerror()); return; }
#define L(name) p_##name = dlsym(h, #name)
	L(sanitizerAllocHost);
	L(sanitizerSubscribe); L(sanitizerEnableDomain); L(sanitizerAlloc); L(sanitizerMemset);
	L(sanitizerAddPatches); L(sanitizerPatchInstructions); L(sanitizerPatchModule);
	L(sanitizerUnpatchModule); L(sanitizerSetLaunchCallbackData); L(sanitizerSetCallbackData);
	L(sanitizerGetResultString);
	SanitizerResult r = p_sanitizerSubscribe(&sub, cb, NULL);
	fprintf(stderr, "sp: subscribe from %s (%s): %s\n", how, lib, rs(r));
	if (r) return;
	p_sanitizerEnableDomain(1, sub, SANITIZER_CB_DOMAIN_RESOURCE);
	p_sanitizerEnableDomain(1, sub, SANITIZER_CB_DOMAIN_LAUNCH);
}

__attribute__((constructor)) static void ctor(void) { if (!getenv("SP_INJECTION")) init("constructor"); }
int InitializeInjection(void) { init("InitializeInjection"); return 1; }

struct agg { unsigned long long lid, n, start, end; };
static int by_lid(const void *a, const void *b) { const unsigned long long *x = a, *y = b; return x[0] < y[0] ? -1 : x[0] > y[0]; }

void sp_dump(void)
{
	for (int i = 0; i < nbind; i++) {
		if (!binds[i].p) continue;
		printf("SP bind %#llx:", binds[i].magic);
		for (size_t w = 64; w < binds[i].bytes / 8 && w < 64 + 8; w++) printf(" %llu", binds[i].p[w]);
		printf("\n");
	}
	fprintf(stderr, "sp: modules loaded %llu patched %llu failed %llu (%.2f ms patching); launches %llu sampled %llu; toggles %lu (%.2f ms)\n",
		mod_loaded, patched_mods, patch_fail, patch_ms, launches, sampled, toggles, toggle_ms);
	if (!d_count) return;
	void *cu = dlopen("libcuda.so.1", RTLD_NOW);
	CUresult (*sync)(void) = dlsym(cu, "cuCtxSynchronize");
	CUresult (*setcur)(CUcontext) = dlsym(cu, "cuCtxSetCurrent");
	if (nctx) fprintf(stderr, "sp: set current %d\n", setcur(ctxs[0]));
	CUresult (*dtoh)(void *, CUdeviceptr, size_t) = dlsym(cu, "cuMemcpyDtoH_v2");
	fprintf(stderr, "sp: sync %d\n", sync());
	unsigned long long cnt[8];
	CUresult e = dtoh(cnt, (CUdeviceptr)(uintptr_t)d_count, 64);
	if (e) { fprintf(stderr, "sp: dtoh failed: %d (sync %d)\n", e, sync()); return; }
	printf("SP counts records=%llu loads=%llu stores=%llu\n", cnt[0], cnt[1], cnt[2]);
	unsigned long long n = cnt[0] < CAP ? cnt[0] : CAP;
	if (!n) return;
	unsigned long long *r = malloc(n * 32);
	dtoh(r, (CUdeviceptr)(uintptr_t)d_recs, n * 32);
	qsort(r, n, 32, by_lid);
	/* per kernel name: launches with records, records/launch min/max, mean window */
	struct { char name[48]; unsigned long long l, rmin, rmax, bad; double win; } k[64]; int nk = 0;
	for (unsigned long long i = 0; i < n;) {
		unsigned long long j = i, s = ~0ull, e = 0, bad = 0;
		for (; j < n && r[4 * j] == r[4 * i]; j++) { if (r[4*j+1] < s) s = r[4*j+1]; if (r[4*j+2] > e) e = r[4*j+2]; if (r[4*j+2] < r[4*j+1]) bad++; }
		unsigned long long lid = r[4 * i], cnt2 = j - i;
		const char *nm = lid < NAMES ? names[lid] : "?";
		int x = 0; for (; x < nk && strcmp(k[x].name, nm); x++) ;
		if (x == nk && nk < 64) { snprintf(k[nk].name, 48, "%s", nm); k[nk].l = 0; k[nk].rmin = ~0ull; k[nk].rmax = 0; k[nk].win = 0; k[nk].bad = 0; nk++; }
		if (x < nk) { k[x].l++; if (cnt2 < k[x].rmin) k[x].rmin = cnt2; if (cnt2 > k[x].rmax) k[x].rmax = cnt2; k[x].win += (e - s) / 1e3; k[x].bad += bad; }
		i = j;
	}
	for (int x = 0; x < nk; x++)
		printf("SP kernel %-47s launches %6llu warps/launch %llu..%llu window_us %.1f bad %llu\n", k[x].name, k[x].l, k[x].rmin, k[x].rmax, k[x].win / k[x].l, k[x].bad);
	free(r);
}
