// launchbench: host cost of a kernel launch, without queue back-pressure.
//   launchbench cudart|driver N BURST   N launches of an empty kernel in
//                                       bursts of BURST, only the launch
//                                       calls timed; prints ns_per_launch
//   launchbench ab N BURST              the same through cuLaunchKernel as
//                                       linked (the shim's export under
//                                       LD_PRELOAD) and through libcuda's own
//                                       cuLaunchKernel, found in its dynamic
//                                       symbol table (no dlsym: the shim
//                                       interposes it), in alternating bursts
//                                       of one process; prints both and
//                                       their difference: the shim's added
//                                       cost with the driver's state, the
//                                       caches and the process layout shared
//   launchbench facts                   cuCtxGetDevice, rdtsc and
//                                       clock_gettime costs
//
// Built by scripts/gpu/launch-cost.sh on the GPU machine.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <cuda.h>
#include <cuda_runtime.h>
#include <elf.h>
#include <link.h>
#include <x86intrin.h>

__global__ void empty() {}

static double now_ns()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

// The GNU hash of an ELF symbol name.
static uint32_t gnu_hash(const char *s)
{
	uint32_t h = 5381;
	for (; *s; s++)
		h = h * 33 + (unsigned char)*s;
	return h;
}

struct lookup {
	const char *lib, *name;
	void *addr;
};

// find_in_object looks q->name up in the dynamic symbol table (DT_GNU_HASH)
// of the loaded object whose path contains q->lib.
static int find_in_object(struct dl_phdr_info *info, size_t, void *data)
{
	lookup *q = (lookup *)data;
	if (info->dlpi_name == NULL || strstr(info->dlpi_name, q->lib) == NULL)
		return 0;
	const ElfW(Dyn) *dyn = NULL;
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
	if (dyn == NULL)
		return 0;
	uintptr_t base = info->dlpi_addr, symtab = 0, strtab = 0, gh = 0;
	for (; dyn->d_tag != DT_NULL; dyn++) {
		if (dyn->d_tag == DT_SYMTAB)
			symtab = dyn->d_un.d_ptr;
		else if (dyn->d_tag == DT_STRTAB)
			strtab = dyn->d_un.d_ptr;
		else if (dyn->d_tag == DT_GNU_HASH)
			gh = dyn->d_un.d_ptr;
	}
	if (symtab == 0 || strtab == 0 || gh == 0)
		return 0;
	// ld.so relocates these entries in place on x86-64; not everywhere.
	if (symtab < base)
		symtab += base, strtab += base, gh += base;
	const uint32_t *g = (const uint32_t *)gh;
	uint32_t nbuckets = g[0], symoffset = g[1], bloom_size = g[2];
	const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)(g + 4) + bloom_size);
	const uint32_t *chain = buckets + nbuckets;
	const ElfW(Sym) *syms = (const ElfW(Sym) *)symtab;
	uint32_t h = gnu_hash(q->name);
	if (nbuckets == 0)
		return 0;
	for (uint32_t i = buckets[h % nbuckets]; i >= symoffset; i++) {
		uint32_t c = chain[i - symoffset];
		if ((c | 1) == (h | 1) && syms[i].st_value != 0 &&
		    strcmp((const char *)strtab + syms[i].st_name, q->name) == 0) {
			q->addr = (void *)(base + syms[i].st_value);
			return 1;
		}
		if (c & 1)
			break;
	}
	return 0;
}

#define CHECK(x)                                                                   \
	do {                                                                       \
		long e_ = (long)(x);                                               \
		if (e_ != 0) {                                                     \
			fprintf(stderr, "%s:%d: %s failed: %ld\n", __FILE__, __LINE__, #x, e_); \
			return 1;                                                  \
		}                                                                  \
	} while (0)

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "cudart";
	long n = argc > 2 ? atol(argv[2]) : 100000, burst = argc > 3 ? atol(argv[3]) : 32;
	if (n < 1 || burst < 1 || burst > n) {
		fprintf(stderr, "usage: launchbench cudart|driver|ab|facts [N BURST], 1 <= BURST <= N\n");
		return 2;
	}
	CHECK(cudaFree(0)); // context
	CUfunction f;
	CHECK(cudaGetFuncBySymbol(&f, (const void *)empty));
	if (strcmp(mode, "facts") == 0) {
		const long k = 1000000;
		CUdevice d;
		double t0 = now_ns();
		for (long i = 0; i < k; i++)
			CHECK(cuCtxGetDevice(&d));
		double t1 = now_ns();
		volatile unsigned long long s = 0;
		for (long i = 0; i < k; i++)
			s += __rdtsc();
		double t2 = now_ns();
		for (long i = 0; i < k; i++) {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			s += ts.tv_nsec;
		}
		double t3 = now_ns();
		printf("facts: cuCtxGetDevice_ns=%.1f rdtsc_ns=%.1f clock_gettime_ns=%.1f\n", (t1 - t0) / k,
		       (t2 - t1) / k, (t3 - t2) / k);
		return 0;
	}
	if (strcmp(mode, "ab") == 0) {
		typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
					      unsigned, CUstream, void **, void **);
		lookup q = {"libcuda.so", "cuLaunchKernel", NULL};
		dl_iterate_phdr(find_in_object, &q);
		if (q.addr == NULL) {
			fprintf(stderr, "launchbench: cuLaunchKernel not found in libcuda's symbol table\n");
			return 1;
		}
		launch_fn path[2] = {cuLaunchKernel, (launch_fn)q.addr}; // 0: as linked, 1: the driver's own
		printf("ab: linked cuLaunchKernel %s the driver's\n", path[0] == path[1] ? "is" : "is not");
		double t[2] = {0, 0};
		for (int i = 0; i < 1000; i++) { // warm up both paths (the shim's handshake)
			CHECK(path[i & 1](f, 1, 1, 1, 32, 1, 1, 0, 0, NULL, NULL));
			if (i % burst == burst - 1)
				CHECK(cudaDeviceSynchronize());
		}
		CHECK(cudaDeviceSynchronize());
		long done = 0;
		for (long k = 0; done < n; k++) {
			long m = n - done < burst ? n - done : burst;
			// Pairs of bursts, the order alternating, so neither path
			// always follows the other's.
			for (int j = 0; j < 2; j++) {
				int p = (int)((k + j) & 1);
				double t0 = now_ns();
				for (long i = 0; i < m; i++)
					path[p](f, 1, 1, 1, 32, 1, 1, 0, 0, NULL, NULL);
				t[p] += now_ns() - t0;
				CHECK(cudaDeviceSynchronize()); // not timed
			}
			done += m;
		}
		CHECK(cudaGetLastError());
		printf("bench: mode=ab launches=%ld burst=%ld linked_ns=%.1f driver_ns=%.1f added_ns=%.1f\n", n, burst,
		       t[0] / n, t[1] / n, (t[0] - t[1]) / n);
		printf("app: launches=%ld (through the linked entry: %ld)\n", 2 * n + 1000, n + 500);
		return 0;
	}
	int driver = strcmp(mode, "driver") == 0;
	if (!driver && strcmp(mode, "cudart") != 0) {
		fprintf(stderr, "launchbench: unknown mode %s\n", mode);
		return 2;
	}
	for (int i = 0; i < 1000; i++) { // warm up: first-call paths, the shim's handshake
		if (driver)
			CHECK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, 0, NULL, NULL));
		else
			empty<<<1, 32>>>();
		if (i % burst == burst - 1)
			CHECK(cudaDeviceSynchronize());
	}
	CHECK(cudaDeviceSynchronize());
	double launch = 0;
	long done = 0;
	while (done < n) {
		long m = n - done < burst ? n - done : burst;
		double t0 = now_ns();
		if (driver)
			for (long i = 0; i < m; i++)
				cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, 0, NULL, NULL);
		else
			for (long i = 0; i < m; i++)
				empty<<<1, 32>>>();
		launch += now_ns() - t0;
		done += m;
		CHECK(cudaDeviceSynchronize()); // not timed: the queue drains
	}
	CHECK(cudaGetLastError());
	printf("bench: mode=%s launches=%ld burst=%ld ns_per_launch=%.1f\n", mode, n, burst, launch / n);
	printf("app: launches=%ld\n", n + 1000);
	return 0;
}
