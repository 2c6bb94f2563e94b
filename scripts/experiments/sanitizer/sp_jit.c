// Experiment: turn PTX into a patch cubin with the nvJitLink or NVRTC that
// ships in the application's wheels. Usage: sp_jit jitlink LIB in.ptx out.cubin OPT...
//                                          sp_jit nvrtc LIB in.cu out.cubin OPT...
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <nvJitLink.h>
#include <nvrtc.h>
#include <time.h>
#define S2(x) #x
#define S(x) S2(x)
static char *slurp(const char *f, size_t *n) { FILE *p = fopen(f, "rb"); if (!p) { perror(f); exit(1); } fseek(p, 0, SEEK_END); *n = ftell(p); fseek(p, 0, SEEK_SET); char *b = malloc(*n + 1); *n = fread(b, 1, *n, p); b[*n] = 0; fclose(p); return b; }
static double ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
int main(int argc, char **argv)
{
	if (argc < 5) return 2;
	void *h = dlopen(argv[2], RTLD_NOW); if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
	size_t n; char *src = slurp(argv[3], &n);
	const char **opts = (const char **)argv + 5; int nopt = argc - 5;
	double t0 = ms();
	void *out = 0; size_t outn = 0; char log[8192] = "";
	if (!strcmp(argv[1], "jitlink")) {
		__typeof__(nvJitLinkCreate) *create = dlsym(h, S(nvJitLinkCreate));
		__typeof__(nvJitLinkAddData) *add = dlsym(h, S(nvJitLinkAddData));
		__typeof__(nvJitLinkComplete) *complete = dlsym(h, S(nvJitLinkComplete));
		__typeof__(nvJitLinkGetLinkedCubinSize) *csize = dlsym(h, S(nvJitLinkGetLinkedCubinSize));
		__typeof__(nvJitLinkGetLinkedCubin) *cubin = dlsym(h, S(nvJitLinkGetLinkedCubin));
		__typeof__(nvJitLinkGetErrorLog) *elog = dlsym(h, S(nvJitLinkGetErrorLog));
		if (!create) { fprintf(stderr, "no %s in %s\n", S(nvJitLinkCreate), argv[2]); return 1; }
		nvJitLinkHandle j; int r = create(&j, nopt, opts);
		if (!r) r = add(j, NVJITLINK_INPUT_PTX, src, n, "patch.ptx");
		if (!r) r = complete(j);
		if (r) { elog(j, log); fprintf(stderr, "nvJitLink error %d: %s\n", r, log); return 1; }
		csize(j, &outn); out = malloc(outn); cubin(j, out);
	} else {
		__typeof__(nvrtcCreateProgram) *create = dlsym(h, "nvrtcCreateProgram");
		__typeof__(nvrtcCompileProgram) *comp = dlsym(h, "nvrtcCompileProgram");
		__typeof__(nvrtcGetCUBINSize) *csize = dlsym(h, "nvrtcGetCUBINSize");
		__typeof__(nvrtcGetCUBIN) *cubin = dlsym(h, "nvrtcGetCUBIN");
		__typeof__(nvrtcGetProgramLog) *plog = dlsym(h, "nvrtcGetProgramLog");
		nvrtcProgram p; int r = create(&p, src, "patch.cu", 0, 0, 0);
		if (!r) r = comp(p, nopt, opts);
		if (r) { plog(p, log); fprintf(stderr, "nvrtc error %d: %s\n", r, log); return 1; }
		csize(p, &outn); out = malloc(outn); cubin(p, out);
	}
	FILE *f = fopen(argv[4], "wb"); fwrite(out, 1, outn, f); fclose(f);
	fprintf(stderr, "%s: %zu bytes in %.1f ms\n", argv[1], outn, ms() - t0);
	return 0;
}
