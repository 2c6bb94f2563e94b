/*
 * sass_user.c - user GPU programs on the SASS route (sass.c): the
 * collector's patch module, assembled on the node and bound per context.
 *
 * The module comes from the collector (PATCH with load API 3, agent's
 * APISASS): gpuprobe/sanpatch's PTX, kernel_phases' patch functions
 * included, and one PATCHED global descriptor per global, whose initial
 * value in the module is the magic GP_SU_MAGIC + its index. It is
 * assembled once per device architecture with ptxas --compile-as-tools-patch
 * -maxrregcount=24 (sass_phases.cu says why 24): GPUPROBE_PTXAS, else the
 * ptxas that the application's own wheels carry (Triton's, PyTorch's, the
 * nvidia-cuda-nvcc wheel's), else one on the PATH. A node needs no CUDA
 * toolkit. The cubin is cached by the hash of (PTX, architecture) in
 * GPUPROBE_CACHE_DIR, $XDG_CACHE_HOME/gpuprobe or ~/.cache/gpuprobe.
 *
 * ptxas runs in a child process (posix_spawn, without LD_PRELOAD), as
 * Triton runs it; it is bounded to 60 s and killed after. Everything here
 * runs on sass.c's thread, never in a driver callback and never on the
 * launch path: binding a context's globals allocates device memory
 * (cuMemAlloc, cuMemHostRegister), which the Sanitizer API forbids in its
 * callbacks.
 *
 * Fails open: no module, no ptxas, a failed assembly or binding leaves the
 * context with the built-in image (kernel_phases' window only), logged once
 * (GP_TRACE).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gp.h"

#define GP_SU_MAGIC 0x4750534700000000ull /* agent.SASSMagicBase */
#define GP_SU_CUBIN_MAX (16u << 20)
#define GP_SU_GLOBALS 4096
#define GP_SU_ARCHS 8
#define GP_SU_PTXAS_NS (60ull * 1000000000ull)

extern char **environ;

/* One assembled module per architecture: state 1 ready, -1 none. */
static struct gp_su_mod {
	uint32_t arch;
	int state;
	uint8_t *cubin;
	size_t n;
	uint8_t *payload; /* the PATCHED payload: its global descriptors */
	uint32_t plen;
	const uint8_t *globals; /* the first global descriptor in payload */
	int mem; /* the module has the memory-access patch function */
	struct gp_sass_targets targets;
} gp_su_mods[GP_SU_ARCHS];

static uint64_t gp_su_fnv(uint64_t h, const void *p, size_t n)
{
	for (const uint8_t *b = p; n--; b++)
		h = (h ^ *b) * 0x100000001b3ull;
	return h;
}

/* gp_su_cache_path writes the cache file's path for key; -1 without one. */
static int gp_su_cache_path(char *out, size_t n, uint64_t key)
{
	const char *d = getenv("GPUPROBE_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
	char dir[512];
	if (d && d[0])
		snprintf(dir, sizeof dir, "%s", d);
	else if (x && x[0])
		snprintf(dir, sizeof dir, "%s/gpuprobe", x);
	else if (h && h[0])
		snprintf(dir, sizeof dir, "%s/.cache/gpuprobe", h);
	else
		return -1;
	if (mkdir(dir, 0700) != 0 && errno != EEXIST && !(d && d[0]))
		return -1;
	int w = snprintf(out, n, "%s/sass-%016llx.cubin", dir, (unsigned long long)key);
	return w > 0 && (size_t)w < n ? 0 : -1;
}

/* gp_su_read reads a cubin file (ours, regular, 1..GP_SU_CUBIN_MAX bytes,
 * an ELF). */
static uint8_t *gp_su_read(const char *path, size_t *n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	if (fd < 0)
		return NULL;
	uint8_t *b = NULL;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && st.st_size >= 64 &&
	    st.st_size <= GP_SU_CUBIN_MAX && (b = malloc((size_t)st.st_size)) != NULL) {
		*n = (size_t)st.st_size;
		if (read(fd, b, *n) != (ssize_t)*n || memcmp(b, "\177ELF", 4) != 0)
			free(b), b = NULL;
	}
	close(fd);
	return b;
}

static int gp_su_write(const char *path, const void *b, size_t n)
{
	char tmp[640];
	snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	int ok = write(fd, b, n) == (ssize_t)n;
	close(fd);
	if (!ok || rename(tmp, path) != 0) {
		unlink(tmp);
		return -1;
	}
	return 0;
}

/* ---- finding and running ptxas ---------------------------------------- */

/* gp_su_wheels adds the ptxas of the wheels beside each site-packages
 * directory the process maps a library from (at most max). */
static int gp_su_wheels(char (*out)[512], int max)
{
	static const char *const rel[] = {"triton/backends/nvidia/bin/ptxas", "torch/bin/ptxas",
					  "nvidia/cuda_nvcc/bin/ptxas", "nvidia/cu13/bin/ptxas"};
	FILE *f = fopen("/proc/self/maps", "re");
	int n = 0;
	char line[1024], seen[4][512] = {{0}};
	int nseen = 0;
	while (f && n < max && nseen < 4 && fgets(line, sizeof line, f)) {
		char *p = strchr(line, '/'), *s;
		if (p == NULL || ((s = strstr(p, "/site-packages/")) == NULL && (s = strstr(p, "/dist-packages/")) == NULL))
			continue;
		int len = (int)(s - p) + 15;
		int dup = 0;
		for (int i = 0; i < nseen; i++)
			dup |= strncmp(seen[i], p, (size_t)len) == 0 && seen[i][len] == 0;
		if (dup || len >= 400)
			continue;
		snprintf(seen[nseen++], sizeof seen[0], "%.*s", len, p);
		for (size_t i = 0; i < sizeof rel / sizeof rel[0] && n < max; i++) {
			snprintf(out[n], sizeof out[0], "%.*s%s", len, p, rel[i]);
			if (access(out[n], X_OK) == 0)
				n++;
		}
	}
	if (f)
		fclose(f);
	return n;
}

/* gp_su_candidates lists the ptxas to try, in order. */
static int gp_su_candidates(char (*out)[512], int max)
{
	const char *env = getenv("GPUPROBE_PTXAS");
	if (env && env[0]) {
		snprintf(out[0], sizeof out[0], "%s", env);
		return 1;
	}
	int n = gp_su_wheels(out, max - 1);
	snprintf(out[n++], sizeof out[0], "ptxas"); /* the PATH's, last */
	return n;
}

/* gp_su_env is environ without LD_PRELOAD (ptxas must not load the shim). */
static char **gp_su_env(void)
{
	size_t n = 0;
	while (environ && environ[n])
		n++;
	char **e = calloc(n + 1, sizeof *e);
	size_t k = 0;
	for (size_t i = 0; e && i < n; i++)
		if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0)
			e[k++] = environ[i];
	return e;
}

/* gp_su_run runs argv, bounded to GP_SU_PTXAS_NS; 0 when it exited 0. */
static int gp_su_run(char *const argv[], const char *log)
{
	posix_spawn_file_actions_t fa;
	pid_t pid;
	char **env = gp_su_env();
	if (env == NULL || posix_spawn_file_actions_init(&fa) != 0) {
		free(env);
		return -ENOMEM;
	}
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	int r = posix_spawnp(&pid, argv[0], &fa, NULL, argv, env);
	posix_spawn_file_actions_destroy(&fa);
	free(env);
	if (r != 0)
		return -r;
	struct timespec ts = {0, 10000000};
	for (uint64_t t0 = gp_now();;) {
		int st = 0;
		pid_t w = waitpid(pid, &st, WNOHANG);
		if (w == pid)
			return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -ECHILD;
		if (w < 0) /* the application reaped it: judge by the output */
			return errno == ECHILD ? 1 : -errno;
		if (gp_now() - t0 > GP_SU_PTXAS_NS) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -ETIMEDOUT;
		}
		nanosleep(&ts, NULL);
	}
}

/* gp_su_assemble turns the module's PTX into a cubin for sm_arch. */
static uint8_t *gp_su_assemble(const char *ptx, size_t len, uint32_t arch, size_t *n)
{
	uint64_t key = gp_su_fnv(gp_su_fnv(0xcbf29ce484222325ull, ptx, len), &arch, sizeof arch);
	char cache[600];
	int cached = gp_su_cache_path(cache, sizeof cache, key) == 0;
	uint8_t *b = cached ? gp_su_read(cache, n) : NULL;
	if (b != NULL) {
		GP_TRACE("sass: patch module for sm_%u from the cache (%s)", arch, cache);
		return b;
	}
	const char *tmpd = getenv("TMPDIR");
	char dir[512], in[560], out[560], log[560], archs[32];
	snprintf(dir, sizeof dir, "%s/gpuprobe-sass-XXXXXX", tmpd && tmpd[0] ? tmpd : "/tmp");
	if (mkdtemp(dir) == NULL)
		return NULL;
	snprintf(in, sizeof in, "%s/patch.ptx", dir);
	snprintf(out, sizeof out, "%s/patch.cubin", dir);
	snprintf(log, sizeof log, "%s/ptxas.log", dir);
	snprintf(archs, sizeof archs, "-arch=sm_%u", arch);
	if (gp_su_write(in, ptx, len) == 0) {
		char cand[6][512];
		int nc = gp_su_candidates(cand, 6);
		for (int i = 0; i < nc && b == NULL; i++) {
			char *argv[] = {cand[i], archs, "--compile-as-tools-patch", "-maxrregcount=24", in, "-o", out, NULL};
			unlink(out);
			uint64_t t0 = gp_now();
			int r = gp_su_run(argv, log);
			b = r >= 0 ? gp_su_read(out, n) : NULL;
			GP_TRACE("sass: %s %s: %s (%d) in %llu ms", cand[i], archs, b ? "assembled" : "failed", r,
				 (unsigned long long)((gp_now() - t0) / 1000000));
		}
	}
	unlink(in), unlink(out), unlink(log), rmdir(dir);
	if (b != NULL && cached && gp_su_write(cache, b, *n) != 0)
		GP_TRACE("sass: could not cache the patch module in %s", cache);
	return b;
}

/* ---- the module, per architecture ------------------------------------- */

static int gp_su_has(const uint8_t *b, size_t n, const char *name)
{
	return memmem(b, n, name, strlen(name) + 1) != NULL;
}

/* gp_su_targets reads the PATCHED kernel entries: program bit ParamIndex
 * probes the kernels its Name matches (agent's APISASS). */
static int gp_su_targets(struct gp_su_mod *m)
{
	const uint8_t *p = m->payload + 32, *end = m->payload + m->plen;
	uint32_t nk = rd32(m->payload + 4);
	if (nk > GP_SASS_PROGRAMS)
		return -1;
	for (uint32_t i = 0; i < nk; i++) {
		uint32_t bit = end - p >= 12 ? rd32(p) : GP_SASS_PROGRAMS, nl = end - p >= 12 ? rd32(p + 8) : 0;
		if (bit >= GP_SASS_PROGRAMS || nl == 0 || nl > 4096 || nl > (uint64_t)(end - p - 12) ||
		    (m->targets.pat[bit] = strndup((const char *)p + 12, nl)) == NULL) {
			GP_TRACE("sass: the patch module's program %u: bad target", i);
			return -1;
		}
		p += 12 + nl;
	}
	m->targets.n = nk, m->globals = p;
	return 0;
}

/* gp_su_mangled writes the name components of an Itanium-mangled name
 * joined by "::" into q and the last into last (inject's mangledBase):
 * 0 when it is not _Z<len><id>... or _ZN[rVK]<len><id>...E... */
static int gp_su_mangled(const char *s, char *q, size_t qn, const char **last, size_t *lastn)
{
	if (strncmp(s, "_Z", 2) != 0)
		return 0;
	s += 2;
	int nested = *s == 'N', parts = 0;
	if (nested)
		for (s++; *s == 'r' || *s == 'V' || *s == 'K'; s++)
			;
	size_t at = 0;
	while (*s >= '0' && *s <= '9') {
		size_t l = 0;
		for (; *s >= '0' && *s <= '9' && l <= 4096; s++)
			l = l * 10 + (size_t)(*s - '0');
		if (l == 0 || l > 4096 || strnlen(s, l) < l || at + l + 3 > qn)
			return 0;
		if (parts++)
			memcpy(q + at, "::", 2), at += 2;
		memcpy(q + at, s, l), at += l;
		*last = s, *lastn = l;
		s += l;
		if (!nested)
			break;
	}
	q[at] = 0;
	return parts;
}

static int gp_su_match1(const char *pat, const char *name)
{
	return strpbrk(pat, "*?[") ? fnmatch(pat, name, FNM_PATHNAME) == 0 : strcmp(pat, name) == 0;
}

/* gp_su_match says whether target pat names kernel name: exactly, by its
 * qualified or base name, or as a pattern over any of them (inject's
 * matchKernel). */
static int gp_su_match(const char *pat, const char *name)
{
	char q[1024], base[512];
	const char *last = NULL;
	size_t lastn = 0;
	if (gp_su_match1(pat, name))
		return 1;
	if (gp_su_mangled(name, q, sizeof q, &last, &lastn) == 0)
		return 0;
	if (gp_su_match1(pat, q))
		return 1;
	snprintf(base, sizeof base, "%.*s", (int)lastn, last);
	return strcmp(base, q) != 0 && gp_su_match1(pat, base);
}

/* The program bits of each kernel, by function handle, computed at its
 * first sampled launch; gen is sass.c's unload generation then. */
#define GP_SU_FUNCS 4096
static struct {
	uint64_t f;
	uint32_t gen;
	uint16_t mask;
} gp_su_funcs[GP_SU_FUNCS];

/* gp_sass_user_mask returns the program bits for a launch of f (name):
 * bit i when program i's target matches. Under sass.c's lock. */
GP_HIDDEN uint64_t gp_sass_user_mask(const struct gp_sass_targets *t, CUfunction f, const char *name, uint32_t gen)
{
	uint32_t h = (uint32_t)(((uint64_t)f * 0x9E3779B97F4A7C15ull) >> 52) % GP_SU_FUNCS;
	if (gp_su_funcs[h].f == (uint64_t)f && gp_su_funcs[h].gen == gen)
		return (uint64_t)gp_su_funcs[h].mask << GP_SASS_TARGET_SHIFT;
	uint16_t mask = 0;
	for (uint32_t i = 0; name && i < GP_SASS_PROGRAMS; i++)
		if (t->pat[i] && gp_su_match(t->pat[i], name))
			mask |= (uint16_t)(1u << i);
	gp_su_funcs[h].f = (uint64_t)f, gp_su_funcs[h].gen = gen, gp_su_funcs[h].mask = mask;
	return (uint64_t)mask << GP_SASS_TARGET_SHIFT;
}

/* gp_su_module fetches and assembles the module for arch once. */
static struct gp_su_mod *gp_su_module(uint32_t arch)
{
	struct gp_su_mod *m = NULL;
	for (int i = 0; i < GP_SU_ARCHS && m == NULL; i++)
		if (gp_su_mods[i].arch == arch || gp_su_mods[i].arch == 0)
			m = &gp_su_mods[i];
	if (m == NULL || m->arch == arch)
		return m;
	m->arch = arch, m->state = -1;
	void *ptx = NULL;
	size_t size = 0;
	m->payload = gp_patch_fetch(arch, &m->plen, &ptx, &size);
	if (m->payload == NULL) {
		GP_TRACE("sass: no patch module for sm_%u from the collector: kernel_phases' window only", arch);
		return m;
	}
	m->cubin = gp_su_assemble(ptx, size - 1, arch, &m->n);
	munmap(ptx, size);
	if (m->cubin == NULL || !gp_su_has(m->cubin, m->n, "__gpuprobe_sp_enter") ||
	    !gp_su_has(m->cubin, m->n, "__gpuprobe_sp_exit")) {
		GP_TRACE("sass: the patch module for sm_%u could not be assembled (GPUPROBE_PTXAS, or a ptxas in the "
			 "application's wheels): kernel_phases' window only", arch);
		return m;
	}
	m->mem = gp_su_has(m->cubin, m->n, "__gpuprobe_sp_mem");
	m->state = gp_su_targets(m) == 0 ? 1 : -1;
	return m;
}

/* gp_sass_user_bind returns, for context ctx, a copy of the module's cubin
 * with every global bound (kernel_phases' three are sass.c's to bind),
 * whether it has the memory-access function and its programs' targets; -1
 * to use the built-in image.
 * sass.c's thread only. */
GP_HIDDEN int gp_sass_user_bind(CUcontext ctx, uint8_t **img, size_t *n, int *mem,
				 const struct gp_sass_targets **targets)
{
	gp_drv_init();
	if (gp_drv.ctx_set == NULL || gp_drv.ctx_set(ctx) != CUDA_SUCCESS)
		return -1;
	uint32_t arch = gp_arch();
	struct gp_su_mod *m = arch ? gp_su_module(arch) : NULL;
	if (m == NULL || m->state != 1)
		return -1;
	const uint8_t *p = m->globals, *end = m->payload + m->plen;
	uint32_t ng = rd32(m->payload + 8);
	uint8_t *b = malloc(m->n);
	struct gp_allocs *allocs = calloc(1, sizeof *allocs); /* the context's: freed with it */
	if (b == NULL || allocs == NULL || ng > GP_SU_GLOBALS) {
		free(b), free(allocs);
		return -1;
	}
	memcpy(b, m->cubin, m->n);
	int mode, relaxed = gp_capture_relax(&mode), err = 0;
	pthread_mutex_lock(&gp_patch_mu);
	for (uint32_t i = 0; i < ng && err == 0; i++) {
		struct gp_gdesc g;
		uint64_t v = 0;
		const char *why = "";
		err = gp_global_next(&p, end, &g, &why);
		if (err == 0)
			err = gp_global_value("sass", &g, allocs, &v, &why);
		if (err == 0 && gp_sass_poke(b, m->n, GP_SU_MAGIC + i, v) == 0)
			err = -ENOENT, why = "its magic is not in the assembled module";
		if (err)
			GP_TRACE("sass: global %s of the patch module: %s (%d): kernel_phases' window only", g.name, why,
				 err);
		else
			GP_TRACE("sass: global %s (kind %u) = %#llx", g.name, g.kind, (unsigned long long)v);
	}
	pthread_mutex_unlock(&gp_patch_mu);
	gp_capture_restore(relaxed, mode);
	if (err) {
		for (uint32_t i = 0; i < allocs->n; i++)
			if (gp_drv.mem_free)
				gp_drv.mem_free(allocs->dev[i]);
		free(b), free(allocs);
		return -1;
	}
	*img = b, *n = m->n, *mem = m->mem, *targets = &m->targets;
	return 0;
}
