/* Test process: prints "ready", then dlopens each path read from stdin
 * (one per line) and answers "ok" or "error <reason>"; exits at EOF. It
 * stands in for a CUDA application whose runtime dlopens libcuda at its
 * first CUDA call, after the collector started. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
int main(void) {
	char line[4096];
	setvbuf(stdout, NULL, _IONBF, 0);
	printf("ready\n");
	while (fgets(line, sizeof line, stdin)) {
		line[strcspn(line, "\n")] = 0;
		if (!dlopen(line, RTLD_NOW | RTLD_GLOBAL)) {
			printf("error %s\n", dlerror());
			continue;
		}
		printf("ok\n");
	}
	return 0;
}
