/* main.c - gpuprobe-counters: samples one GPU's performance monitors with
 * CUPTI PM sampling and writes the samples as JSON lines (sample.c).
 *
 *   gpuprobe-counters [-d DEV] [-i NS] [-t S] [-o FILE] [-m M1,M2,...]
 *   gpuprobe-counters --list [-d DEV]
 *
 * One process per GPU of a node: PM sampling counts the whole device, every
 * context and process on it (docs/counters.md says why it runs apart from
 * the collector and the shim). It fails open: without the driver, without a
 * CUPTI that has PM sampling, or with another profiler holding the device,
 * it prints the call that failed and exits with a status of its own
 * (gpc.h) before it writes any sample.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpc.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gpuprobe-counters [options]\n"
		"  -d, --device N        CUDA device index (default 0)\n"
		"  -i, --interval-ns NS  sampling interval in ns, GPU time trigger (default 100000)\n"
		"  -t, --duration S      seconds to sample (default: until SIGINT or SIGTERM)\n"
		"  -o, --output FILE     JSON lines to FILE (default stdout)\n"
		"  -m, --metrics LIST    comma-separated metric names instead of the default set\n"
		"      --decode-ms MS    decode the hardware buffer every MS ms (default 20)\n"
		"      --hw-buffer-mb MB hardware buffer size (default 128)\n"
		"      --max-samples N   samples per counter data image (default 4000)\n"
		"      --list            print the chip's PM-sampling metrics and submetrics, then the\n"
		"                        default set as chosen, and exit\n");
}

static void on_signal(int sig)
{
	(void)sig;
	gpc_stop = 1;
}

static int parse(int argc, char **argv, struct gpc_opts *o, const char **metrics, int *list)
{
	static const struct option long_opts[] = {
		{"device", required_argument, 0, 'd'},     {"interval-ns", required_argument, 0, 'i'},
		{"duration", required_argument, 0, 't'},   {"output", required_argument, 0, 'o'},
		{"metrics", required_argument, 0, 'm'},    {"decode-ms", required_argument, 0, 'D'},
		{"hw-buffer-mb", required_argument, 0, 'B'}, {"max-samples", required_argument, 0, 'S'},
		{"list", no_argument, 0, 'l'},             {"help", no_argument, 0, 'h'},
		{0, 0, 0, 0}};
	int c;
	char *end;
	while ((c = getopt_long(argc, argv, "d:i:t:o:m:h", long_opts, NULL)) != -1) {
		end = NULL;
		switch (c) {
		case 'd': o->device = (int)strtol(optarg, &end, 10); break;
		case 'i': o->interval_ns = strtoull(optarg, &end, 10); break;
		case 't': o->duration_s = strtod(optarg, &end); break;
		case 'D': o->decode_ms = (unsigned)strtoul(optarg, &end, 10); break;
		case 'B': o->hw_buffer_mb = strtoull(optarg, &end, 10); break;
		case 'S': o->max_samples = (uint32_t)strtoul(optarg, &end, 10); break;
		case 'm': *metrics = optarg; break;
		case 'l': *list = 1; break;
		case 'o':
			if (!(o->out = fopen(optarg, "w"))) {
				perror(optarg);
				return GPC_EXIT_USAGE;
			}
			break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return GPC_EXIT_USAGE;
		}
		if (end && *end) {
			fprintf(stderr, "gpuprobe-counters: -%c: not a number: %s\n", c, optarg);
			return GPC_EXIT_USAGE;
		}
	}
	if (optind < argc || o->interval_ns == 0 || o->decode_ms == 0 || o->hw_buffer_mb == 0 || o->max_samples == 0) {
		fprintf(stderr, "gpuprobe-counters: interval, decode period, buffer and image size must be > 0\n");
		usage(stderr);
		return GPC_EXIT_USAGE;
	}
	return 0;
}

/* cuda_init makes device dev's primary context current: CUPTI's profiler
 * needs a context on the device it samples. */
static int cuda_init(int dev)
{
	gpc_curesult e;
	gpc_cudevice d;
	gpc_cucontext ctx;
	if ((e = gpc.cuInit(0)) != 0)
		return gpc_cuerr("cuInit", e);
	if ((e = gpc.cuDeviceGet(&d, dev)) != 0)
		return gpc_cuerr("cuDeviceGet", e);
	if ((e = gpc.cuDevicePrimaryCtxRetain(&ctx, d)) != 0)
		return gpc_cuerr("cuDevicePrimaryCtxRetain", e);
	if ((e = gpc.cuCtxSetCurrent(ctx)) != 0)
		return gpc_cuerr("cuCtxSetCurrent", e);
	gpc_profiler_initialize_params p = {.structSize = GPC_SIZE(gpc_profiler_initialize_params, pPriv)};
	gpc_result r = gpc.cuptiProfilerInitialize(&p);
	return r == GPC_SUCCESS ? 0 : gpc_err("cuptiProfilerInitialize", r);
}

static void print_chosen(const struct gpc_metrics *m)
{
	for (size_t i = 0; i < m->n; i++)
		printf("chosen %s %s\n", m->key[i][0] ? m->key[i] : "-", m->name[i]);
	for (size_t i = 0; i < m->nmissing; i++)
		printf("left-out %s: %s\n", m->missing[i], m->why[i]);
}

int main(int argc, char **argv)
{
	struct gpc_opts o = {.interval_ns = 100000, .decode_ms = 20, .hw_buffer_mb = 128, .max_samples = 4000};
	const char *metrics = NULL;
	int list = 0, rc;
	struct gpc_host h = {0};
	struct gpc_metrics m;

	if ((rc = parse(argc, argv, &o, &metrics, &list)))
		return rc;
	if (!o.out)
		o.out = stdout;
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	if ((rc = gpc_load()) || (rc = cuda_init(o.device)) || (rc = gpc_host_open(&h, o.device)))
		return rc;
	if (list) {
		printf("chip %s\n", h.chip);
		if ((rc = gpc_list(&h, stdout)))
			return rc;
	}
	if ((rc = gpc_choose(&h, metrics, &m))) {
		if (rc == GPC_EXIT_NO_METRIC)
			fprintf(stderr, "gpuprobe-counters: no metric left to sample on chip %s\n", h.chip);
		return rc;
	}
	for (size_t i = 0; i < m.n; i++)
		fprintf(stderr, "gpuprobe-counters: metric %s = %s\n", m.key[i][0] ? m.key[i] : "-", m.name[i]);
	if (list) {
		print_chosen(&m);
		return 0;
	}
	rc = gpc_sample(&h, &m, &o);
	if (o.out != stdout)
		fclose(o.out);
	return rc;
}
