/*
 * gpuprobe_shm.h - the shared-memory layouts of gpuprobe (layout version 1).
 *
 * The normative description is the package comment of
 * github.com/gpuprobe/gpuprobe/shm (shm/doc.go); this header must agree with
 * it byte for byte. All fields are little-endian. C11 / GNU C, no
 * dependencies beyond <stdint.h>, <stddef.h> and <string.h>; the atomics are
 * the GCC/Clang __atomic builtins.
 *
 * A region = 64-byte header + control block (up to offset 512) + data area
 * at offset 512. Kinds: ring (multi-producer, single-consumer, fixed slots),
 * array, per-thread array, per-warp array, mailbox (GPU -> host calls).
 */
#ifndef GPUPROBE_SHM_H
#define GPUPROBE_SHM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define GPBR_MAGIC 0x52425047u /* "GPBR" */
#define GPBR_VERSION 1u
#define GPBR_HEADER_SIZE 64u
#define GPBR_DATA_OFFSET 512u
#define GPBR_PAGE_SIZE 4096u

enum gpbr_kind {
	GPBR_KIND_RING = 1,
	GPBR_KIND_ARRAY = 2,
	GPBR_KIND_PER_THREAD_ARRAY = 3,
	GPBR_KIND_PER_WARP_ARRAY = 4,
	GPBR_KIND_MAILBOX = 5,
};

/* Region header, offset 0. */
struct gpbr_header {
	uint32_t magic;       /*  0: GPBR_MAGIC */
	uint16_t version;     /*  4: GPBR_VERSION */
	uint16_t kind;        /*  6: enum gpbr_kind */
	uint32_t header_size; /*  8: 64 */
	uint32_t flags;       /* 12: 0 */
	uint64_t data_size;   /* 16: bytes of the data area */
	uint64_t data_offset; /* 24: 512 */
	uint32_t value_size;  /* 32: array: value bytes; ring/mailbox: slot bytes */
	uint32_t max_entries; /* 36: array: keys; ring/mailbox: slots */
	uint32_t stride;      /* 40: bytes between values/slots */
	uint32_t lanes;       /* 44: threads (or warps) per key; else 1 */
	uint64_t region_size; /* 48: whole region, multiple of 4096 */
	uint32_t id;          /* 56: owner-assigned */
	uint32_t reserved;    /* 60: 0 */
};

/* Control block offsets (each on its own cache line). */
#define GPBR_RING_HEAD 128u     /* u64, producers: atomic add */
#define GPBR_RING_TAIL 192u     /* u64, consumer: store */
#define GPBR_RING_DROPPED 256u  /* u64, producers: atomic add */
#define GPBR_RING_OVERSIZE 320u /* u64, producers: atomic add */
#define GPBR_RING_STALLED 384u  /* u64, consumer: store */
/* Device-side reservation (opt-in, shm/doc.go): the host mirror of the
 * device block's drop count, and the device block's layout. */
#define GPBR_RING_DEV_DROPPED 448u /* u64, GPU producers: atomic max */
/* Device-resident rings (shm/doc.go): GPU producers count drops in 16
 * shards of the device copy, 64..127 and 448..511, by %smid mod 16. */
#define GPBR_RING_DROP_SHARDS 16u
static inline unsigned gpbr_ring_drop_shard(unsigned k)
{
	return k < 8 ? 64u + 8u * k : 448u + 8u * (k - 8u);
}
#define GPBR_RING_DEVICE_BLOCK_SIZE 64u
#define GPBR_RING_DEVICE_HEAD 0u       /* u64: tickets taken (gpu atomics) */
#define GPBR_RING_DEVICE_TAIL 8u       /* u64: host tail as last read */
#define GPBR_RING_DEVICE_DROPPED 16u   /* u64: drops without a ticket */
#define GPBR_RING_DEVICE_REFRESH 24u   /* u64: globaltimer of last refresh */
#define GPBR_RING_DEVICE_SLOTS 32u     /* u32: slot_count */
#define GPBR_RING_DEVICE_SLOT_SIZE 36u /* u32: slot_size */

#define GPBR_MAILBOX_TIMEOUT_NS 128u /* u64, creator */
#define GPBR_MAILBOX_SERVED 192u     /* u64, host */
#define GPBR_MAILBOX_HEARTBEAT 256u  /* u64, host CLOCK_MONOTONIC ns */

/* Ring slot: 16-byte header then payload. */
#define GPBR_SLOT_HEADER 16u
#define GPBR_SLOT_MIN 24u
#define GPBR_SLOT_MAX 65536u

struct gpbr_slot {
	uint64_t seq;  /* ticket+1 once published */
	uint32_t len;  /* payload bytes */
	uint32_t type; /* record type */
	/* payload follows */
};

/* Mailbox slot (256 bytes). */
#define GPBR_MAILBOX_SLOT_SIZE 256u
#define GPBR_MAILBOX_PAYLOAD 168u
#define GPBR_ETIMEDOUT 110
#define GPBR_MAILBOX_RET_PENDING 0x7ffdead0ead00000ll /* ret until the host answers */

struct gpbr_mailbox_slot {
	uint32_t waiting;     /*   0: 1 with a request, 0 once its requester gave up */
	uint32_t helper;      /*   4 */
	uint64_t req;         /*   8: requester: store-release */
	uint64_t ack;         /*  16: host: store-release */
	int64_t ret;          /*  24: host, before ack (requester: GPBR_MAILBOX_RET_PENDING) */
	uint64_t args[5];     /*  32 */
	uint32_t payload_len; /*  72 */
	uint32_t flags;       /*  76 */
	uint64_t caller;      /*  80 */
	uint8_t payload[GPBR_MAILBOX_PAYLOAD]; /* 88 */
};

#ifdef __cplusplus
#define GPBR_STATIC_ASSERT static_assert
#else
#define GPBR_STATIC_ASSERT _Static_assert
#endif
GPBR_STATIC_ASSERT(sizeof(struct gpbr_header) == 64, "gpbr_header size");
GPBR_STATIC_ASSERT(sizeof(struct gpbr_slot) == 16, "gpbr_slot size");
GPBR_STATIC_ASSERT(sizeof(struct gpbr_mailbox_slot) == 256, "gpbr_mailbox_slot size");
GPBR_STATIC_ASSERT(offsetof(struct gpbr_mailbox_slot, payload) == 88, "payload offset");

/* Errors of gpbr_check. */
enum gpbr_check_err {
	GPBR_OK = 0,
	GPBR_ERR_SHORT = -1,   /* region shorter than its header or region_size */
	GPBR_ERR_MAGIC = -2,
	GPBR_ERR_VERSION = -3,
	GPBR_ERR_KIND = -4,
	GPBR_ERR_LAYOUT = -5,  /* sizes disagree with each other */
};

static inline uint64_t gpbr_align8(uint64_t v) { return (v + 7u) & ~(uint64_t)7u; }

/* gpbr_check validates the header of a mapped region of len bytes. kind 0
 * accepts any kind. */
static inline int gpbr_check(const void *base, size_t len, unsigned kind)
{
	const struct gpbr_header *h = (const struct gpbr_header *)base;
	uint64_t n;

	if (len < GPBR_DATA_OFFSET)
		return GPBR_ERR_SHORT;
	if (h->magic != GPBR_MAGIC)
		return GPBR_ERR_MAGIC;
	if (h->version != GPBR_VERSION)
		return GPBR_ERR_VERSION;
	if (h->kind < GPBR_KIND_RING || h->kind > GPBR_KIND_MAILBOX || (kind && h->kind != kind))
		return GPBR_ERR_KIND;
	if (h->header_size != GPBR_HEADER_SIZE || h->flags || h->reserved ||
	    h->data_offset != GPBR_DATA_OFFSET)
		return GPBR_ERR_LAYOUT;
	if (h->region_size > len)
		return GPBR_ERR_SHORT;
	if (h->region_size < GPBR_DATA_OFFSET || h->region_size % GPBR_PAGE_SIZE ||
	    h->data_size > h->region_size - GPBR_DATA_OFFSET)
		return GPBR_ERR_LAYOUT;
	switch (h->kind) {
	case GPBR_KIND_RING:
		if (h->value_size != h->stride || h->stride < GPBR_SLOT_MIN ||
		    h->stride > GPBR_SLOT_MAX || h->stride % 8 || h->max_entries < 2 ||
		    (h->max_entries & (h->max_entries - 1)) || h->lanes != 1)
			return GPBR_ERR_LAYOUT;
		n = (uint64_t)h->max_entries * (h->stride + 8u);
		break;
	case GPBR_KIND_MAILBOX:
		if (h->value_size != GPBR_MAILBOX_SLOT_SIZE || h->stride != GPBR_MAILBOX_SLOT_SIZE ||
		    h->max_entries < 1 || h->lanes != 1)
			return GPBR_ERR_LAYOUT;
		n = (uint64_t)h->max_entries * GPBR_MAILBOX_SLOT_SIZE;
		break;
	default:
		if (h->value_size == 0 || h->stride != gpbr_align8(h->value_size) ||
		    h->max_entries < 1 || h->lanes < 1 ||
		    (h->kind == GPBR_KIND_ARRAY && h->lanes != 1))
			return GPBR_ERR_LAYOUT;
		n = (uint64_t)h->max_entries * h->lanes * h->stride;
		break;
	}
	if (n != h->data_size)
		return GPBR_ERR_LAYOUT;
	return GPBR_OK;
}

static inline uint8_t *gpbr_data(void *base) { return (uint8_t *)base + GPBR_DATA_OFFSET; }

static inline uint64_t *gpbr_u64(void *base, unsigned off)
{
	return (uint64_t *)((uint8_t *)base + off);
}

/* gpbr_array_value returns the value of key for lane (thread or warp; 0 for
 * a plain array), or NULL when out of range. */
static inline void *gpbr_array_value(void *base, uint32_t key, uint32_t lane)
{
	const struct gpbr_header *h = (const struct gpbr_header *)base;
	if (key >= h->max_entries || lane >= h->lanes)
		return NULL;
	return gpbr_data(base) + ((uint64_t)key * h->lanes + lane) * h->stride;
}

/* Ring helpers. */
static inline struct gpbr_slot *gpbr_ring_slot(void *base, uint64_t ticket)
{
	const struct gpbr_header *h = (const struct gpbr_header *)base;
	return (struct gpbr_slot *)(gpbr_data(base) +
				    (ticket & (h->max_entries - 1)) * (uint64_t)h->stride);
}

static inline uint32_t *gpbr_ring_slot_drops(void *base, uint64_t ticket)
{
	const struct gpbr_header *h = (const struct gpbr_header *)base;
	uint64_t n = h->max_entries;
	return (uint32_t *)(gpbr_data(base) + n * h->stride) + (ticket & (n - 1));
}

static inline uint32_t *gpbr_ring_slot_acked(void *base, uint64_t ticket)
{
	const struct gpbr_header *h = (const struct gpbr_header *)base;
	uint64_t n = h->max_entries;
	return (uint32_t *)(gpbr_data(base) + n * (h->stride + 4u)) + (ticket & (n - 1));
}

/* Results of gpbr_ring_produce. */
enum gpbr_produce {
	GPBR_PUBLISHED = 0,
	GPBR_DROPPED = 1,  /* ring full; counted in dropped */
	GPBR_OVERSIZE = 2, /* len > slot payload; counted in oversize */
};

/* gpbr_ring_reserve takes the next slot of the ring for a record of len
 * bytes (the first half of the producer algorithm of shm/doc.go): the slot,
 * whose payload (GPBR_SLOT_HEADER bytes in) the caller fills before
 * gpbr_ring_publish, or NULL with *why (GPBR_DROPPED or GPBR_OVERSIZE, both
 * counted). It never blocks. */
static inline struct gpbr_slot *gpbr_ring_reserve(void *base, uint32_t len, uint64_t *ticket, int *why)
{
	const struct gpbr_header *h = (const struct gpbr_header *)base;
	uint64_t cap = h->max_entries, tl, hd, t;

	if (len > h->stride - GPBR_SLOT_HEADER) {
		__atomic_fetch_add(gpbr_u64(base, GPBR_RING_OVERSIZE), 1, __ATOMIC_RELAXED);
		*why = GPBR_OVERSIZE;
		return NULL;
	}
	tl = __atomic_load_n(gpbr_u64(base, GPBR_RING_TAIL), __ATOMIC_ACQUIRE);
	hd = __atomic_load_n(gpbr_u64(base, GPBR_RING_HEAD), __ATOMIC_RELAXED);
	if (hd - tl >= cap) {
		__atomic_fetch_add(gpbr_u64(base, GPBR_RING_DROPPED), 1, __ATOMIC_RELAXED);
		*why = GPBR_DROPPED;
		return NULL;
	}
	t = __atomic_fetch_add(gpbr_u64(base, GPBR_RING_HEAD), 1, __ATOMIC_SEQ_CST);
	if (t - tl >= cap) {
		__atomic_fetch_add(gpbr_u64(base, GPBR_RING_DROPPED), 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(gpbr_ring_slot_drops(base, t), 1, __ATOMIC_SEQ_CST);
		*why = GPBR_DROPPED;
		return NULL;
	}
	*ticket = t;
	return gpbr_ring_slot(base, t);
}

/* gpbr_ring_payload is where a reserved slot's record goes. */
static inline void *gpbr_ring_payload(struct gpbr_slot *s) { return (uint8_t *)s + GPBR_SLOT_HEADER; }

/* gpbr_ring_publish hands a filled slot to the consumer. */
static inline void gpbr_ring_publish(struct gpbr_slot *s, uint64_t ticket, uint32_t type, uint32_t len)
{
	s->len = len;
	s->type = type;
	__atomic_store_n(&s->seq, ticket + 1, __ATOMIC_RELEASE);
}

/* gpbr_ring_produce writes one record (reserve, copy, publish). It never
 * blocks; safe to call from any number of threads and processes that map
 * the same ring. */
static inline int gpbr_ring_produce(void *base, uint32_t type, const void *payload, uint32_t len)
{
	uint64_t t;
	int why;
	struct gpbr_slot *s = gpbr_ring_reserve(base, len, &t, &why);

	if (s == NULL)
		return why;
	memcpy(gpbr_ring_payload(s), payload, len);
	gpbr_ring_publish(s, t, type, len);
	return GPBR_PUBLISHED;
}

#endif /* GPUPROBE_SHM_H */
