/*
 * cproducer: a C user of include/gpuprobe_shm.h, driven by shm's Go tests.
 *
 *   cproducer check FD KIND        print gpbr_check's verdict for the region
 *   cproducer produce FD ID COUNT  write COUNT records into the ring at FD,
 *                                  then print "published dropped oversize"
 *
 * Record payload (as the Go test producers write it):
 *   u32 producer id, u32 length, u64 sequence, filler bytes, u64 FNV-1a of
 *   everything before it. Lengths cycle through 24 .. 24+39.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "gpuprobe_shm.h"

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
	uint64_t h = 14695981039346656037ull;
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 1099511628211ull;
	}
	return h;
}

static void *map_fd(int fd, size_t *len)
{
	struct stat st;
	void *p;

	if (fstat(fd, &st) != 0) {
		perror("fstat");
		exit(2);
	}
	*len = (size_t)st.st_size;
	p = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	return p;
}

int main(int argc, char **argv)
{
	size_t len;
	void *base;

	if (argc == 4 && strcmp(argv[1], "check") == 0) {
		base = map_fd(atoi(argv[2]), &len);
		printf("%d\n", gpbr_check(base, len, (unsigned)atoi(argv[3])));
		return 0;
	}
	if (argc == 5 && strcmp(argv[1], "produce") == 0) {
		uint32_t id = (uint32_t)strtoul(argv[3], NULL, 10);
		uint64_t count = strtoull(argv[4], NULL, 10), n[3] = {0, 0, 0};
		uint8_t buf[128];
		int rc;

		base = map_fd(atoi(argv[2]), &len);
		rc = gpbr_check(base, len, GPBR_KIND_RING);
		if (rc != GPBR_OK) {
			fprintf(stderr, "gpbr_check: %d\n", rc);
			return 3;
		}
		for (uint64_t seq = 0; seq < count; seq++) {
			uint32_t l = 24 + (uint32_t)(seq % 40);
			uint64_t sum;

			memcpy(buf, &id, 4);
			memcpy(buf + 4, &l, 4);
			memcpy(buf + 8, &seq, 8);
			for (uint32_t i = 16; i < l - 8; i++)
				buf[i] = (uint8_t)(seq + i);
			sum = fnv1a(buf, l - 8);
			memcpy(buf + l - 8, &sum, 8);
			n[gpbr_ring_produce(base, 7, buf, l)]++;
		}
		printf("%llu %llu %llu\n", (unsigned long long)n[0], (unsigned long long)n[1],
		       (unsigned long long)n[2]);
		return 0;
	}
	fprintf(stderr, "usage: cproducer check FD KIND | produce FD ID COUNT\n");
	return 2;
}
