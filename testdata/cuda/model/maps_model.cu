// maps_model.cu - the probe shapes of testdata/bpf/threadhist.c,
// testdata/bpf/kernelretsnoop.c and testdata/bpf/compat/hashcount.c written
// by hand in CUDA C at the exit of two kernels: what gpuprobe's compiled probes should approach, measured in one
// process against the plain kernels (scripts/gpu/bench.sh, part "model").
//
// Workloads: vectorAddN over 2^24 floats (one thread per element, 256-thread
// blocks) and a tiled SGEMM 2048 (16x16 tiles, as testdata/cuda/inject).
// Shapes, each at every thread's exit:
//
//   threadhist           counts[global thread] += 1 in device memory, and
//                        atomicAdd(&blocks[blockIdx.x], 1) for blockIdx.x <
//                        1024 (threadhist's per-thread and GPU array maps)
//   threadhist_warpagg   the same, the per-block add warp-aggregated (one
//                        atomicAdd of the active lane count per warp)
//   kernelretsnoop       a 64-byte record per thread into a device-memory
//                        ring of 65536 80-byte slots, one reservation per warp
//   kernelretsnoop_host  the same ring in host-mapped memory, system scope
//   counter_host         counts[global thread] += 1 in host-mapped memory
//                        (also bpftime's per-thread host array, 1512)
//   shared_host          one host-mapped counter += 1 per thread, one
//                        system-scope atomicAdd of the active lane count per
//                        warp (a kernel-shared array, 1504, or a host GPU
//                        array, 1513, counted with an atomic add)
//   gpuhash, gpuhash_warpagg  a GPU hash map (1501) in device memory: find
//                        or insert the key blockIdx.x % 1024, atomicAdd to
//                        its value (gpuhash_model.cuh)
//
// Timing: warm-ups, then ROUNDS (default 7) interleaved rounds of BATCH
// (default 10) launches per shape; CUDA events around each launch, summed
// over the batch; medians over rounds; ratios to the plain kernel of the same
// run. A shape whose launch exceeds 50 ms runs 1 launch x 3 rounds, as the
// compiled-probe bench does. The rings' head, tail and dropped are reset and
// read back between launches, outside the events, so neither the plain nor
// the probed figure carries them.
//
// Usage: maps_model [CSV]  (or MODEL_CSV=path); the CSV has the columns
// workload,shape,plain_us,probe_us,ratio. Exits non-zero when a CUDA call
// fails or a ring's or a counter's accounting is off.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <vector>

#define CHECK(call)                                                              \
	do {                                                                     \
		cudaError_t err_ = (call);                                       \
		if (err_ != cudaSuccess) {                                       \
			fprintf(stderr, "maps_model: %s:%d: %s: %s\n", __FILE__, \
				__LINE__, #call, cudaGetErrorString(err_));      \
			exit(1);                                                 \
		}                                                                \
	} while (0)

typedef unsigned long long u64;

constexpr int VEC_N = 1 << 24;
constexpr int GEMM_N = 2048;
constexpr int TILE = 16;
constexpr unsigned MAX_BLOCKS = 1024;  // threadhist.c's MAX_BLOCKS
constexpr u64 RING_SLOTS = 1 << 16;    // kernelretsnoop.c's max_entries
constexpr unsigned RECORD_TYPE = 1;
constexpr double SLOW_LAUNCH_US = 50000;  // gpu-bench's cap
constexpr int SLOW_ROUNDS = 3;

// kernelretsnoop.c's struct exit_event.
struct ExitEvent {
	u64 block_x, block_y, block_z;
	u64 thread_x, thread_y, thread_z;
	u64 timestamp_ns;
	unsigned sm_id, lane_id;
};

// A ring slot as shm/include/gpuprobe_shm.h lays it out: seq (ticket + 1
// once published), len, type, then the payload.
struct Slot {
	u64 seq;
	unsigned len, type;
	ExitEvent e;
};
static_assert(sizeof(ExitEvent) == 64, "payload size");
static_assert(sizeof(Slot) == 80, "slot size");

// The ring's control block, one cache line as in the device block of
// gpuprobe_shm.h. Nothing consumes during a launch, so tail stays 0.
struct RingCtl {
	u64 head, tail, dropped, pad[5];
};

struct Probe {
	u64 *counts;   // per-thread counters (device or host-mapped)
	u64 *blocks;   // per-block counters (device)
	RingCtl *ctl;  // ring control (device or host-mapped)
	Slot *slots;
	u64 *shared;   // one counter for all threads (host-mapped)
	struct HashTable *hash;  // the GPU hash map (device)
};

enum Shape { PLAIN, THREADHIST, THREADHIST_AGG, RING_DEV, RING_HOST, COUNT_HOST, SHARED_HOST, GPUHASH, GPUHASH_AGG, NSHAPES };
static const char *const shapeNames[NSHAPES] = {"plain", "threadhist", "threadhist_warpagg", "kernelretsnoop",
						"kernelretsnoop_host", "counter_host", "shared_host", "gpuhash", "gpuhash_warpagg"};
static bool isRing(int s) { return s == RING_DEV || s == RING_HOST; }

__device__ __forceinline__ unsigned laneId() { unsigned r; asm volatile("mov.u32 %0, %%laneid;" : "=r"(r)); return r; }
__device__ __forceinline__ unsigned lanemaskLt() { unsigned r; asm volatile("mov.u32 %0, %%lanemask_lt;" : "=r"(r)); return r; }
__device__ __forceinline__ unsigned smId() { unsigned r; asm volatile("mov.u32 %0, %%smid;" : "=r"(r)); return r; }
__device__ __forceinline__ u64 globalTimer() { u64 t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }

#include "gpuhash_model.cuh"

__device__ __forceinline__ u64 globalThread()
{
	u64 block = blockIdx.x + (u64)gridDim.x * (blockIdx.y + (u64)gridDim.y * blockIdx.z);
	unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
	return block * (blockDim.x * blockDim.y * blockDim.z) + thread;
}

// Scoped memory operations: gpu scope for the device ring, sys for the
// host-mapped one (the host is the consumer there).
template <bool SYS> __device__ __forceinline__ u64 loadAcquire(const u64 *p)
{
	u64 v;
	if (SYS) asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	else asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}
template <bool SYS> __device__ __forceinline__ u64 loadRelaxed(const u64 *p)
{
	u64 v;
	if (SYS) asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	else asm volatile("ld.relaxed.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}
template <bool SYS> __device__ __forceinline__ void storeRelease(u64 *p, u64 v)
{
	if (SYS) asm volatile("st.release.sys.u64 [%0], %1;" : : "l"(p), "l"(v) : "memory");
	else asm volatile("st.release.gpu.u64 [%0], %1;" : : "l"(p), "l"(v) : "memory");
}
template <bool SYS> __device__ __forceinline__ u64 atomicAddScoped(u64 *p, u64 v)
{
	return SYS ? atomicAdd_system(p, v) : atomicAdd(p, v);
}

// ringEmit writes this thread's exit record. The lowest active lane reserves
// for the whole warp (one atomic instead of 32); a warp that finds the ring
// full drops without touching head, so a full ring costs two loads and one
// add per warp. Tickets past the tail's window, taken by warps that raced the
// fullness check, are late drops.
template <bool SYS> __device__ __forceinline__ void ringEmit(RingCtl *ctl, Slot *slots)
{
	const u64 FULL = ~0ull;  // no ticket reaches it
	const unsigned mask = __activemask();
	const unsigned lane = laneId();
	const unsigned leader = __ffs(mask) - 1;
	const unsigned n = __popc(mask);
	u64 base = 0, tail = 0;
	if (lane == leader) {
		tail = loadAcquire<SYS>(&ctl->tail);
		u64 head = loadRelaxed<SYS>(&ctl->head);
		if (head - tail >= RING_SLOTS) {
			atomicAddScoped<SYS>(&ctl->dropped, n);
			base = FULL;
		} else {
			base = atomicAddScoped<SYS>(&ctl->head, n);
		}
	}
	base = __shfl_sync(mask, base, leader);
	if (base == FULL)
		return;
	tail = __shfl_sync(mask, tail, leader);
	const u64 ticket = base + __popc(mask & lanemaskLt());
	const bool late = ticket - tail >= RING_SLOTS;
	const unsigned lateMask = __ballot_sync(mask, late);
	if (late) {
		if (lane == __ffs(lateMask) - 1)
			atomicAddScoped<SYS>(&ctl->dropped, __popc(lateMask));
		return;
	}
	Slot *s = &slots[ticket % RING_SLOTS];
	s->e.block_x = blockIdx.x;
	s->e.block_y = blockIdx.y;
	s->e.block_z = blockIdx.z;
	s->e.thread_x = threadIdx.x;
	s->e.thread_y = threadIdx.y;
	s->e.thread_z = threadIdx.z;
	s->e.timestamp_ns = globalTimer();
	s->e.sm_id = smId();
	s->e.lane_id = lane;
	s->len = sizeof(ExitEvent);
	s->type = RECORD_TYPE;
	// The consumer reads the slot once seq says so: the payload must be
	// visible before it.
	storeRelease<SYS>(&s->seq, ticket + 1);
}

// probe is the exit probe of shape S (S is a constant: the branches fold).
template <int S> __device__ __forceinline__ void probe(const Probe &p)
{
	if (S == THREADHIST || S == THREADHIST_AGG || S == COUNT_HOST)
		p.counts[globalThread()] += 1;  // one slot per thread: no race
	if (S == THREADHIST && blockIdx.x < MAX_BLOCKS)
		atomicAdd(&p.blocks[blockIdx.x], 1ull);
	if (S == THREADHIST_AGG && blockIdx.x < MAX_BLOCKS) {
		const unsigned mask = __activemask();
		if (laneId() == __ffs(mask) - 1)
			atomicAdd(&p.blocks[blockIdx.x], (u64)__popc(mask));
	}
	if (S == SHARED_HOST) {
		const unsigned mask = __activemask();
		if (laneId() == __ffs(mask) - 1)
			atomicAdd_system(p.shared, (u64)__popc(mask));
	}
	if (S == RING_DEV)
		ringEmit<false>(p.ctl, p.slots);
	if (S == RING_HOST)
		ringEmit<true>(p.ctl, p.slots);
	if (S == GPUHASH || S == GPUHASH_AGG)
		hashProbe<S == GPUHASH_AGG>(p.hash);
}

template <int S> __global__ void vectorAddN(const float *a, const float *b, float *c, int n, Probe p)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		c[i] = a[i] + b[i];
	probe<S>(p);
}

template <int S>
__global__ void __launch_bounds__(TILE * TILE)
sgemm(const float *__restrict__ A, const float *__restrict__ B, float *__restrict__ C, int n, Probe p)
{
	__shared__ float As[TILE][TILE];
	__shared__ float Bs[TILE][TILE];
	int row = blockIdx.y * TILE + threadIdx.y;
	int col = blockIdx.x * TILE + threadIdx.x;
	float acc = 0.0f;
	for (int t = 0; t < n / TILE; t++) {
		As[threadIdx.y][threadIdx.x] = A[row * n + t * TILE + threadIdx.x];
		Bs[threadIdx.y][threadIdx.x] = B[(t * TILE + threadIdx.y) * n + col];
		__syncthreads();
#pragma unroll
		for (int k = 0; k < TILE; k++)
			acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
		__syncthreads();
	}
	C[row * n + col] = acc;
	probe<S>(p);
}

typedef void (*Kernel)(const float *, const float *, float *, int, Probe);
static const Kernel vecKernels[NSHAPES] = {vectorAddN<0>, vectorAddN<1>, vectorAddN<2>, vectorAddN<3>, vectorAddN<4>,
					   vectorAddN<5>, vectorAddN<6>, vectorAddN<7>, vectorAddN<8>};
static const Kernel gemmKernels[NSHAPES] = {sgemm<0>, sgemm<1>, sgemm<2>, sgemm<3>, sgemm<4>,
					    sgemm<5>, sgemm<6>, sgemm<7>, sgemm<8>};

struct Workload {
	const char *name;
	const Kernel *kernels;
	dim3 grid, block;
	int n;
	float *a, *b, *c;
	u64 threads() const { return (u64)grid.x * grid.y * grid.z * block.x * block.y * block.z; }
};

struct Ring {
	RingCtl *ctl;
	Slot *slots;
	bool host;  // host-mapped (ctl and slots readable by the host)
};

// Buffers shared by all shapes and workloads.
struct Maps {
	u64 *devCounts, *hostCounts, *blocks;
	u64 *hostShared;  // shared_host's counter (host-mapped)
	HashTable *hash;  // the gpuhash shapes' table (device)
	Ring ring[2];       // [0] device, [1] host-mapped
	RingCtl *zeroCtl;   // device zeros, the host-mapped ring's reset source
	RingCtl *acctDev;   // per-launch copies of the ring's control block
	std::vector<RingCtl> acct;
	std::vector<cudaEvent_t> ev;  // a start and an end per launch of a batch
};

// What a ring shape's launches published and dropped, for the report.
struct RingReport {
	u64 launches = 0, published = 0, dropped = 0, late = 0, produced = 0;
};

static int envInt(const char *name, int def)
{
	const char *v = getenv(name);
	int n = v ? atoi(v) : 0;
	return n > 0 ? n : def;
}

static double median(std::vector<double> v)
{
	if (v.empty())
		return 0;
	std::sort(v.begin(), v.end());
	return v[v.size() / 2];
}

static Probe probeFor(const Maps &m, int s)
{
	const Ring &r = m.ring[s == RING_HOST];
	return Probe{s == COUNT_HOST ? m.hostCounts : m.devCounts, m.blocks, r.ctl, r.slots, m.hostShared, m.hash};
}

// resetRing empties a ring's control block in stream order. cudaMemsetAsync
// is documented for device memory only, so the host-mapped block is
// overwritten by an async copy from device zeros instead.
static void resetRing(const Maps &m, const Ring &r)
{
	if (r.host)
		CHECK(cudaMemcpyAsync(r.ctl, m.zeroCtl, sizeof(RingCtl), cudaMemcpyDeviceToHost));
	else
		CHECK(cudaMemsetAsync(r.ctl, 0, sizeof(RingCtl)));
}

// checkAccounting fails the run unless every record of a launch is either
// published or counted as dropped.
static void checkAccounting(const Workload &w, int s, const RingCtl &c, RingReport *rep)
{
	const u64 produced = w.threads();
	const u64 published = std::min<u64>(c.head, RING_SLOTS);
	if (produced != published + c.dropped) {
		fprintf(stderr, "maps_model: %s %s: produced %llu != published %llu + dropped %llu (head %llu)\n",
			w.name, shapeNames[s], produced, published, c.dropped, c.head);
		exit(1);
	}
	rep->launches++;
	rep->published = published;
	rep->dropped = c.dropped;
	rep->late = c.head > RING_SLOTS ? c.head - RING_SLOTS : 0;
	rep->produced = produced;
}

// runBatch launches shape s n times and returns the mean kernel time per
// launch in µs. For a ring shape the control block is reset before each
// launch and copied out after it, between the events.
static double runBatch(const Workload &w, Maps &m, int s, int n, RingReport *rep)
{
	const Ring &r = m.ring[s == RING_HOST];
	const Probe p = probeFor(m, s);
	for (int k = 0; k < n; k++) {
		if (isRing(s))
			resetRing(m, r);
		CHECK(cudaEventRecord(m.ev[2 * k]));
		w.kernels[s]<<<w.grid, w.block>>>(w.a, w.b, w.c, w.n, p);
		CHECK(cudaGetLastError());
		CHECK(cudaEventRecord(m.ev[2 * k + 1]));
		if (isRing(s))
			CHECK(cudaMemcpyAsync(&m.acctDev[k], r.ctl, sizeof(RingCtl), cudaMemcpyDefault));
	}
	CHECK(cudaDeviceSynchronize());
	double total = 0;
	for (int k = 0; k < n; k++) {
		float ms;
		CHECK(cudaEventElapsedTime(&ms, m.ev[2 * k], m.ev[2 * k + 1]));
		total += ms * 1e3;
	}
	if (isRing(s)) {
		CHECK(cudaMemcpy(m.acct.data(), m.acctDev, n * sizeof(RingCtl), cudaMemcpyDeviceToHost));
		for (int k = 0; k < n; k++)
			checkAccounting(w, s, m.acct[k], rep);
	}
	return total / n;
}

// verifyRing checks the slots of a ring zeroed before its last launch: each
// published slot holds its ticket + 1, a 64-byte payload and the type.
static void verifyRing(const Workload &w, const Maps &m, int s, const RingReport &rep)
{
	const Ring &r = m.ring[s == RING_HOST];
	std::vector<Slot> slots(RING_SLOTS);
	CHECK(cudaMemcpy(slots.data(), r.slots, RING_SLOTS * sizeof(Slot), cudaMemcpyDefault));
	for (u64 i = 0; i < rep.published; i++) {
		const Slot &x = slots[i];
		if (x.seq != i + 1 || x.len != sizeof(ExitEvent) || x.type != RECORD_TYPE || x.e.lane_id >= 32) {
			fprintf(stderr, "maps_model: %s %s: slot %llu: seq %llu len %u type %u lane %u\n",
				w.name, shapeNames[s], i, x.seq, x.len, x.type, x.e.lane_id);
			exit(1);
		}
	}
}

// checkCounters compares the threadhist maps with the launches that wrote
// them: each thread's counter with its shape's launches, each block counter
// with the threads of the blocks sharing its blockIdx.x; and the hash table.
static void checkCounters(const Workload &w, const Maps &m, const u64 *launches)
{
	const u64 nt = w.threads();
	const u64 devRuns = launches[THREADHIST] + launches[THREADHIST_AGG];
	std::vector<u64> v(nt);
	CHECK(cudaMemcpy(v.data(), m.devCounts, nt * sizeof(u64), cudaMemcpyDeviceToHost));
	for (u64 i = 0; i < nt; i++)
		if (v[i] != devRuns || m.hostCounts[i] != launches[COUNT_HOST]) {
			fprintf(stderr, "maps_model: %s: thread %llu counted %llu (device), %llu (host); want %llu, %llu\n",
				w.name, i, v[i], m.hostCounts[i], devRuns, launches[COUNT_HOST]);
			exit(1);
		}
	if (*m.hostShared != nt * launches[SHARED_HOST]) {
		fprintf(stderr, "maps_model: %s: shared counter %llu, want %llu\n", w.name, *m.hostShared,
			nt * launches[SHARED_HOST]);
		exit(1);
	}
	std::vector<u64> b(MAX_BLOCKS);
	CHECK(cudaMemcpy(b.data(), m.blocks, MAX_BLOCKS * sizeof(u64), cudaMemcpyDeviceToHost));
	const u64 perX = (u64)w.grid.y * w.grid.z * w.block.x * w.block.y * w.block.z;
	for (unsigned x = 0; x < MAX_BLOCKS; x++) {
		const u64 want = x < w.grid.x ? perX * devRuns : 0;
		if (b[x] != want) {
			fprintf(stderr, "maps_model: %s: blocks[%u] = %llu, want %llu\n", w.name, x, b[x], want);
			exit(1);
		}
	}
	checkHashTable(w.name, m.hash, w.grid.x, perX, launches[GPUHASH] + launches[GPUHASH_AGG]);
}

struct Row {
	const char *workload;
	int shape;
	double plainUS, probeUS;
	int rounds, batch;
};

// bench measures one workload: every shape warmed up (the first launch of a
// ring shape on a zeroed ring, then verified), then the interleaved rounds.
static void bench(const Workload &w, Maps &m, int rounds, int batch, std::vector<Row> *rows,
		  std::vector<std::pair<const char *, RingReport>> *reports)
{
	const u64 nt = w.threads();
	CHECK(cudaMemset(m.devCounts, 0, nt * sizeof(u64)));
	CHECK(cudaMemset(m.blocks, 0, MAX_BLOCKS * sizeof(u64)));
	CHECK(cudaMemset(m.hash, 0, sizeof(HashTable)));
	CHECK(cudaDeviceSynchronize());
	memset(m.hostCounts, 0, nt * sizeof(u64));  // the GPU is idle: a host write is safe
	*m.hostShared = 0;

	u64 launches[NSHAPES] = {};
	bool slow[NSHAPES] = {};
	RingReport rep[NSHAPES];
	for (int s = 0; s < NSHAPES; s++) {
		if (isRing(s)) {
			const Ring &r = m.ring[s == RING_HOST];
			if (r.host)
				memset(r.slots, 0, RING_SLOTS * sizeof(Slot));
			else
				CHECK(cudaMemset(r.slots, 0, RING_SLOTS * sizeof(Slot)));
		}
		slow[s] = runBatch(w, m, s, 1, &rep[s]) > SLOW_LAUNCH_US;
		launches[s]++;
		if (isRing(s))
			verifyRing(w, m, s, rep[s]);
		if (!slow[s]) {
			runBatch(w, m, s, 1, &rep[s]);
			launches[s]++;
		}
	}
	std::vector<double> samples[NSHAPES];
	for (int round = 0; round < rounds; round++)
		for (int s = 0; s < NSHAPES; s++) {
			if (slow[s] && round >= SLOW_ROUNDS)
				continue;
			const int n = slow[s] ? 1 : batch;
			samples[s].push_back(runBatch(w, m, s, n, &rep[s]));
			launches[s] += n;
		}
	checkCounters(w, m, launches);
	const double plain = median(samples[PLAIN]);
	for (int s = 1; s < NSHAPES; s++) {
		rows->push_back(Row{w.name, s, plain, median(samples[s]), (int)samples[s].size(), slow[s] ? 1 : batch});
		if (isRing(s))
			reports->push_back({shapeNames[s], rep[s]});
	}
}

// allocRing places a ring in device or host-mapped memory. Under unified
// addressing (checked in main) a mapped allocation's host pointer is also
// its device pointer, so one pointer serves the kernels and the host.
static void allocRing(Ring *r, bool host)
{
	r->host = host;
	if (host) {
		CHECK(cudaHostAlloc(&r->ctl, sizeof(RingCtl), cudaHostAllocMapped));
		CHECK(cudaHostAlloc(&r->slots, RING_SLOTS * sizeof(Slot), cudaHostAllocMapped));
		memset(r->ctl, 0, sizeof(RingCtl));
	} else {
		CHECK(cudaMalloc(&r->ctl, sizeof(RingCtl)));
		CHECK(cudaMalloc(&r->slots, RING_SLOTS * sizeof(Slot)));
		CHECK(cudaMemset(r->ctl, 0, sizeof(RingCtl)));
	}
}

static Workload makeWorkload(const char *name, const Kernel *k, dim3 grid, dim3 block, int n, size_t elems)
{
	Workload w{name, k, grid, block, n, nullptr, nullptr, nullptr};
	// Load every kernel now: with lazy loading a first launch would carry
	// the module load inside its events and could be taken for a slow shape.
	for (int s = 0; s < NSHAPES; s++) {
		cudaFuncAttributes attr;
		CHECK(cudaFuncGetAttributes(&attr, k[s]));
	}
	// Zeros: the timing of adds and FMAs does not depend on the values.
	for (float **p : {&w.a, &w.b, &w.c}) {
		CHECK(cudaMalloc(p, elems * sizeof(float)));
		CHECK(cudaMemset(*p, 0, elems * sizeof(float)));
	}
	return w;
}

int main(int argc, char **argv)
{
	const char *csvPath = argc > 1 ? argv[1] : getenv("MODEL_CSV");
	const int rounds = envInt("ROUNDS", 7), batch = envInt("BATCH", 10);

	CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));  // before anything makes the context
	cudaDeviceProp prop;
	CHECK(cudaGetDeviceProperties(&prop, 0));
	int canMap = 0, uva = 0;  // attributes: CUDA 13 drops some cudaDeviceProp fields
	CHECK(cudaDeviceGetAttribute(&canMap, cudaDevAttrCanMapHostMemory, 0));
	CHECK(cudaDeviceGetAttribute(&uva, cudaDevAttrUnifiedAddressing, 0));
	if (!canMap || !uva) {
		fprintf(stderr, "maps_model: %s: host-mapped memory needs mapping and unified addressing\n", prop.name);
		return 1;
	}

	Workload ws[] = {
		makeWorkload("vectorAddN 2^24", vecKernels, dim3(VEC_N / 256), dim3(256), VEC_N, VEC_N),
		makeWorkload("sgemm 2048", gemmKernels, dim3(GEMM_N / TILE, GEMM_N / TILE), dim3(TILE, TILE), GEMM_N,
			     (size_t)GEMM_N * GEMM_N),
	};
	u64 maxThreads = 0;
	for (const Workload &w : ws)
		maxThreads = std::max(maxThreads, w.threads());

	Maps m;
	CHECK(cudaMalloc(&m.devCounts, maxThreads * sizeof(u64)));
	CHECK(cudaMalloc(&m.blocks, MAX_BLOCKS * sizeof(u64)));
	CHECK(cudaHostAlloc(&m.hostCounts, maxThreads * sizeof(u64), cudaHostAllocMapped));
	CHECK(cudaHostAlloc(&m.hostShared, sizeof(u64), cudaHostAllocMapped));
	CHECK(cudaMalloc(&m.hash, sizeof(HashTable)));
	allocRing(&m.ring[0], false);
	allocRing(&m.ring[1], true);
	CHECK(cudaMalloc(&m.zeroCtl, sizeof(RingCtl)));
	CHECK(cudaMemset(m.zeroCtl, 0, sizeof(RingCtl)));
	CHECK(cudaMalloc(&m.acctDev, batch * sizeof(RingCtl)));
	m.acct.resize(batch);
	m.ev.resize(2 * batch);
	for (cudaEvent_t &e : m.ev)
		CHECK(cudaEventCreate(&e));

	std::vector<Row> rows;
	std::vector<std::pair<const char *, RingReport>> reports[2];
	for (int i = 0; i < 2; i++)
		bench(ws[i], m, rounds, batch, &rows, &reports[i]);

	printf("== maps model on %s: probe shapes in CUDA C, %d rounds x %d launches, median per launch; ratio vs plain in the same run ==\n",
	       prop.name, rounds, batch);
	printf("%-18s %-22s %10s %10s %8s %7s %6s\n", "workload", "shape", "plain µs", "probe µs", "ratio", "rounds", "batch");
	for (const Row &r : rows)
		printf("%-18s %-22s %10.1f %10.1f %8.3f %7d %6d\n", r.workload, shapeNames[r.shape], r.plainUS, r.probeUS,
		       r.probeUS / r.plainUS, r.rounds, r.batch);
	printf("ring accounting (each launch starts empty; produced = published + dropped checked on every launch):\n");
	for (int i = 0; i < 2; i++)
		for (const auto &e : reports[i])
			printf("  %s / %s: %llu records a launch, %llu delivered, %llu dropped (%llu of them late) over %llu launches\n",
			       ws[i].name, e.first, e.second.produced, e.second.published, e.second.dropped, e.second.late,
			       e.second.launches);

	if (csvPath && *csvPath) {
		FILE *f = fopen(csvPath, "w");
		if (!f) {
			perror(csvPath);
			return 1;
		}
		fprintf(f, "workload,shape,plain_us,probe_us,ratio\n");
		for (const Row &r : rows)
			fprintf(f, "%s,%s,%.2f,%.2f,%.4f\n", r.workload, shapeNames[r.shape], r.plainUS, r.probeUS,
				r.probeUS / r.plainUS);
		if (fclose(f) != 0) {
			perror(csvPath);
			return 1;
		}
	}
	for (cudaEvent_t e : m.ev)
		CHECK(cudaEventDestroy(e));
	CHECK(cudaFreeHost(m.hostCounts));
	CHECK(cudaFreeHost(m.hostShared));
	CHECK(cudaFreeHost(m.ring[1].ctl));
	CHECK(cudaFreeHost(m.ring[1].slots));
	return 0;
}
