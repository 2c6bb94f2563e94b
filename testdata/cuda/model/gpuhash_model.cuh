// gpuhash_model.cuh - the GPU hash map (1501) counter of
// testdata/bpf/compat/hashcount.c written by hand in CUDA C, in the table
// layout of jit/gpuhash.go (what the compiled program reads and writes):
// maps_model.cu's shapes gpuhash and gpuhash_warpagg. Needs laneId() and
// u64 from the including file.
//
// The table, for hashcount.c's map (u32 key, u64 value, max_entries
// 1024): HASH_SLOTS + 1 elements of 24 bytes. Element 0 is the header
// (u32 count of live entries at 0, u64 refused inserts at 8); element 1+s
// is slot s (u32 state at 0, the key at 8, the value at 16). A key's probe
// sequence starts at hashKey(key) & (HASH_SLOTS - 1) and looks at
// HASH_PROBES slots at most. An insert claims an empty slot with atomicCAS
// (Empty -> Busy), reserves an entry in count, writes key and value and
// publishes the slot (Live) with a release store; a thread that meets a
// Busy slot rereads it until it is published. The workload deletes
// nothing, so no slot is ever a tombstone.
//
// Shapes, each at every thread's exit, on the key blockIdx.x % 1024:
//   gpuhash          find the key's slot (inserting it the first time) and
//                    atomicAdd 1 to its value: what hashcount.c compiles to
//                    once the key is in (one probe walk, one atomic add)
//   gpuhash_warpagg  the same once per warp: the lowest active lane adds
//                    the warp's active lane count (the key is the block's)
#pragma once

constexpr unsigned HASH_KEYS = 1024;    // hashcount.c's max_entries
constexpr unsigned HASH_SLOTS = 2048;   // jit.GPUHashLayout: a power of two >= 2 x max_entries
constexpr unsigned HASH_PROBES = 64;    // jit.HashProbeLimit
constexpr unsigned HASH_SPINS = 1 << 16;  // jit.HashSpinLimit
enum HashState : unsigned { HASH_EMPTY = 0, HASH_BUSY = 1, HASH_LIVE = 2, HASH_DELETED = 3 };

// The header element. lost is the model's own (padding in jit's layout):
// threads whose key the table refused, for the check.
struct HashHeader {
	unsigned count, pad;
	u64 full;
	u64 lost;
};

struct HashSlot {
	unsigned state, pad0;
	unsigned key, pad1;
	u64 value;
};

struct HashTable {
	HashHeader h;
	HashSlot s[HASH_SLOTS];
};
static_assert(sizeof(HashHeader) == 24 && sizeof(HashSlot) == 24, "jit.GPUHashLayout's stride for a u32 key, u64 value");
static_assert(sizeof(HashTable) == (HASH_SLOTS + 1) * 24, "header and slots");

// hashKey is jit.HashKey of a 4-byte little-endian key: FNV-1a over its
// bytes, then the 32-bit finaliser.
__host__ __device__ __forceinline__ unsigned hashKey(unsigned key)
{
	unsigned h = 2166136261u;
	for (int i = 0; i < 4; i++) {
		h ^= (key >> (8 * i)) & 0xff;
		h *= 16777619u;
	}
	h ^= h >> 16;
	h *= 0x7feb352du;
	h ^= h >> 15;
	h *= 0x846ca68bu;
	h ^= h >> 16;
	return h;
}

__device__ __forceinline__ unsigned loadState(const unsigned *p)
{
	unsigned v;
	asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ void publishState(unsigned *p, unsigned v)
{
	asm volatile("st.release.gpu.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory");
}

// hashValueOf returns the address of key's value in t, inserting the key
// with value 0 when it is missing; nullptr when the table refuses it
// (max_entries reached, HASH_PROBES slots of other keys, or a claim left
// unpublished for HASH_SPINS rereads).
__device__ __forceinline__ u64 *hashValueOf(HashTable *t, unsigned key)
{
	const unsigned home = hashKey(key);
	for (unsigned i = 0; i < HASH_PROBES; i++) {
		HashSlot *s = &t->s[(home + i) & (HASH_SLOTS - 1)];
		unsigned st = loadState(&s->state);
		for (unsigned spins = 0; st == HASH_EMPTY || st == HASH_BUSY;) {
			if (st == HASH_BUSY) {
				if (++spins > HASH_SPINS)
					return nullptr;
				__nanosleep(32);
				st = loadState(&s->state);
				continue;
			}
			if (atomicCAS(&s->state, HASH_EMPTY, HASH_BUSY) != HASH_EMPTY) {
				// Another thread claimed it, perhaps for this key: reread
				// with acquire, so that a published key is visible.
				st = loadState(&s->state);
				continue;
			}
			if (atomicAdd(&t->h.count, 1u) >= HASH_KEYS) {
				atomicSub(&t->h.count, 1u);
				publishState(&s->state, HASH_EMPTY);
				atomicAdd(&t->h.full, 1ull);
				return nullptr;
			}
			s->key = key;
			s->value = 0;
			publishState(&s->state, HASH_LIVE);
			return &s->value;
		}
		if (st == HASH_LIVE && s->key == key)
			return &s->value;
	}
	atomicAdd(&t->h.full, 1ull);
	return nullptr;
}

// hashProbe is the exit probe of shape gpuhash (AGG false) or
// gpuhash_warpagg (AGG true).
template <bool AGG> __device__ __forceinline__ void hashProbe(HashTable *t)
{
	const unsigned key = blockIdx.x % HASH_KEYS;
	u64 n = 1;
	if (AGG) {
		const unsigned mask = __activemask();
		if (laneId() != __ffs(mask) - 1)
			return;
		n = __popc(mask);
	}
	u64 *v = hashValueOf(t, key);
	if (v)
		atomicAdd(v, n);
	else
		atomicAdd(&t->h.lost, n);
}

// checkHashTable compares the table with the launches that wrote it: key k
// holds perX threads for each blockIdx.x < gridX with blockIdx.x % HASH_KEYS
// == k, times launches; each key has one slot, each at its hash's probe
// sequence; the count is the keys present; nothing refused or lost.
static void checkHashTable(const char *workload, const HashTable *dev, unsigned gridX, u64 perX, u64 launches)
{
	static HashTable t;
	CHECK(cudaMemcpy(&t, dev, sizeof t, cudaMemcpyDeviceToHost));
	const unsigned keys = launches ? (gridX < HASH_KEYS ? gridX : HASH_KEYS) : 0;
	bool seen[HASH_KEYS] = {};
	unsigned live = 0;
	for (unsigned s = 0; s < HASH_SLOTS; s++) {
		const HashSlot &x = t.s[s];
		if (x.state == HASH_EMPTY)
			continue;
		const unsigned k = x.key;
		const u64 want = k < HASH_KEYS ? perX * launches * (gridX / HASH_KEYS + (k < gridX % HASH_KEYS)) : 0;
		if (x.state != HASH_LIVE || k >= keys || seen[k] || x.value != want ||
		    ((s - hashKey(k)) & (HASH_SLOTS - 1)) >= HASH_PROBES) {
			fprintf(stderr, "maps_model: %s: hash slot %u: state %u key %u value %llu (want %llu)%s\n", workload, s,
				x.state, k, x.value, want, k < HASH_KEYS && seen[k] ? ", key seen twice" : "");
			exit(1);
		}
		seen[k] = true;
		live++;
	}
	if (live != keys || t.h.count != keys || t.h.full != 0 || t.h.lost != 0) {
		fprintf(stderr, "maps_model: %s: hash table: %u live slots, count %u, want %u; %llu refused, %llu threads lost\n",
			workload, live, t.h.count, keys, t.h.full, t.h.lost);
		exit(1);
	}
}
