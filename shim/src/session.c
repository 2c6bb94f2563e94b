/*
 * session.c - the shim's end of the agent socket (wire format: package
 * github.com/gpuprobe/gpuprobe/gpuprobe/agentwire, doc.go).
 *
 * At the first CUDA load or launch of the process, the shim connects to the
 * socket (GPUPROBE_SOCKET, default /run/gpuprobe/agent.sock), sends HELLO
 * (with the application's OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES,
 * when set, for its resource) and waits for WELCOME with the region
 * memfds, all within GPUPROBE_TIMEOUT_MS (default 200 ms). It maps the
 * launch ring and the names ring (kernel_name records, handles.c) and keeps
 * the connection open (the collector learns from its closing that the
 * process is gone). Any
 * failure leaves the shim forwarding calls and recording nothing, and says
 * so in one line on stderr (gp_notice_unprobed); there is one attempt per
 * process (and per fork child). Before anything is sent the
 * server must be trusted (trust.c), and every descriptor it passes is
 * checked before it is mapped.
 *
 * If the collector goes away later, reconnect.c's thread notices, turns the
 * ring into limbo (gp_session_lost: records are counted, not kept) and
 * handshakes again with backoff; every send uses MSG_NOSIGNAL, so no
 * SIGPIPE reaches the application.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "gp.h"

GP_HOT_VAR GP_HIDDEN void *gp_ring_base;
GP_HOT_VAR GP_HIDDEN uint32_t gp_gen;
GP_HIDDEN int gp_state = GP_IDLE;
GP_HIDDEN struct gp_rings gp_rings[2];

GP_HIDDEN size_t gp_ring_size; /* bytes mapped at gp_ring_base */
static size_t gp_names_size;   /* bytes mapped at the session's names ring */
static int gp_sock = -1;
GP_HIDDEN int gp_timeout_ms = GP_DEFAULT_TIMEOUT_MS;
GP_HIDDEN struct gp_region gp_regions[GP_MAX_REGIONS];
GP_HIDDEN uint32_t gp_nregions;
GP_HOT_VAR GP_HIDDEN uint32_t gp_pid_cache;
static uint64_t gp_id_counter;
GP_HIDDEN __thread struct gp_thread gp_self __attribute__((tls_model("initial-exec")));

#define GP_ID_BLOCK 1024

/* Slow paths of gp_pid, gp_tid and gp_next_launch_id (gp.h): the first
 * call of a process, of a thread, and every GP_ID_BLOCK ids. */
GP_HIDDEN uint32_t gp_pid_slow(void)
{
	uint32_t p = (uint32_t)getpid();
	__atomic_store_n(&gp_pid_cache, p, __ATOMIC_RELAXED);
	return p;
}

GP_HIDDEN uint32_t gp_tid_slow(void)
{
	gp_self.tid = (uint32_t)gettid();
	return gp_self.tid;
}

GP_HIDDEN uint64_t gp_ids_handed(void) { return __atomic_load_n(&gp_id_counter, __ATOMIC_RELAXED); }

GP_HIDDEN uint64_t gp_next_launch_id_slow(void)
{
	uint64_t b = __atomic_fetch_add(&gp_id_counter, GP_ID_BLOCK, __ATOMIC_RELAXED);
	gp_self.next_id = b + 2; /* ids start at 1; this call takes b + 1 */
	gp_self.end_id = b + 1 + GP_ID_BLOCK;
	return b + 1;
}

static CUresult (*gp_ctx_get_device)(CUdevice *);

/* gp_device returns the ordinal of the calling thread's current device. */
GP_HIDDEN uint32_t gp_device(void)
{
	CUdevice d = 0;
	if (gp_ctx_get_device == NULL || gp_ctx_get_device(&d) != CUDA_SUCCESS)
		return 0;
	return (uint32_t)d;
}

/* ---- handshake ------------------------------------------------------- */

#define GP_MAGIC 0x41425047u
#define GP_FRAME_HELLO 1u
#define GP_FRAME_WELCOME 2u
#define GP_FRAME_ERROR 3u
#define GP_MAX_PAYLOAD 65536u
#define GP_DESC_SIZE 64u

static uint32_t gp_le32(const uint8_t *b) { return b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24; }
static uint16_t gp_le16(const uint8_t *b) { return (uint16_t)(b[0] | b[1] << 8); }
static uint64_t gp_le64(const uint8_t *b) { return gp_le32(b) | (uint64_t)gp_le32(b + 4) << 32; }
static void gp_put32(uint8_t *b, uint32_t v)
{
	b[0] = (uint8_t)v, b[1] = (uint8_t)(v >> 8), b[2] = (uint8_t)(v >> 16), b[3] = (uint8_t)(v >> 24);
}

static int gp_remaining_ms(uint64_t deadline)
{
	uint64_t now = gp_now();
	return now >= deadline ? 0 : (int)((deadline - now + 999999) / 1000000);
}

static int gp_wait(int fd, short ev, uint64_t deadline)
{
	struct pollfd p = {.fd = fd, .events = ev};
	for (;;) {
		int ms = gp_remaining_ms(deadline);
		if (ms == 0)
			return -ETIMEDOUT;
		int n = poll(&p, 1, ms);
		if (n > 0)
			return 0;
		if (n == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
}

/* gp_recv_all reads n bytes, collecting SCM_RIGHTS descriptors into fds. */
static int gp_recv_all(int fd, uint8_t *buf, size_t n, int *fds, int *nfds, uint64_t deadline)
{
	size_t got = 0;
	while (got < n) {
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(sizeof(int) * GP_MAX_REGIONS)];
		} cb;
		struct iovec iov = {.iov_base = buf + got, .iov_len = n - got};
		struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb.b,
				   .msg_controllen = sizeof cb.b};
		int err = gp_wait(fd, POLLIN, deadline);
		if (err)
			return err;
		ssize_t r = recvmsg(fd, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			int *in = (int *)CMSG_DATA(c);
			for (size_t i = 0; i < k; i++) {
				if (*nfds < (int)GP_MAX_REGIONS)
					fds[(*nfds)++] = in[i];
				else
					close(in[i]);
			}
		}
		if (r == 0)
			return -ECONNRESET;
		got += (size_t)r;
	}
	return 0;
}

static int gp_send_all(int fd, const uint8_t *buf, size_t n, uint64_t deadline)
{
	size_t sent = 0;
	while (sent < n) {
		int err = gp_wait(fd, POLLOUT, deadline);
		if (err)
			return err;
		ssize_t r = send(fd, buf + sent, n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		sent += (size_t)r;
	}
	return 0;
}

/* gp_regions_drop closes the kept region memfds (the mappings of bound
 * regions stay: device code may use them). */
static void gp_regions_drop(void)
{
	for (uint32_t i = 0; i < gp_nregions; i++)
		if (gp_regions[i].fd >= 0)
			close(gp_regions[i].fd), gp_regions[i].fd = -1;
	gp_nregions = 0;
}

/* gp_agent_exchange sends one frame (with sendfd as SCM_RIGHTS when >= 0)
 * on the session socket and reads frames until one of want_type (or
 * FRAME_ERROR) whose first u32 is id arrives, within timeout_ms. The
 * payload (malloc'd) and at most one received descriptor are returned.
 * Callers serialise (patch.c holds its lock). */
GP_HIDDEN int gp_agent_exchange(const uint8_t *frame, size_t n, int sendfd, uint32_t id, uint32_t *type,
				uint8_t **payload, uint32_t *plen, int *recvfd)
{
	uint64_t deadline = gp_now() + (uint64_t)gp_timeout_ms * 1000000u;
	int fd = gp_sock, err;
	*payload = NULL, *recvfd = -1;
	if (fd < 0)
		return -ENOTCONN;
	if (sendfd >= 0) {
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(sizeof(int))];
		} cb;
		memset(&cb, 0, sizeof cb);
		struct iovec iov = {.iov_base = (void *)frame, .iov_len = n};
		struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb.b, .msg_controllen = sizeof cb.b};
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &sendfd, sizeof(int));
		if ((err = gp_wait(fd, POLLOUT, deadline)) != 0)
			return err;
		ssize_t r = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (r < 0)
			return -errno;
		if ((err = gp_send_all(fd, frame + r, n - (size_t)r, deadline)) != 0)
			return err;
	} else if ((err = gp_send_all(fd, frame, n, deadline)) != 0) {
		return err;
	}
	for (;;) {
		uint8_t hdr[12];
		int fds[GP_MAX_REGIONS], nfds = 0;
		if ((err = gp_recv_all(fd, hdr, sizeof hdr, fds, &nfds, deadline)) != 0)
			goto out;
		uint32_t len = gp_le32(hdr + 8), t = gp_le16(hdr + 6);
		if (gp_le32(hdr) != GP_MAGIC || gp_le16(hdr + 4) != GP_PROTO || len > GP_MAX_PAYLOAD) {
			err = -EPROTO;
			goto out;
		}
		uint8_t *p = malloc(len ? len : 1);
		if (p == NULL) {
			err = -ENOMEM;
			goto out;
		}
		if ((err = gp_recv_all(fd, p, len, fds, &nfds, deadline)) != 0) {
			free(p);
			goto out;
		}
		if (t == GP_FRAME_ERROR || (len >= 4 && gp_le32(p) == id)) {
			*type = t, *payload = p, *plen = len;
			if (nfds > 0)
				*recvfd = fds[0];
			for (int i = 1; i < nfds; i++)
				close(fds[i]);
			return 0;
		}
		/* A late answer to a request given up on: skip it. */
		free(p);
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		continue;
	out:
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		return err;
	}
}

/* The application's OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, for
 * HELLO's resource extension (doc.go), read at the first handshake of the
 * process (or fork child) and kept for its reconnects. */
GP_HIDDEN int gp_res_ext;
static char gp_res_service[GP_MAX_SERVICE], gp_res_attrs[GP_MAX_RES_ATTRS];
static uint32_t gp_res_slen, gp_res_alen, gp_res_omitted;

/* gp_res_take copies the variable name into buf (cap bytes), or flags it
 * omit when it is longer; returns its length kept. */
static uint32_t gp_res_take(const char *name, char *buf, size_t cap, uint32_t omit)
{
	const char *v = getenv(name);
	size_t n = v ? strnlen(v, cap + 1) : 0;
	if (n > cap) {
		gp_res_omitted |= omit;
		GP_TRACE("%s is longer than %zu bytes: not sent to the collector", name, cap);
		return 0;
	}
	memcpy(buf, v, n);
	return (uint32_t)n;
}

static void gp_res_read(void)
{
	gp_res_omitted = 0;
	gp_res_slen = gp_res_take("OTEL_SERVICE_NAME", gp_res_service, sizeof gp_res_service, GP_RES_OMIT_SERVICE);
	gp_res_alen = gp_res_take("OTEL_RESOURCE_ATTRIBUTES", gp_res_attrs, sizeof gp_res_attrs, GP_RES_OMIT_ATTRS);
	gp_res_ext = gp_res_slen > 0 || gp_res_alen > 0 || gp_res_omitted != 0;
}

/* GP_HELLO_MAX: the largest HELLO frame gp_hello writes. */
#define GP_HELLO_MAX (12 + 12 + 256 + 16 + 16 + GP_MAX_SERVICE + GP_MAX_RES_ATTRS)

/* gp_hello encodes HELLO; with ext, flags bit 0 and the reconnect
 * extension (doc.go: lost records and earlier sessions) follow the name,
 * then with gp_res_ext flags bit 1 and the resource extension. */
static size_t gp_hello(uint8_t *b, int ext, uint64_t lost, uint32_t sessions)
{
	const char *name = program_invocation_short_name;
	size_t nlen = name ? strnlen(name, 256) : 0, n = 12 + nlen;
	uint32_t flags = (ext ? GP_HELLO_RECONNECT : 0) | (gp_res_ext ? GP_HELLO_RESOURCE : 0);
	gp_put32(b, GP_MAGIC);
	b[4] = GP_PROTO, b[5] = 0, b[6] = GP_FRAME_HELLO, b[7] = 0;
	gp_put32(b + 12, gp_pid());
	gp_put32(b + 16, flags);
	gp_put32(b + 20, (uint32_t)nlen);
	memcpy(b + 24, name, nlen);
	if (ext) {
		uint8_t *e = b + 12 + n;
		gp_put32(e, (uint32_t)lost), gp_put32(e + 4, (uint32_t)(lost >> 32));
		gp_put32(e + 8, sessions), gp_put32(e + 12, 0);
		n += 16;
	}
	if (gp_res_ext) {
		uint8_t *e = b + 12 + n;
		gp_put32(e, gp_res_slen), gp_put32(e + 4, gp_res_alen);
		gp_put32(e + 8, gp_res_omitted), gp_put32(e + 12, 0);
		memcpy(e + 16, gp_res_service, gp_res_slen);
		memcpy(e + 16 + gp_res_slen, gp_res_attrs, gp_res_alen);
		n += 16 + gp_res_slen + gp_res_alen;
	}
	gp_put32(b + 8, (uint32_t)n);
	return 12 + n;
}

/* gp_map_ring maps ring region i of the WELCOME (the launch or the names
 * ring) and checks its header; NULL when it is unusable (traced). */
static void *gp_map_ring(int fd, uint64_t size, uint32_t i, const char *what)
{
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return NULL;
	int ck = gpbr_check(m, size, GPBR_KIND_RING);
	if (ck != GPBR_OK) {
		GP_TRACE("%s %u rejected: gpbr_check = %d", what, i, ck);
		munmap(m, size);
		return NULL;
	}
	return m;
}

/* gp_take_regions checks the WELCOME's descriptors and their fds into c
 * (fds duplicated) and maps the launch ring and the names ring. A region
 * whose fd fails its checks is kept unusable (size 0): mapping it could
 * SIGBUS. */
static void gp_take_regions(struct gp_conn *c, const uint8_t *payload, uint32_t count, const int *fds)
{
	for (uint32_t i = 0; i < count; i++) {
		const uint8_t *d = payload + 8 + i * GP_DESC_SIZE;
		uint32_t role = gp_le32(d);
		uint16_t kind = gp_le16(d + 4), flags = gp_le16(d + 6);
		uint64_t size = gp_le64(d + 8);
		const char *why = "";
		struct gp_region *r = &c->regions[i];
		memset(r, 0, sizeof *r);
		/* Every region is kept (its descriptor) for patched modules'
		 * globals, which are mapped on first use (patch.c). A region with
		 * flags this shim does not know is kept unusable (size 0). */
		r->fd = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
		r->size = flags & ~GP_DESC_NOHEADER ? 0 : size;
		r->role = role, r->kind = kind, r->flags = flags;
		c->nregions = i + 1;
		int bad = size == 0 || size > ((uint64_t)1 << 40) ||
			  ((flags & GP_DESC_NOHEADER) && size % 4096 != 0);
		int err = bad ? -EINVAL : gp_fd_check(fds[i], size, F_SEAL_SHRINK, flags & GP_DESC_NOHEADER, &why);
		if (err) {
			GP_TRACE("region %u (role %u, %llu bytes) refused: %s (%d)", i, role, (unsigned long long)size,
				 bad ? "size" : why, err);
			r->size = 0;
			continue;
		}
		if (kind != GPBR_KIND_RING || flags != 0 || size < GPBR_DATA_OFFSET)
			continue; /* other roles: later steps (maps, mailbox) */
		if (role == GP_ROLE_LAUNCH_RING && c->ring == NULL) {
			if ((c->ring = gp_map_ring(fds[i], size, i, "launch ring")) != NULL)
				c->ring_size = size;
		} else if (role == GP_ROLE_NAME_RING && c->names == NULL) {
			if ((c->names = gp_map_ring(fds[i], size, i, "names ring")) != NULL)
				c->names_size = size;
		}
	}
}

/* gp_conn_drop closes what a failed handshake took. */
static void gp_conn_drop(struct gp_conn *c)
{
	for (uint32_t i = 0; i < c->nregions; i++)
		if (c->regions[i].fd >= 0)
			close(c->regions[i].fd);
	if (c->ring != NULL)
		munmap(c->ring, c->ring_size);
	if (c->names != NULL)
		munmap(c->names, c->names_size);
	if (c->fd >= 0)
		close(c->fd);
	c->nregions = 0, c->ring = NULL, c->names = NULL, c->fd = -1;
}

/* gp_handshake connects to a trusted server (trust.c), sends HELLO (with
 * the reconnect extension when ext) and takes the WELCOME into c; returns
 * 0 or -errno and a reason (c->refused: an ERROR frame's code). */
GP_HIDDEN int gp_handshake(const char *path, int timeout_ms, int ext, uint64_t lost, uint32_t sessions,
			   struct gp_conn *c, const char **why)
{
	uint64_t deadline = gp_now() + (uint64_t)timeout_ms * 1000000u;
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	uint8_t hdr[12], *payload = NULL, hello[GP_HELLO_MAX];
	int fds[GP_MAX_REGIONS], nfds = 0, fd, err;

	memset(c, 0, sizeof *c);
	c->fd = -1;
	if (strlen(path) >= sizeof addr.sun_path)
		return *why = "socket path too long", -ENAMETOOLONG;
	if ((err = gp_trust_path(path, why)) != 0)
		return err;
	memcpy(addr.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return *why = "socket", -errno;
	if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
		err = -errno;
		if (errno != EINPROGRESS && errno != EAGAIN) {
			*why = "connect";
			goto fail;
		}
		if ((err = gp_wait(fd, POLLOUT, deadline)) != 0) {
			*why = "connect";
			goto fail;
		}
	}
	/* Before anything is sent or received: who serves the socket. */
	if ((err = gp_trust_peer(fd, why)) != 0)
		goto fail;
	if ((err = gp_send_all(fd, hello, gp_hello(hello, ext, lost, sessions), deadline)) != 0) {
		*why = "sending HELLO";
		goto fail;
	}
	/* WELCOME or ERROR */
	if ((err = gp_recv_all(fd, hdr, sizeof hdr, fds, &nfds, deadline)) != 0) {
		*why = "reading the answer";
		goto fail;
	}
	uint32_t len = gp_le32(hdr + 8), type = gp_le16(hdr + 6);
	if (gp_le32(hdr) != GP_MAGIC || gp_le16(hdr + 4) != GP_PROTO || len > GP_MAX_PAYLOAD) {
		err = -EPROTO, *why = "bad frame header";
		goto fail;
	}
	payload = malloc(len ? len : 1);
	if (payload == NULL) {
		err = -ENOMEM, *why = "malloc";
		goto fail;
	}
	if ((err = gp_recv_all(fd, payload, len, fds, &nfds, deadline)) != 0) {
		*why = "reading the answer";
		goto fail;
	}
	if (type == GP_FRAME_ERROR) {
		uint32_t code = len >= 8 ? gp_le32(payload) : 0, mlen = len >= 8 ? gp_le32(payload + 4) : 0;
		if (mlen > len - 8)
			mlen = 0;
		GP_TRACE("agent refused the connection: code %u: %.*s", code, (int)mlen, (char *)payload + 8);
		c->refused = code;
		err = -EACCES, *why = "refused by the collector";
		goto fail;
	}
	uint32_t count = len >= 8 ? gp_le32(payload + 4) : 0;
	/* The descriptors, then (from a collector that has them)
	 * GP_SETTINGS_SIZE bytes of settings. */
	uint32_t end = 8 + count * GP_DESC_SIZE;
	if (type != GP_FRAME_WELCOME || len < 8 || count > GP_MAX_REGIONS || (len != end && len != end + GP_SETTINGS_SIZE) ||
	    (int)count != nfds) {
		err = -EPROTO, *why = "malformed WELCOME";
		goto fail;
	}
	if (len == end + GP_SETTINGS_SIZE)
		c->settings = gp_le32(payload + end), c->flush_us = gp_le32(payload + end + 4),
		c->max_rate = gp_le32(payload + end + 8), c->stack_rate = gp_le32(payload + end + 12);
	gp_take_regions(c, payload, count, fds);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	nfds = 0;
	if (c->ring == NULL) {
		err = -ENOENT, *why = "no usable launch ring in WELCOME";
		goto fail;
	}
	GP_TRACE("connected to %s: session %u, launch ring %zu bytes (%u slots of %u bytes)", path,
		 gp_le32(payload), c->ring_size, ((struct gpbr_header *)c->ring)->max_entries,
		 ((struct gpbr_header *)c->ring)->stride);
	if (c->names != NULL)
		GP_TRACE("names ring %zu bytes (%u slots of %u bytes)", c->names_size,
			 ((struct gpbr_header *)c->names)->max_entries, ((struct gpbr_header *)c->names)->stride);
	else
		GP_TRACE("no names ring: kernel names longer than a launch slot's %u bytes are cut (and flagged)",
			 ((struct gpbr_header *)c->ring)->stride - GPBR_SLOT_HEADER -
				 (uint32_t)sizeof(struct gp_rec_kernel_name));
	free(payload);
	c->fd = fd;
	return 0;
fail:
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	free(payload);
	close(fd);
	gp_conn_drop(c);
	return err;
}

/* gp_install makes c the session: regions, socket, the new generation's
 * rings (gp_rings), the generation, then the launch ring that the launch
 * path reads (one acquire load of gp_ring_base). A launch that reads the
 * new ring so reads the new generation, and announces its kernel's name
 * again into the new rings before its record. The previous session's
 * region mappings stay: device code of modules bound to them may still
 * use them. */
GP_HIDDEN void gp_install(struct gp_conn *c)
{
	pthread_mutex_lock(&gp_patch_mu);
	gp_regions_drop();
	memcpy(gp_regions, c->regions, sizeof gp_regions);
	gp_nregions = c->nregions;
	gp_sock = c->fd;
	gp_ring_size = c->ring_size;
	gp_names_size = c->names_size;
	gp_devices_announce(c->ring); /* the collector keys devices per session */
	uint32_t g = gp_gen + 1;
	__atomic_store_n(&gp_rings[g & 1].launch, c->ring, __ATOMIC_RELEASE);
	__atomic_store_n(&gp_rings[g & 1].names, c->names, __ATOMIC_RELEASE);
	__atomic_store_n(&gp_gen, g, __ATOMIC_RELEASE);
	__atomic_store_n(&gp_ring_base, c->ring, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&gp_patch_mu);
	gp_stack_start(c->stack_rate);
}

/* gp_limbo turns a dead session's ring at p (size bytes) into private zero
 * pages at the same addresses (see gp_session_lost). */
static void gp_limbo(void *p, size_t size, const char *what)
{
	if (p != NULL && mmap(p, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
				 MAP_FAILED)
		GP_TRACE("%s: cannot replace it (%d); records keep going into it", what, errno);
}

/* gp_session_lost closes the dead session's socket and turns its launch
 * and names rings into limbo: the same addresses, now private zeroed
 * memory, whose all-zero header makes every reservation fail and count a
 * drop (at GPBR_RING_DROPPED). A launch that read the old pointer keeps
 * writing inside that range, so nothing is unmapped; the collector's memfd
 * is let go. Returns the launch records the old collector never consumed
 * (names are announced again in the next session). */
GP_HIDDEN uint64_t gp_session_lost(void)
{
	uint64_t unread = 0;
	gp_sass_pause();
	pthread_mutex_lock(&gp_patch_mu);
	if (gp_sock >= 0)
		close(gp_sock), gp_sock = -1;
	void *ring = __atomic_load_n(&gp_ring_base, __ATOMIC_ACQUIRE);
	if (ring != NULL) {
		const struct gpbr_header *h = ring;
		uint64_t hd = __atomic_load_n(gpbr_u64(ring, GPBR_RING_HEAD), __ATOMIC_ACQUIRE);
		uint64_t tl = __atomic_load_n(gpbr_u64(ring, GPBR_RING_TAIL), __ATOMIC_ACQUIRE);
		unread = hd - tl > h->max_entries ? h->max_entries : hd - tl;
		gp_limbo(ring, gp_ring_size, "launch ring");
		gp_limbo(gp_rings[gp_gen & 1].names, gp_names_size, "names ring");
	}
	pthread_mutex_unlock(&gp_patch_mu);
	return unread;
}

/* gp_limbo_dropped: records attempted into the limbo ring so far. */
GP_HIDDEN uint64_t gp_limbo_dropped(void)
{
	void *ring = __atomic_load_n(&gp_ring_base, __ATOMIC_ACQUIRE);
	return ring ? __atomic_load_n(gpbr_u64(ring, GPBR_RING_DROPPED), __ATOMIC_RELAXED) : 0;
}

/* gp_notice_unprobed writes one line on stderr at the first failed
 * handshake: without it an application runs unprobed without a word.
 * Once per process tree (a fork child inherits gp_noticed), not when the
 * trace already says it on stderr, and never with GPUPROBE_QUIET set (and
 * not 0). */
static int gp_noticed;

static void gp_notice_unprobed(const char *path, const char *why, int err)
{
	const char *q = getenv("GPUPROBE_QUIET"), *t = getenv("GPUPROBE_TRACE");
	if (gp_noticed || (q && q[0] && strcmp(q, "0") != 0) || (t && strcmp(t, "1") == 0))
		return;
	gp_noticed = 1;
	char buf[512];
	int n = snprintf(buf, sizeof buf,
			 "gpuprobe[%d]: no collector at %s (%s: %s); running unprobed (GPUPROBE_QUIET=1 silences this)\n",
			 (int)getpid(), path, why, strerror(-err));
	if (n > (int)sizeof buf - 1)
		n = (int)sizeof buf - 1, buf[n - 1] = '\n';
	if (n > 0) {
		ssize_t w = write(2, buf, (size_t)n);
		(void)w;
	}
}

/* gp_connect runs the handshake once (per process or fork child); callers
 * that arrive while it runs do not wait: they record nothing meanwhile. */
GP_HIDDEN int gp_patch_enabled;

GP_HIDDEN void gp_connect(void)
{
	int idle = GP_IDLE;
	const char *path, *why = "";
	int ms = GP_DEFAULT_TIMEOUT_MS, err;

	if (!__atomic_compare_exchange_n(&gp_state, &idle, GP_CONNECTING, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_RELAXED))
		return;
	if (gp_ctx_get_device == NULL)
		gp_ctx_get_device = (CUresult(*)(CUdevice *))gp_cuda_sym("cuCtxGetDevice");
	path = getenv("GPUPROBE_SOCKET");
	if (path == NULL || path[0] == 0)
		path = GP_DEFAULT_SOCKET;
	const char *t = getenv("GPUPROBE_TIMEOUT_MS");
	if (t && t[0]) {
		char *end;
		long v = strtol(t, &end, 10);
		if (*end == 0 && v > 0 && v <= 60000)
			ms = (int)v;
		else
			GP_TRACE("GPUPROBE_TIMEOUT_MS=%s is not 1..60000; using %d", t, ms);
	}
	/* Device probes are the collector's to decide (it answers NOPATCH when
	 * its configuration has none); GPUPROBE_PATCH=0 keeps an application's
	 * modules from being sent at all. */
	const char *pe = getenv("GPUPROBE_PATCH");
	gp_patch_enabled = !(pe && strcmp(pe, "0") == 0);
	const char *off = getenv("GPUPROBE_DISABLE");
	if (off && off[0] && strcmp(off, "0") != 0) {
		GP_TRACE("GPUPROBE_DISABLE is set: forwarding only");
		__atomic_store_n(&gp_state, GP_OFF, __ATOMIC_RELEASE);
		return;
	}
	gp_trust_init();
	gp_res_read();
	gp_spanctx_env();
	struct gp_conn c;
	err = gp_handshake(path, ms, 0, 0, 0, &c, &why);
	if (err && c.refused == GP_ERROR_PROTOCOL && gp_res_ext) {
		/* A collector older than the resource extension. */
		GP_TRACE("the collector refused the HELLO resource extension; trying without");
		gp_res_ext = 0;
		err = gp_handshake(path, ms, 0, 0, 0, &c, &why);
	}
	if (err) {
		GP_TRACE("no collector at %s (%s: %s); forwarding only", path, why, strerror(-err));
		gp_notice_unprobed(path, why, err);
		__atomic_store_n(&gp_state, GP_OFF, __ATOMIC_RELEASE);
		return;
	}
	gp_timeout_ms = ms;
	uint32_t settings = c.settings, flush_us = c.flush_us, max_rate = c.max_rate;
	gp_install(&c);
	__atomic_store_n(&gp_state, GP_READY, __ATOMIC_RELEASE);
	gp_reconnect_start(path, c.fd);
	/* The SASS route first: when the collector does not want it, its
	 * subscription is released so that CUPTI can subscribe. */
	gp_sass_start((settings & GP_SET_SASS) != 0, max_rate, flush_us, settings);
	if (settings & GP_SET_WINDOWS)
		gp_windows_start(flush_us, settings);
}

/* fork: the child drops the parent's session (its ring belongs to the
 * parent's stream) and handshakes again at its next CUDA call. */
static void gp_atfork_child(void)
{
	void *ring = gp_ring_base, *names = gp_rings[gp_gen & 1].names;
	gp_ring_base = NULL;
	memset(gp_rings, 0, sizeof gp_rings);
	if (ring != NULL)
		munmap(ring, gp_ring_size);
	if (names != NULL)
		munmap(names, gp_names_size);
	if (gp_sock >= 0)
		close(gp_sock);
	gp_sock = -1;
	gp_regions_drop();
	gp_pid_cache = 0;
	gp_self.tid = 0;
	gp_reconnect_forked();
	gp_windows_forked();
	gp_state = GP_IDLE;
}

__attribute__((constructor)) static void gp_session_init(void)
{
	pthread_atfork(NULL, NULL, gp_atfork_child);
}
