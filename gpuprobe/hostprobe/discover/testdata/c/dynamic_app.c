/* An application linked against the runtime stand-in: cudaLaunchKernel is
 * an undefined (imported) symbol here, so this is not a static runtime. */
#include <stdio.h>
int cudaLaunchKernel(void);
int main(void) {
	char line[256];
	setvbuf(stdout, NULL, _IONBF, 0);
	printf("ready\n");
	while (fgets(line, sizeof line, stdin))
		;
	return cudaLaunchKernel();
}
