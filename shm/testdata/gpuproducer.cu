// gpuproducer: GPU threads produce into a gpuprobe ring that lives in a memfd
// (host memory registered with cudaHostRegister), following the producer
// algorithm of shm/doc.go with system-scope atomics. Driven by shm's
// TestGPUProducers on the GPU machine:
//
//   nvcc -O2 -arch=sm_90 -I shm/include shm/testdata/gpuproducer.cu -o gpuproducer
//   GPUPROBE_GPU_PRODUCER=$PWD/gpuproducer ./shm.test -test.run GPUProducers -test.v
//
// usage: gpuproducer FD BLOCKS THREADS COUNT
// Every thread writes COUNT records in the test payload format (producer id
// = global thread index); prints "published dropped oversize".
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cuda_runtime.h>

#include "gpuprobe_shm.h"

#define CHECK(x)                                                                    \
	do {                                                                        \
		cudaError_t e_ = (x);                                               \
		if (e_ != cudaSuccess) {                                            \
			fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));   \
			exit(2);                                                    \
		}                                                                   \
	} while (0)

__device__ unsigned long long ld_volatile(const unsigned long long *p)
{
	return *(const volatile unsigned long long *)p;
}

// produce runs the ring producer algorithm; returns 0 published, 1 dropped.
__device__ int produce(unsigned char *base, unsigned cap, unsigned stride, const unsigned char *payload,
		       unsigned len)
{
	unsigned long long *head = (unsigned long long *)(base + GPBR_RING_HEAD);
	unsigned long long *tail = (unsigned long long *)(base + GPBR_RING_TAIL);
	unsigned long long *dropped = (unsigned long long *)(base + GPBR_RING_DROPPED);
	unsigned char *data = base + GPBR_DATA_OFFSET;

	unsigned long long tl = ld_volatile(tail);
	__threadfence_system(); // acquire: no slot write before the tail load
	unsigned long long h = ld_volatile(head);
	if (h - tl >= cap) {
		atomicAdd_system(dropped, 1ull);
		return 1;
	}
	unsigned long long t = atomicAdd_system(head, 1ull);
	if (t - tl >= cap) {
		atomicAdd_system(dropped, 1ull);
		__threadfence_system(); // release: the head add before the slot-drop add
		unsigned *drops = (unsigned *)(data + (unsigned long long)cap * stride);
		atomicAdd_system(&drops[t & (cap - 1)], 1u);
		return 1;
	}
	unsigned char *s = data + (t & (cap - 1)) * (unsigned long long)stride;
	*(volatile unsigned *)(s + 8) = len;
	*(volatile unsigned *)(s + 12) = 7;
	for (unsigned i = 0; i < len; i += 8) // payload is 8-byte padded in the slot
		*(volatile unsigned long long *)(s + 16 + i) = *(const unsigned long long *)(payload + i);
	__threadfence_system(); // release: payload before seq
	*(volatile unsigned long long *)s = t + 1;
	return 0;
}

__global__ void producers(unsigned char *base, unsigned cap, unsigned stride, unsigned long long count,
			  unsigned long long *results)
{
	unsigned id = blockIdx.x * blockDim.x + threadIdx.x;
	unsigned long long n[2] = {0, 0};
	__align__(8) unsigned char buf[72];
	for (unsigned long long seq = 0; seq < count; seq++) {
		unsigned l = 24 + (unsigned)(seq % 40);
		memcpy(buf, &id, 4);
		memcpy(buf + 4, &l, 4);
		memcpy(buf + 8, &seq, 8);
		for (unsigned i = 16; i < l - 8; i++)
			buf[i] = (unsigned char)(seq + i);
		unsigned long long sum = 14695981039346656037ull;
		for (unsigned i = 0; i < l - 8; i++) {
			sum ^= buf[i];
			sum *= 1099511628211ull;
		}
		memcpy(buf + l - 8, &sum, 8);
		n[produce(base, cap, stride, buf, l)]++;
	}
	atomicAdd(&results[0], n[0]);
	atomicAdd(&results[1], n[1]);
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: gpuproducer FD BLOCKS THREADS COUNT\n");
		return 2;
	}
	int fd = atoi(argv[1]);
	unsigned blocks = (unsigned)atoi(argv[2]), threads = (unsigned)atoi(argv[3]);
	unsigned long long count = strtoull(argv[4], NULL, 10);
	struct stat st;
	if (fstat(fd, &st) != 0) {
		perror("fstat");
		return 2;
	}
	size_t len = (size_t)st.st_size;
	void *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		perror("mmap");
		return 2;
	}
	int rc = gpbr_check(base, len, GPBR_KIND_RING);
	if (rc != GPBR_OK) {
		fprintf(stderr, "gpbr_check: %d\n", rc);
		return 3;
	}
	const struct gpbr_header *h = (const struct gpbr_header *)base;
	if (h->stride < GPBR_SLOT_HEADER + 64) {
		fprintf(stderr, "slots of %u bytes cannot hold 64-byte payloads\n", h->stride);
		return 3;
	}
	CHECK(cudaHostRegister(base, len, cudaHostRegisterMapped));
	unsigned char *dbase;
	CHECK(cudaHostGetDevicePointer((void **)&dbase, base, 0));
	unsigned long long *results;
	CHECK(cudaMallocManaged(&results, 2 * sizeof(*results)));
	results[0] = results[1] = 0;
	producers<<<blocks, threads>>>(dbase, h->max_entries, h->stride, count, results);
	CHECK(cudaGetLastError());
	CHECK(cudaDeviceSynchronize());
	printf("%llu %llu 0\n", results[0], results[1]);
	CHECK(cudaHostUnregister(base));
	return 0;
}
