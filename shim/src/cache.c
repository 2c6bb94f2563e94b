/*
 * cache.c - the node's cache of compiled patched images, for the patch
 * thread (patch_async.c). The driver's JIT of a patched module takes up
 * to seconds, and a container starts with an empty JIT cache every time:
 * with GPUPROBE_CACHE_DIR set (the DaemonSet mounts a node directory
 * there), the patch thread compiles the patched PTX with cuLink* into a
 * cubin, loads that, and keeps it; a later process of the same uid loads
 * the cubin (no JIT).
 *
 * Key: SHA-256 of a version tag, the device's SM number, the driver's
 * version and the patched PTX (which holds the application's kernels and
 * the probes patched into them). Entry: <uid>/<key hex>.cubin, holding
 *
 *   offset  0  8 bytes  "GPCACHE1"
 *   offset  8  32       the key (again: the name must match it)
 *   offset 40  32       SHA-256 of the cubin
 *   offset 72  u64      the cubin's size (the file is 80 + size bytes)
 *   offset 80           the cubin
 *
 * Safety (docs/security.md): the per-uid directory is created 0700 and
 * used only when it is a directory owned by this uid with no group or
 * other access, opened without following links, entries too; so only
 * this uid (or root) writes what this process loads. An entry is written
 * to a temporary file of this thread's and renamed into place, so two
 * processes filling the same entry never tear it (the later rename wins,
 * both whole). An entry whose header, size or hash does not check out
 * (a crash mid-write is impossible, a full disk or a writer of this uid's
 * is not), or whose cubin the driver refuses, is removed and compiled
 * again, counted GP_PATCH_CACHE_CORRUPT. After a store the directory is
 * held under GPUPROBE_CACHE_MAX_MB (default 1024) by removing the entries
 * used least recently (a hit touches its entry), and temporary files
 * older than an hour (a writer that died).
 *
 * Without a usable directory, or where cuLink* is missing or fails, the
 * patched PTX is loaded as before (the driver's JIT), GP_PATCH_CACHE_OFF.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gp.h"

#define GP_CACHE_MAGIC "GPCACHE1"
#define GP_CACHE_HDR 80
#define GP_CACHE_MAX_ENTRY (512ull << 20) /* larger entries are refused, not read */
#define GP_CACHE_MAX_FILES 4096           /* eviction considers this many */

static struct {
	int dirfd; /* the uid's directory; -1: no cache */
	uint64_t max_bytes;
	int (*drv_version)(int *);
	CUresult (*link_create)(unsigned, void *, void *, void **);
	CUresult (*link_add)(void *, int, void *, size_t, const char *, unsigned, void *, void *);
	CUresult (*link_complete)(void *, void **, size_t *);
	CUresult (*link_destroy)(void *);
} gp_cache = {.dirfd = -1};
static pthread_once_t gp_cache_once = PTHREAD_ONCE_INIT;

static void gp_cache_open(void)
{
	const char *root = getenv("GPUPROBE_CACHE_DIR"), *mb = getenv("GPUPROBE_CACHE_MAX_MB");
	gp_cache.max_bytes = (mb && mb[0] ? strtoull(mb, NULL, 10) : 1024) << 20;
	*(void **)&gp_cache.drv_version = gp_cuda_sym("cuDriverGetVersion");
	*(void **)&gp_cache.link_create = gp_cuda_sym("cuLinkCreate_v2");
	*(void **)&gp_cache.link_add = gp_cuda_sym("cuLinkAddData_v2");
	*(void **)&gp_cache.link_complete = gp_cuda_sym("cuLinkComplete");
	*(void **)&gp_cache.link_destroy = gp_cuda_sym("cuLinkDestroy");
	if (root == NULL || root[0] == 0)
		return;
	if (!gp_cache.link_create || !gp_cache.link_add || !gp_cache.link_complete || !gp_cache.link_destroy) {
		GP_TRACE("cache %s: the driver has no cuLink*: not used", root);
		return;
	}
	int rfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	char uid[16];
	snprintf(uid, sizeof uid, "%u", (unsigned)geteuid());
	if (rfd >= 0 && mkdirat(rfd, uid, 0700) != 0 && errno != EEXIST)
		GP_TRACE("cache %s: mkdir %s: %s", root, uid, strerror(errno));
	int fd = rfd >= 0 ? openat(rfd, uid, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
		/* Another uid made it, or opened it up: what it holds is not ours to trust. */
		GP_TRACE("cache %s/%s: not a private directory of this uid's: not used", root, uid);
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	if (rfd >= 0)
		close(rfd);
	gp_cache.dirfd = fd;
	if (fd >= 0)
		GP_TRACE("cache %s/%s: on, at most %llu MiB", root, uid, (unsigned long long)(gp_cache.max_bytes >> 20));
}

static void gp_hex(const uint8_t *b, size_t n, char *out)
{
	static const char d[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++)
		out[2 * i] = d[b[i] >> 4], out[2 * i + 1] = d[b[i] & 15];
	out[2 * n] = 0;
}

/* gp_cache_key is the entry's key for ptx on the current device. */
static void gp_cache_key(const void *ptx, size_t size, uint8_t key[32])
{
	struct gp_sha256 s;
	uint32_t arch = gp_arch();
	int ver = 0;
	if (gp_cache.drv_version)
		gp_cache.drv_version(&ver);
	gp_sha256_init(&s);
	gp_sha256_add(&s, "gpuprobe-cache-1", 16);
	gp_sha256_add(&s, &arch, sizeof arch);
	gp_sha256_add(&s, &ver, sizeof ver);
	gp_sha256_add(&s, ptx, size);
	gp_sha256_end(&s, key);
}

static int gp_read_all(int fd, void *buf, size_t n)
{
	for (size_t got = 0; got < n;) {
		ssize_t r = read(fd, (char *)buf + got, n - got);
		if (r <= 0) {
			if (r < 0 && errno == EINTR)
				continue;
			return -1;
		}
		got += (size_t)r;
	}
	return 0;
}

static int gp_write_all(int fd, const void *buf, size_t n)
{
	for (size_t put = 0; put < n;) {
		ssize_t r = write(fd, (const char *)buf + put, n - put);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		put += (size_t)r;
	}
	return 0;
}

/* gp_cache_get reads and checks entry name for key: the cubin (malloc'd)
 * and its size; NULL when absent (*bad 0) or failing its check (*bad 1). */
static void *gp_cache_get(const char *name, const uint8_t key[32], size_t *size, int *bad)
{
	*bad = 0;
	int fd = openat(gp_cache.dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	uint8_t h[GP_CACHE_HDR], sum[32];
	struct stat st;
	void *buf = NULL;
	uint64_t n = 0;
	*bad = 1;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || gp_read_all(fd, h, sizeof h) != 0)
		goto out;
	memcpy(&n, h + 72, 8);
	if (memcmp(h, GP_CACHE_MAGIC, 8) != 0 || memcmp(h + 8, key, 32) != 0 || n == 0 || n > GP_CACHE_MAX_ENTRY ||
	    (uint64_t)st.st_size != GP_CACHE_HDR + n || (buf = malloc(n)) == NULL || gp_read_all(fd, buf, n) != 0)
		goto out;
	struct gp_sha256 s;
	gp_sha256_init(&s);
	gp_sha256_add(&s, buf, n);
	gp_sha256_end(&s, sum);
	if (memcmp(sum, h + 40, 32) != 0)
		goto out;
	futimens(fd, NULL); /* used now: evicted last */
	*bad = 0, *size = n;
	close(fd);
	return buf;
out:
	free(buf);
	close(fd);
	return NULL;
}

struct gp_centry {
	char name[80];
	time_t mtime;
	uint64_t size;
};

static int gp_centry_cmp(const void *a, const void *b)
{
	const struct gp_centry *x = a, *y = b;
	return (x->mtime > y->mtime) - (x->mtime < y->mtime);
}

/* gp_cache_evict holds the directory under max_bytes, oldest first, and
 * removes temporary files older than an hour. */
static void gp_cache_evict(void)
{
	int fd = openat(gp_cache.dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (d == NULL) {
		if (fd >= 0)
			close(fd);
		return;
	}
	struct gp_centry *es = calloc(GP_CACHE_MAX_FILES, sizeof *es);
	size_t n = 0;
	uint64_t total = 0;
	time_t now = time(NULL);
	for (struct dirent *e; es != NULL && (e = readdir(d)) != NULL;) {
		struct stat st;
		if (e->d_name[0] == '.' && strncmp(e->d_name, ".tmp.", 5) != 0)
			continue;
		if (fstatat(gp_cache.dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
			continue;
		if (e->d_name[0] == '.') {
			if (now - st.st_mtime > 3600)
				unlinkat(gp_cache.dirfd, e->d_name, 0);
			continue;
		}
		total += (uint64_t)st.st_size;
		if (n < GP_CACHE_MAX_FILES && strlen(e->d_name) < sizeof es[n].name) {
			strcpy(es[n].name, e->d_name);
			es[n].mtime = st.st_mtime, es[n].size = (uint64_t)st.st_size;
			n++;
		}
	}
	closedir(d);
	if (es == NULL)
		return;
	qsort(es, n, sizeof *es, gp_centry_cmp);
	for (size_t i = 0; i < n && total > gp_cache.max_bytes; i++)
		if (unlinkat(gp_cache.dirfd, es[i].name, 0) == 0) {
			total -= es[i].size;
			GP_TRACE("cache: evicted %s (%llu bytes)", es[i].name, (unsigned long long)es[i].size);
		}
	free(es);
}

/* gp_cache_put stores cubin as entry name for key: a temporary file of
 * this thread's, renamed into place. */
static void gp_cache_put(const char *name, const uint8_t key[32], const void *cubin, size_t size)
{
	static uint32_t seq;
	char tmp[64];
	snprintf(tmp, sizeof tmp, ".tmp.%d.%u.%u", (int)getpid(), gp_tid(), __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED));
	int fd = openat(gp_cache.dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	uint8_t h[GP_CACHE_HDR];
	uint64_t n = size;
	struct gp_sha256 s;
	memcpy(h, GP_CACHE_MAGIC, 8);
	memcpy(h + 8, key, 32);
	gp_sha256_init(&s);
	gp_sha256_add(&s, cubin, size);
	gp_sha256_end(&s, h + 40);
	memcpy(h + 72, &n, 8);
	int ok = gp_write_all(fd, h, sizeof h) == 0 && gp_write_all(fd, cubin, size) == 0;
	ok = close(fd) == 0 && ok;
	if (!ok || renameat(gp_cache.dirfd, tmp, gp_cache.dirfd, name) != 0) {
		unlinkat(gp_cache.dirfd, tmp, 0);
		GP_TRACE("cache: storing %s failed: %s", name, strerror(errno));
		return;
	}
	gp_cache_evict();
}

static CUresult gp_load_image(int lib, const void *img, uint64_t *m)
{
	if (lib)
		return gp_drv.lib_load_data ? gp_drv.lib_load_data((CUlibrary *)m, img, NULL, NULL, 0, NULL, NULL, 0)
					    : (CUresult)-1;
	return gp_drv.mod_load_data ? gp_drv.mod_load_data((CUmodule *)m, img) : (CUresult)-1;
}

GP_HIDDEN CUresult gp_cache_load(int lib, const void *ptx, size_t size, uint64_t *module, uint16_t *cache)
{
	pthread_once(&gp_cache_once, gp_cache_open);
	*cache = GP_PATCH_CACHE_OFF;
	if (gp_cache.dirfd < 0)
		return gp_load_image(lib, ptx, module);
	size = strnlen(ptx, size);
	uint8_t key[32];
	char name[72];
	gp_cache_key(ptx, size, key);
	gp_hex(key, 32, name);
	strcat(name, ".cubin");
	size_t n = 0;
	int bad = 0;
	void *cubin = gp_cache_get(name, key, &n, &bad);
	if (cubin != NULL) {
		CUresult r = gp_load_image(lib, cubin, module);
		free(cubin);
		if (r == CUDA_SUCCESS) {
			*cache = GP_PATCH_CACHE_HIT;
			GP_TRACE("cache: hit %s (%zu bytes)", name, n);
			return r;
		}
		bad = 1; /* checked, yet the driver refuses it */
	}
	if (bad) {
		unlinkat(gp_cache.dirfd, name, 0);
		GP_TRACE("cache: entry %s failed its check: removed, compiling again", name);
	}
	*cache = bad ? GP_PATCH_CACHE_CORRUPT : GP_PATCH_CACHE_MISS;
	void *ls = NULL, *out = NULL;
	CUresult r = gp_cache.link_create(0, NULL, NULL, &ls);
	if (r == CUDA_SUCCESS)
		r = gp_cache.link_add(ls, 1 /* CU_JIT_INPUT_PTX */, (void *)ptx, size + 1, "gpuprobe-patched", 0, NULL, NULL);
	if (r == CUDA_SUCCESS)
		r = gp_cache.link_complete(ls, &out, &n);
	if (r == CUDA_SUCCESS && out != NULL && n > 0 && (r = gp_load_image(lib, out, module)) == CUDA_SUCCESS)
		gp_cache_put(name, key, out, n);
	if (ls != NULL)
		gp_cache.link_destroy(ls);
	if (r == 218) /* CUDA_ERROR_INVALID_PTX: the driver's JIT would refuse it too */
		return r;
	if (r != CUDA_SUCCESS || out == NULL) {
		GP_TRACE("cache: linking the patched image failed (%d): loading it for the driver's JIT", r);
		*cache = GP_PATCH_CACHE_OFF;
		return gp_load_image(lib, ptx, module);
	}
	return r;
}
