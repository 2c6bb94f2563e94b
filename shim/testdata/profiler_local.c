/*
 * profiler_local.c - runs profiler.c (built as libprofiler.so, linked to
 * the MOCK libcupti) from a library loaded with RTLD_LOCAL, as Python
 * loads torch, whose Kineto links libcupti: the application's libcupti is
 * then outside the global scope, where the shim's CUPTI interposers must
 * still find it.
 *
 * usage: profiler-local LIB BEFORE DURING AFTER SLEEP_MS
 */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: profiler-local LIB ARGS...\n");
		return 2;
	}
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	int (*m)(int, char **) = h ? (int (*)(int, char **))dlsym(h, "profiler_main") : NULL;
	if (m == NULL) {
		fprintf(stderr, "profiler-local: %s\n", dlerror());
		return 1;
	}
	argv[1] = argv[0];
	return m(argc - 1, argv + 1);
}
