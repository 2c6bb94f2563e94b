/*
 * handles.c - function handle -> kernel name, and the kernel-name records.
 *
 * cuModuleGetFunction, cuLibraryGetKernel and cuKernelGetFunction fill the
 * table; a launch looks its function up (lock-free: open addressing over a
 * fixed array, keys claimed with compare-and-swap) and writes the name
 * record once per handle and session before the launch record. A handle the
 * shim never saw being created (an entry point it does not wrap) is named
 * once through cuFuncGetName/cuKernelGetName (CUDA 12.3+) at its first
 * launch. Name records go to the names ring (see "name records" below). Names live in an append-only arena, so a reader never sees a
 * freed name; a handle reused for another kernel gets the new name and is
 * announced again.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#include "gp.h"

struct gp_name {
	uint64_t module;
	uint16_t len; /* 0: no name is known */
	uint16_t flags;
	char s[];
};

struct gp_entry {
	uint64_t key;          /* handle; 0 = empty (atomic) */
	struct gp_name *name;  /* atomic */
	uint32_t gen;          /* session generation of the last name record (claimed; 0: let go) */
	uint32_t pub;          /* ... once that record is in its rings (atomic; | GP_PUB_CUT: cut) */
};

#define GP_HBITS 16
#define GP_HSIZE (1u << GP_HBITS)
#define GP_PROBES 64
#define GP_ARENA_SIZE (16u << 20)

static struct gp_entry gp_tab[GP_HSIZE];
static struct gp_name gp_noname;
static char *gp_arena;
static size_t gp_arena_used;
static pthread_once_t gp_arena_once = PTHREAD_ONCE_INIT;

static void gp_arena_init(void)
{
	void *p = mmap(NULL, GP_ARENA_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	gp_arena = p == MAP_FAILED ? NULL : p;
}

/* gp_name_new copies a name into the arena (NULL when it is full). */
static struct gp_name *gp_name_new(uint64_t module, const char *s)
{
	size_t n = strnlen(s, GP_KERNEL_NAME_MAX + 1), sz;
	uint16_t flags = 0;
	struct gp_name *r;

	pthread_once(&gp_arena_once, gp_arena_init);
	if (gp_arena == NULL)
		return NULL;
	if (n > GP_KERNEL_NAME_MAX) {
		n = GP_KERNEL_NAME_MAX, flags = GP_KERNEL_NAME_TRUNCATED;
		while (n > 1 && ((unsigned char)s[n] & 0xC0) == 0x80)
			n--; /* at a UTF-8 character boundary */
	}
	sz = (sizeof *r + n + 1 + 7) & ~(size_t)7;
	size_t off = __atomic_fetch_add(&gp_arena_used, sz, __ATOMIC_RELAXED);
	if (off + sz > GP_ARENA_SIZE)
		return NULL;
	r = (struct gp_name *)(gp_arena + off);
	r->module = module;
	r->len = (uint16_t)n;
	r->flags = flags;
	memcpy(r->s, s, n);
	r->s[n] = 0;
	return r;
}

static inline uint32_t gp_hash(uint64_t k)
{
	return (uint32_t)((k * 0x9E3779B97F4A7C15ull) >> (64 - GP_HBITS));
}

/* gp_find returns the entry of key (creating it when asked), or NULL. */
static struct gp_entry *gp_find(uint64_t key, int create)
{
	uint32_t h = gp_hash(key);
	if (key == 0)
		return NULL;
	for (uint32_t i = 0; i < GP_PROBES; i++) {
		struct gp_entry *e = &gp_tab[(h + i) & (GP_HSIZE - 1)];
		uint64_t k = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);
		if (k == key)
			return e;
		if (k != 0)
			continue;
		if (!create)
			return NULL;
		if (__atomic_compare_exchange_n(&e->key, &k, key, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ||
		    k == key)
			return e;
	}
	return NULL;
}

GP_HIDDEN __thread struct gp_seen gp_seen[GP_SEEN] __attribute__((tls_model("initial-exec")));
GP_HOT_VAR GP_HIDDEN uint32_t gp_names_epoch;

static void gp_publish(struct gp_entry *e, struct gp_name *n)
{
	__atomic_store_n(&e->name, n, __ATOMIC_RELEASE);
	/* Announce (again): a launch skips the name record while pub equals
	 * the session generation, so both are reset, and so are the threads'
	 * caches of announced handles. */
	__atomic_store_n(&e->pub, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&e->gen, 0, __ATOMIC_RELEASE);
	__atomic_fetch_add(&gp_names_epoch, 1, __ATOMIC_ACQ_REL);
}

/* gp_seen_mark notes in this thread's cache that f's name record of
 * session gen is in the ring (epoch: gp_names_epoch when that was read). */
static void gp_seen_mark(uint64_t f, uint32_t gen, uint32_t epoch)
{
	struct gp_seen *s = gp_seen_slot(f);
	s->f = f, s->gen = gen, s->epoch = epoch;
}

GP_HIDDEN void gp_name_set(uint64_t handle, uint64_t module, const char *name)
{
	struct gp_entry *e;
	struct gp_name *old, *n;

	if (handle == 0 || name == NULL)
		return;
	e = gp_find(handle, 1);
	if (e == NULL)
		return;
	old = __atomic_load_n(&e->name, __ATOMIC_ACQUIRE);
	if (old && old->len && old->module == module && old->flags == 0 && strcmp(old->s, name) == 0)
		return; /* the same kernel looked up again */
	if ((n = gp_name_new(module, name)) != NULL)
		gp_publish(e, n);
}

GP_HIDDEN int gp_name_copy(uint64_t from, uint64_t to)
{
	struct gp_entry *f = gp_find(from, 0), *t;
	struct gp_name *n = f ? __atomic_load_n(&f->name, __ATOMIC_ACQUIRE) : NULL;
	if (n == NULL || n->len == 0 || (t = gp_find(to, 1)) == NULL)
		return 0;
	if (__atomic_load_n(&t->name, __ATOMIC_ACQUIRE) != n)
		gp_publish(t, n);
	return 1;
}

GP_HIDDEN const char *gp_name_of(uint64_t handle)
{
	struct gp_entry *e = gp_find(handle, 0);
	struct gp_name *n = e ? __atomic_load_n(&e->name, __ATOMIC_ACQUIRE) : NULL;
	return n && n->len ? n->s : NULL;
}

/* gp_resolve_unknown names a handle first seen at a launch. */
static struct gp_entry *gp_resolve_unknown(uint64_t f)
{
	static CUresult (*func_name)(const char **, CUfunction);
	static CUresult (*kern_name)(const char **, CUkernel);
	static int looked;
	const char *s = NULL;
	struct gp_entry *e;
	struct gp_name *n = NULL;

	if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
		func_name = (CUresult(*)(const char **, CUfunction))gp_cuda_sym("cuFuncGetName");
		kern_name = (CUresult(*)(const char **, CUkernel))gp_cuda_sym("cuKernelGetName");
		__atomic_store_n(&looked, 1, __ATOMIC_RELEASE);
	}
	if (func_name == NULL || func_name(&s, (CUfunction)f) != CUDA_SUCCESS || s == NULL) {
		s = NULL;
		if (kern_name == NULL || kern_name(&s, (CUkernel)f) != CUDA_SUCCESS)
			s = NULL;
	}
	e = gp_find(f, 1);
	if (e == NULL)
		return NULL;
	if (s != NULL && s[0])
		n = gp_name_new(0, s);
	GP_TRACE("launch of unseen function %p: named \"%s\" by the driver", (void *)f, s ? s : "(none)");
	struct gp_name *none = NULL;
	__atomic_compare_exchange_n(&e->name, &none, n ? n : &gp_noname, 0, __ATOMIC_ACQ_REL,
				    __ATOMIC_ACQUIRE);
	return e;
}

/* ---- name records ------------------------------------------------------
 *
 * A name goes whole into the session's names ring (GP_ROLE_NAME_RING: its
 * slots hold the largest record), which the collector reads before the
 * launch ring. Where it cannot:
 *   - no names ring (an older collector): into the launch ring, cut to its
 *     slot and flagged if it does not fit;
 *   - the names ring is full (more new kernels than it holds between two
 *     reads of the collector): into the launch ring the same way, and if it
 *     was cut, whole into the names ring at a later launch of the handle,
 *     once there is room (pub = gen | GP_PUB_CUT until then);
 *   - the launch ring is full too: nowhere; the claim is let go so that
 *     the handle's next launch writes it (before, it was marked written and
 *     the kernel stayed unnamed for the session).
 * A cut name is counted (names_cut) and flagged, never silent.
 */

/* e->pub of a handle whose name went cut into the launch ring while the
 * names ring was full: its whole name is still to go. Generations never
 * reach this bit. */
#define GP_PUB_CUT 0x80000000u

/* gp_name_room is the longest name whose record fits a slot of ring (0:
 * none). The stride is the server's and is read where it is used. */
static uint32_t gp_name_room(void *ring)
{
	uint32_t stride = __atomic_load_n(&((struct gpbr_header *)ring)->stride, __ATOMIC_RELAXED);
	uint32_t room = (stride > GPBR_SLOT_HEADER ? stride - GPBR_SLOT_HEADER : 0) & ~7u;
	return room > sizeof(struct gp_rec_kernel_name) ? room - (uint32_t)sizeof(struct gp_rec_kernel_name) : 0;
}

/* gp_ring_room: ring has a free slot now. Checked before a names ring is
 * written, so that a full one costs no drop (the name goes elsewhere). */
static int gp_ring_room(void *ring)
{
	const struct gpbr_header *h = ring;
	uint64_t tl = __atomic_load_n(gpbr_u64(ring, GPBR_RING_TAIL), __ATOMIC_ACQUIRE);
	uint64_t hd = __atomic_load_n(gpbr_u64(ring, GPBR_RING_HEAD), __ATOMIC_RELAXED);
	return hd - tl < __atomic_load_n(&h->max_entries, __ATOMIC_RELAXED);
}

/* The largest kernel_name record, on the stack of its writer. */
struct gp_name_buf {
	_Alignas(8) uint8_t b[sizeof(struct gp_rec_kernel_name) + GP_KERNEL_NAME_MAX + 8];
};

/* gp_name_rec builds f's record of name n cut to len bytes into buf and
 * returns its size. */
static uint32_t gp_name_rec(struct gp_name_buf *buf, const struct gp_name *n, uint64_t f, uint32_t len, uint16_t flags)
{
	struct gp_rec_kernel_name *k = (struct gp_rec_kernel_name *)buf->b;
	uint32_t size = (uint32_t)((sizeof *k + len + 7) & ~(size_t)7);
	memset(buf->b, 0, size);
	k->h.type = GP_REC_KERNEL_NAME;
	k->h.version = GP_REC_VERSION;
	k->h.size = size;
	k->function = f;
	k->module = n->module;
	k->pid = gp_pid();
	k->name_len = (uint16_t)len;
	k->flags = flags;
	memcpy(k->name, n->s, len);
	return size;
}

/* gp_put produces a record into ring: 1 when it is there. */
static int gp_put(void *ring, const struct gp_name_buf *buf, uint32_t size)
{
	int r = gpbr_ring_produce(ring, GP_REC_KERNEL_NAME, buf->b, size);
	GP_COUNT(published, r == GPBR_PUBLISHED);
	GP_COUNT(dropped, r != GPBR_PUBLISHED);
	return r == GPBR_PUBLISHED;
}

/* gp_name_write writes f's name record into the rings of session gen and
 * returns what e->pub becomes: gen, gen | GP_PUB_CUT, or 0 when it could
 * be written nowhere (see above). */
static uint32_t gp_name_write(const struct gp_name *n, uint64_t f, uint32_t gen)
{
	const struct gp_rings *rs = &gp_rings[gen & 1];
	void *names = __atomic_load_n(&rs->names, __ATOMIC_ACQUIRE);
	void *launch = __atomic_load_n(&rs->launch, __ATOMIC_ACQUIRE);
	struct gp_name_buf buf;
	uint32_t len = n->len, room;
	uint16_t flags = n->flags;
	int later = 0; /* the whole name can go into the names ring later */

	if (n->len == 0)
		return gen; /* no name is known: nothing to announce */
	if (names != NULL && len <= gp_name_room(names)) {
		if (gp_ring_room(names) && gp_put(names, &buf, gp_name_rec(&buf, n, f, len, flags)))
			return gen;
		later = 1;
	}
	if (launch == NULL || (room = gp_name_room(launch)) < 8)
		return gen; /* no slot holds a name: launches stay unnamed */
	if (len > room) {
		len = room;
		while (len > 1 && ((unsigned char)n->s[len] & 0xC0) == 0x80)
			len--; /* at a UTF-8 character boundary */
		flags |= GP_KERNEL_NAME_TRUNCATED;
	}
	if (!gp_put(launch, &buf, gp_name_rec(&buf, n, f, len, flags)))
		return 0;
	if (len == n->len)
		return gen;
	__atomic_fetch_add(&gp_stats.names_cut, 1, __ATOMIC_RELAXED);
	GP_TRACE("kernel name of %u bytes cut to %u for the launch ring (%s): %.*s...", n->len, len,
		 names == NULL ? "no names ring" : later ? "names ring full: whole at a later launch" : "names ring too small",
		 (int)(len < 64 ? len : 64), n->s);
	return later ? gen | GP_PUB_CUT : gen;
}

/* gp_name_again offers the whole name of a handle whose record went cut
 * into the launch ring to the names ring again (no wait, no drop counted
 * while it is full). Two threads may both write it: the collector takes
 * the same name twice. */
static void gp_name_again(struct gp_entry *e, const struct gp_name *n, uint64_t f, uint32_t gen, uint32_t epoch)
{
	void *names = __atomic_load_n(&gp_rings[gen & 1].names, __ATOMIC_ACQUIRE);
	struct gp_name_buf buf;
	uint32_t cut = gen | GP_PUB_CUT;
	if (names == NULL || !gp_ring_room(names) || !gp_put(names, &buf, gp_name_rec(&buf, n, f, n->len, n->flags)))
		return;
	if (__atomic_compare_exchange_n(&e->pub, &cut, gen, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		gp_seen_mark(f, gen, epoch);
	GP_TRACE("kernel name of %u bytes sent whole after a cut one", n->len);
	GP_COUNT(names, 1);
}

GP_HIDDEN void gp_name_emit(uint64_t f)
{
	/* The epoch is read first: a rename after it leaves the mark stale.
	 * The generation is read before its rings (gp_install's order). */
	uint32_t epoch = __atomic_load_n(&gp_names_epoch, __ATOMIC_ACQUIRE);
	uint32_t gen = __atomic_load_n(&gp_gen, __ATOMIC_ACQUIRE), g, p;
	struct gp_entry *e = gp_find(f, 0);
	struct gp_name *n;

	if (GP_UNLIKELY(e == NULL)) {
		if (f == 0 || (e = gp_resolve_unknown(f)) == NULL)
			return;
	}
	p = __atomic_load_n(&e->pub, __ATOMIC_ACQUIRE);
	if (GP_LIKELY(p == gen)) {
		gp_seen_mark(f, gen, epoch);
		return;
	}
	n = __atomic_load_n(&e->name, __ATOMIC_ACQUIRE);
	if (n == NULL)
		return;
	if (p == (gen | GP_PUB_CUT)) {
		gp_name_again(e, n, f, gen, epoch);
		return;
	}
	g = __atomic_load_n(&e->gen, __ATOMIC_ACQUIRE);
	if (g == gen || !__atomic_compare_exchange_n(&e->gen, &g, gen, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		/* Another thread is writing the name record: wait (bounded) so
		 * that this launch's record comes after it, unless it gives up. */
		for (int i = 0; i < 100000 && (__atomic_load_n(&e->pub, __ATOMIC_ACQUIRE) & ~GP_PUB_CUT) != gen &&
				__atomic_load_n(&e->gen, __ATOMIC_ACQUIRE) == gen;
		     i++)
#if defined(__x86_64__)
			__builtin_ia32_pause();
#else
			;
#endif
		return;
	}
	p = gp_name_write(n, f, gen);
	if (p == 0) {
		/* Written nowhere: let the claim go, the next launch tries again. */
		__atomic_store_n(&e->gen, 0, __ATOMIC_RELEASE);
		return;
	}
	__atomic_store_n(&e->pub, p, __ATOMIC_RELEASE);
	if (p == gen)
		gp_seen_mark(f, gen, epoch);
	GP_COUNT(names, 1);
}
