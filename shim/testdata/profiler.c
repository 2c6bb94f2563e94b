/*
 * profiler.c - an application that uses CUPTI itself, as torch.profiler
 * does (the shim's device-window tests; MOCK driver and MOCK libcupti, both
 * linked directly so that its CUPTI calls bind to the shim's interposers as
 * Kineto's do): it launches BEFORE kernels, then registers activity
 * callbacks, enables kernel activity and launches DURING kernels, disables
 * it and flushes, sleeps SLEEP_MS, and launches AFTER kernels.
 *
 * Built with -DPROFILER_LIB it is a library whose profiler_main is main,
 * for profiler_local.c to load with RTLD_LOCAL (as Python loads torch,
 * whose Kineto links libcupti).
 *
 * usage: profiler BEFORE DURING AFTER SLEEP_MS
 *        profiler rate PER_SECOND MS   (launches PER_SECOND kernels a second
 *                                       for MS milliseconds: the rate cap)
 *        profiler exitflush N PATH     (N launches, exits once PATH exists)
 */
#include <string.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#ifdef PROFILER_LIB
#define main profiler_main
__attribute__((visibility("default"))) int profiler_main(int argc, char **argv);
#endif

typedef int CUresult;
CUresult cuInit(unsigned);
CUresult cuModuleLoadData(void **, const void *);
CUresult cuModuleGetFunction(void **, void *, const char *);
CUresult cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
			void **, void **);
int cuptiActivityRegisterCallbacks(void (*)(uint8_t **, size_t *, size_t *),
				   void (*)(void *, uint32_t, uint8_t *, size_t, size_t));
int cuptiActivityEnable(uint32_t);
int cuptiActivityDisable(uint32_t);
int cuptiActivityFlushAll(uint32_t);
int cuptiActivityGetNextRecord(uint8_t *, size_t, void **);

static uint8_t buf[1 << 20];
static int seen; /* kernel records the application's own profiler got */

static void req(uint8_t **b, size_t *size, size_t *max) { *b = buf, *size = sizeof buf, *max = 0; }
static void done(void *c, uint32_t s, uint8_t *b, size_t size, size_t valid)
{
	(void)c, (void)s, (void)size;
	void *r = NULL;
	while (cuptiActivityGetNextRecord(b, valid, &r) == 0)
		seen++;
}

static const uint32_t fatbin[4] = {0xBA55ED50u, 0x00100001u, 0, 0};

static void launch(void *f, int n)
{
	for (int i = 0; i < n; i++)
		if (cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) != 0) {
			fprintf(stderr, "profiler: launch failed\n");
			exit(1);
		}
}

static int rate(void *f, long per_second, long ms)
{
	struct timespec gap = {0, 1000000000L / per_second};
	for (long i = 0; i < per_second * ms / 1000; i++) {
		launch(f, 1);
		nanosleep(&gap, NULL);
	}
	printf("profiler: rate done\n");
	return 0;
}

/* exitflush: N launches, then exit as soon as PATH exists (the MOCK
 * CUPTI creates it when its periodic flush begins to hold; 10 s at most). */
static int exitflush(void *f, int n, const char *path)
{
	launch(f, n);
	struct timespec ms = {0, 1000000L};
	for (int i = 0; i < 10000 && access(path, F_OK) != 0; i++)
		nanosleep(&ms, NULL);
	printf("profiler: exitflush done\n");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "exitflush") == 0) {
		void *m, *f;
		if (cuInit(0) || cuModuleLoadData(&m, fatbin) || cuModuleGetFunction(&f, m, "_Z6vecAddPfS_S_i"))
			return 1;
		return exitflush(f, atoi(argv[2]), argv[3]);
	}
	if (argc == 4 && strcmp(argv[1], "rate") == 0) {
		void *m, *f;
		if (cuInit(0) || cuModuleLoadData(&m, fatbin) || cuModuleGetFunction(&f, m, "_Z6vecAddPfS_S_i"))
			return 1;
		return rate(f, atol(argv[2]), atol(argv[3]));
	}
	if (argc != 5) {
		fprintf(stderr, "usage: profiler BEFORE DURING AFTER SLEEP_MS\n");
		return 2;
	}
	void *m, *f;
	if (cuInit(0) || cuModuleLoadData(&m, fatbin) || cuModuleGetFunction(&f, m, "_Z6vecAddPfS_S_i"))
		return 1;
	launch(f, atoi(argv[1]));
	if (cuptiActivityRegisterCallbacks(req, done) || cuptiActivityEnable(10))
		return 1;
	launch(f, atoi(argv[2]));
	cuptiActivityDisable(10);
	cuptiActivityFlushAll(1);
	struct timespec t = {atoi(argv[4]) / 1000, (long)(atoi(argv[4]) % 1000) * 1000000L};
	nanosleep(&t, NULL);
	launch(f, atoi(argv[3]));
	printf("profiler: its own profiler saw %d kernels\n", seen);
	return 0;
}
