/*
 * stack_app.c - launches through the MOCK driver from known frames built
 * with frame pointers (main -> stack_outer -> stack_inner ->
 * cuLaunchKernel), prints "launched", then waits for a line on stdin so
 * that a test can symbolise its stack from its maps while it lives.
 */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

typedef int (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
			void **, void **);
static launch_t launch;
static void *fn;
static volatile int sink;

__attribute__((noinline)) int stack_inner(void)
{
	int r = launch(fn, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
	sink++;
	return r;
}

__attribute__((noinline)) int stack_outer(void)
{
	int r = stack_inner();
	sink++;
	return r;
}

int main(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	if (h == NULL)
		return 1;
	int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
	int (*load)(void **, const void *) = (int (*)(void **, const void *))dlsym(h, "cuModuleLoadData");
	int (*get)(void **, void *, const char *) = (int (*)(void **, void *, const char *))dlsym(h, "cuModuleGetFunction");
	launch = (launch_t)dlsym(h, "cuLaunchKernel");
	void *m;
	if (!init || !load || !get || !launch || init(0) || load(&m, "mock image") || get(&fn, m, "_Z6vecAddPfS_S_i"))
		return 1;
	if (stack_outer() != 0)
		return 2;
	printf("launched\n");
	fflush(stdout);
	char b[8];
	return fgets(b, sizeof b, stdin) == NULL;
}
