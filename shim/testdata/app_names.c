/*
 * app_names.c - the test application's kernel-name scenarios: kernels with
 * long mangled names (as PyTorch's are) reached every way the shim names a
 * function, on several devices, in fork children and in workers spawned
 * like torchrun's, and more new names than the names ring holds.
 *
 *   longnames       kernels of names_lens[] bytes, each launched twice
 *                   (cudart: every other one as its CUkernel, the others
 *                   through cuKernelGetFunction), one the shim never saw
 *                   looked up (named by the driver at its first launch) and
 *                   a graph of one of them
 *   multidev        two threads, on devices 0 and 1, launch every kernel
 *                   three times (cudart: one CUfunction per device)
 *   forknames       launches every kernel, forks a child that launches
 *                   them again, then launches them again itself
 *   spawn N         (no driver call) starts N workers like torchrun: fork,
 *                   then exec of this program with scenario worker and
 *                   APP_RANK set; waits for them
 *   worker          on device APP_RANK, launches every kernel twice
 *   manynames N     N kernels of 300-byte names launched once each, then
 *                   "app: first pass done", then after a line on stdin
 *                   each once more
 *   slowlong N      one 300-byte-named kernel launched N times, 10 ms apart
 *
 * Kernel i's name of n bytes is names_long(i, n): "_ZN2at6native" <len>
 * "k<i>_xxx...x" "Ev", i.e. at::native::k<i>_xxx...x() (shim_names_test.go
 * builds the same).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "app.h"

static const int names_lens[] = {80, 81, 300, 1000, 4096, 5000};
#define NLONG (int)(sizeof names_lens / sizeof names_lens[0])
#define NMAX 64

/* names_long returns kernel i's mangled name of exactly n bytes (n >= 24). */
static char *names_long(int i, int n)
{
	char id[16];
	int idn = snprintf(id, sizeof id, "k%d_", i);
	for (int d = 1; d < 6; d++) {
		int k = n - 15 - d;
		char ks[16];
		if (k < idn || snprintf(ks, sizeof ks, "%d", k) != d)
			continue;
		char *s = malloc((size_t)n + 1);
		int at = snprintf(s, (size_t)n + 1, "_ZN2at6native%s%s", ks, id);
		memset(s + at, 'x', (size_t)(n - 2 - at));
		memcpy(s + n - 2, "Ev", 3);
		return s;
	}
	fprintf(stderr, "app: no name of %d bytes\n", n);
	exit(2);
}

/* The loaded kernels: CUkernels (library paths) or CUfunctions. */
static void *kern[NMAX];
static int nkern;

/* load_names loads a code image and looks up n kernels: kernel first+i's
 * name of len[i] bytes (or of len0 bytes when len is NULL). */
static void load_names(int first, int n, const int *len, int len0)
{
	void *m;
	if (A.library)
		CHECK(A.lib_load(&m, fatbin, NULL, NULL, 0, NULL, NULL, 0));
	else
		CHECK(A.mod_load(&m, fatbin));
	for (int i = 0; i < n && i < NMAX; i++) {
		char *name = names_long(first + i, len ? len[i] : len0);
		if (A.library)
			CHECK(A.lib_kernel(&kern[i], m, name));
		else
			CHECK(A.mod_fn(&kern[i], m, name));
		free(name);
	}
	nkern = n;
}

/* fn returns what the calling thread launches for kernel i: on library
 * paths, kernel i itself for even i (a CUkernel launched as a CUfunction,
 * as cudart 13 does) and its function in the current device's context
 * (cuKernelGetFunction) for odd i. */
static void *fn(int i)
{
	void *f = kern[i];
	if (A.library && i % 2 == 1)
		CHECK(A.kernel_fn(&f, kern[i]));
	return f;
}

static void launch_all(unsigned gy, int times)
{
	for (int i = 0; i < nkern; i++)
		for (int t = 0; t < times; t++)
			CHECK(A.launch(fn(i), (unsigned)i + 1, gy, 1, 32, 1, 1, 0, NULL, NULL, NULL));
}

static void longnames(void)
{
	load_names(0, NLONG, names_lens, 0);
	launch_all(1, 2);
	/* A kernel looked up behind the shim's back: named by the driver. */
	char *name = names_long(NLONG, 500);
	void *q = ((void *(*)(const char *))mock(A.library ? "mock_quiet_kernel" : "mock_quiet_function"))(name);
	free(name);
	CHECK(A.launch(q, 7, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
	CHECK(A.launch(q, 7, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
	/* A graph kernel node. */
	void *g, *node, *exec;
	kernel_node_params p = {fn(3), 9, 1, 1, 32, 1, 1, 0, NULL, NULL};
	CHECK(A.graph_create(&g, 0));
	CHECK(A.graph_add(&node, g, NULL, 0, &p));
	CHECK(A.graph_inst(&exec, g, 0));
	CHECK(A.graph_launch(exec, NULL));
}

static void *device_main(void *arg)
{
	int d = (int)(intptr_t)arg;
	((void (*)(int))mock("mock_set_device"))(d);
	launch_all((unsigned)d + 1, 3);
	return NULL;
}

static void multidev(void)
{
	pthread_t t[2];
	load_names(0, NLONG, names_lens, 0);
	for (int d = 0; d < 2; d++)
		pthread_create(&t[d], NULL, device_main, (void *)(intptr_t)d);
	for (int d = 0; d < 2; d++)
		pthread_join(t[d], NULL);
}

static int forknames(void)
{
	load_names(0, NLONG, names_lens, 0);
	launch_all(1, 1);
	fflush(stdout);
	pid_t c = fork();
	if (c == 0) {
		launch_all(2, 2);
		_exit(0);
	}
	int st;
	waitpid(c, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return 1;
	launch_all(3, 1);
	printf("app: fork child exited 0\n");
	return 0;
}

/* names_spawn: the spawn scenario (see above); argv is main's. */
int names_spawn(int argc, char **argv)
{
	int n = argc > 3 ? atoi(argv[3]) : 2, bad = 0;
	pid_t pids[16];
	if (n < 1 || n > 16)
		return 2;
	fflush(stdout);
	for (int r = 0; r < n; r++) {
		pids[r] = fork();
		if (pids[r] == 0) {
			char rank[8];
			snprintf(rank, sizeof rank, "%d", r);
			setenv("APP_RANK", rank, 1);
			execl("/proc/self/exe", argv[0], argv[1], "worker", (char *)NULL);
			_exit(127);
		}
	}
	for (int r = 0; r < n; r++) {
		int st;
		waitpid(pids[r], &st, 0);
		bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
	}
	printf("app: spawn workers=%d failed=%d\n", n, bad);
	return bad != 0;
}

static void worker(void)
{
	const char *e = getenv("APP_RANK");
	int rank = e ? atoi(e) : 0;
	((void (*)(int))mock("mock_set_device"))(rank);
	load_names(0, NLONG, names_lens, 0);
	launch_all((unsigned)rank + 1, 2);
}

static int manynames(int n)
{
	char line[8];
	load_names(100, n, NULL, 300);
	launch_all(1, 1);
	printf("app: first pass done\n");
	fflush(stdout);
	if (fgets(line, sizeof line, stdin) == NULL)
		return 2;
	launch_all(2, 1);
	return 0;
}

static void slowlong(int n)
{
	load_names(200, 1, NULL, 300);
	for (int i = 0; i < n; i++) {
		CHECK(A.launch(fn(0), 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
		usleep(10000);
		if (i == 0) {
			printf("app: first launch done\n");
			fflush(stdout);
		}
	}
}

int names_scenario(const char *scenario, int argc, char **argv)
{
	int n = argc > 3 ? atoi(argv[3]) : 0;
	if (strcmp(scenario, "longnames") == 0)
		longnames();
	else if (strcmp(scenario, "multidev") == 0)
		multidev();
	else if (strcmp(scenario, "forknames") == 0)
		return forknames();
	else if (strcmp(scenario, "worker") == 0)
		worker();
	else if (strcmp(scenario, "manynames") == 0)
		return n < 1 || n > NMAX ? 2 : manynames(n);
	else if (strcmp(scenario, "slowlong") == 0)
		slowlong(n);
	else
		return -1;
	return 0;
}
