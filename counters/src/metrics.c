/* metrics.c - which metrics to sample: the chip's own enumeration (the
 * profiler host API for PM sampling), a default set picked from it by
 * name, and the one-pass config image CUPTI samples them with.
 *
 * The default set is what an operator asks of a kernel first: SM
 * throughput and activity, DRAM read and write bandwidth, tensor pipe
 * activity, achieved occupancy, L2 hit rate. Each entry lists the exact
 * names Nsight Compute uses for it, most specific first, then a pattern
 * (substrings of a base metric, a submetric) tried against every base
 * metric the chip enumerates, so that a chip naming a counter differently
 * still gets one. An entry the chip does not offer, or that would need a
 * second pass (PM sampling samples one pass only), is left out and said
 * so in the output's header.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpc.h"

struct want {
	const char *key;
	const char *names[5];
	const char *base_has[2]; /* pattern: substrings of the base metric */
	const char *sub;         /* pattern: the submetric */
};

static const struct want defaults[] = {
	{"sm_throughput", {"sm__throughput.avg.pct_of_peak_sustained_elapsed"}, {"sm__throughput"}, "avg.pct_of_peak_sustained_elapsed"},
	{"sm_active", {"sm__cycles_active.avg.pct_of_peak_sustained_elapsed", "sm__cycles_active.avg"}, {"sm__cycles_active"}, "avg.pct_of_peak_sustained_elapsed"},
	{"dram_read_bytes_per_second", {"dram__bytes_read.sum.per_second"}, {"dram__bytes_read"}, "sum.per_second"},
	{"dram_write_bytes_per_second", {"dram__bytes_write.sum.per_second"}, {"dram__bytes_write"}, "sum.per_second"},
	{"tensor_active",
	 {"sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
	  "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
	  "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
	  "sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_elapsed"},
	 {"sm__pipe_tensor", "cycles_active"},
	 "avg.pct_of_peak_sustained_elapsed"},
	{"achieved_occupancy", {"sm__warps_active.avg.pct_of_peak_sustained_active"}, {"sm__warps_active"}, "avg.pct_of_peak_sustained_active"},
	{"l2_hit_rate", {"lts__t_sector_hit_rate.pct"}, {"lts__t_sector", "hit_rate"}, "pct"},
};

static const char *type_name[GPC_METRIC_TYPE__COUNT] = {"counter", "ratio", "throughput"};

/* What the chip enumerates, per metric type (valid while the host object
 * they came from lives). */
struct bases {
	const char **names[GPC_METRIC_TYPE__COUNT];
	size_t n[GPC_METRIC_TYPE__COUNT];
};

int gpc_host_open(struct gpc_host *h, int dev)
{
	gpc_device_get_chip_name_params cn = {.structSize = GPC_SIZE(gpc_device_get_chip_name_params, pChipName),
					      .deviceIndex = (size_t)dev};
	gpc_result r = gpc.cuptiDeviceGetChipName(&cn);
	if (r != GPC_SUCCESS)
		return gpc_err("cuptiDeviceGetChipName", r);
	h->chip = cn.pChipName;

	gpc_pm_get_counter_availability_params ca = {
		.structSize = GPC_SIZE(gpc_pm_get_counter_availability_params, pCounterAvailabilityImage),
		.deviceIndex = (size_t)dev};
	if ((r = gpc.cuptiPmSamplingGetCounterAvailability(&ca)) != GPC_SUCCESS)
		return gpc_err("cuptiPmSamplingGetCounterAvailability (size)", r);
	h->avail_size = ca.counterAvailabilityImageSize;
	h->avail = calloc(1, h->avail_size ? h->avail_size : 1);
	if (!h->avail)
		return GPC_EXIT_API;
	ca.pCounterAvailabilityImage = h->avail;
	if ((r = gpc.cuptiPmSamplingGetCounterAvailability(&ca)) != GPC_SUCCESS)
		return gpc_err("cuptiPmSamplingGetCounterAvailability", r);
	return 0;
}

/* host_new creates a PM-sampling host object for h's chip. */
static gpc_host_object *host_new(const struct gpc_host *h)
{
	gpc_host_initialize_params p = {.structSize = GPC_SIZE(gpc_host_initialize_params, pHostObject),
					.profilerType = GPC_PROFILER_TYPE_PM_SAMPLING,
					.pChipName = h->chip,
					.pCounterAvailabilityImage = h->avail};
	gpc_result r = gpc.cuptiProfilerHostInitialize(&p);
	if (r != GPC_SUCCESS) {
		gpc_err("cuptiProfilerHostInitialize", r);
		return NULL;
	}
	return p.pHostObject;
}

static void host_free(gpc_host_object *o)
{
	if (!o)
		return;
	gpc_host_deinitialize_params p = {.structSize = GPC_SIZE(gpc_host_deinitialize_params, pHostObject),
					  .pHostObject = o};
	gpc.cuptiProfilerHostDeinitialize(&p);
}

static int get_bases(gpc_host_object *o, struct bases *b)
{
	for (int t = 0; t < GPC_METRIC_TYPE__COUNT; t++) {
		gpc_host_get_base_metrics_params p = {.structSize = GPC_SIZE(gpc_host_get_base_metrics_params, numMetrics),
						      .pHostObject = o,
						      .metricType = t};
		gpc_result r = gpc.cuptiProfilerHostGetBaseMetrics(&p);
		if (r != GPC_SUCCESS)
			return gpc_err("cuptiProfilerHostGetBaseMetrics", r);
		b->names[t] = p.ppMetricNames;
		b->n[t] = p.numMetrics;
	}
	return 0;
}

/* sub_name is a submetric as enumerated, without the base and the dot
 * some CUPTI versions put before it. */
static const char *sub_name(const char *base, const char *s)
{
	size_t bl = strlen(base);
	if (strncmp(s, base, bl) == 0)
		s += bl;
	return *s == '.' ? s + 1 : s;
}

int gpc_list(struct gpc_host *h, FILE *out)
{
	gpc_host_object *o = host_new(h);
	struct bases b;
	if (!o)
		return GPC_EXIT_API;
	int rc = get_bases(o, &b);
	for (int t = 0; !rc && t < GPC_METRIC_TYPE__COUNT; t++) {
		for (size_t i = 0; i < b.n[t]; i++) {
			fprintf(out, "%s %s\n", type_name[t], b.names[t][i]);
			gpc_host_get_sub_metrics_params s = {
				.structSize = GPC_SIZE(gpc_host_get_sub_metrics_params, ppSubMetrics),
				.pHostObject = o,
				.metricType = t,
				.pMetricName = b.names[t][i]};
			if (gpc.cuptiProfilerHostGetSubMetrics(&s) != GPC_SUCCESS)
				continue;
			for (size_t j = 0; j < s.numOfSubmetrics; j++)
				fprintf(out, "  %s.%s\n", b.names[t][i], sub_name(b.names[t][i], s.ppSubMetrics[j]));
		}
	}
	host_free(o);
	return rc;
}

/* offered says whether full (BASE.SUB) is enumerated: its base among the
 * chip's base metrics and SUB among that base's submetrics. */
static int offered(gpc_host_object *o, const struct bases *b, const char *full)
{
	const char *dot = strchr(full, '.');
	size_t bl = dot ? (size_t)(dot - full) : strlen(full);
	for (int t = 0; t < GPC_METRIC_TYPE__COUNT; t++) {
		for (size_t i = 0; i < b->n[t]; i++) {
			const char *base = b->names[t][i];
			if (strlen(base) != bl || strncmp(base, full, bl) != 0)
				continue;
			if (!dot)
				return 1;
			gpc_host_get_sub_metrics_params s = {
				.structSize = GPC_SIZE(gpc_host_get_sub_metrics_params, ppSubMetrics),
				.pHostObject = o,
				.metricType = t,
				.pMetricName = base};
			if (gpc.cuptiProfilerHostGetSubMetrics(&s) != GPC_SUCCESS)
				return 1; /* cannot tell: ConfigAddMetrics decides */
			for (size_t j = 0; j < s.numOfSubmetrics; j++)
				if (strcmp(sub_name(base, s.ppSubMetrics[j]), dot + 1) == 0)
					return 1;
			return 0;
		}
	}
	return 0;
}

/* by_pattern looks for a base metric containing every w->base_has that
 * offers w->sub; returns a malloc'd BASE.SUB or NULL. */
static char *by_pattern(gpc_host_object *o, const struct bases *b, const struct want *w)
{
	char buf[256];
	for (int t = 0; t < GPC_METRIC_TYPE__COUNT; t++) {
		for (size_t i = 0; i < b->n[t]; i++) {
			const char *base = b->names[t][i];
			int all = 1;
			for (size_t k = 0; k < 2 && w->base_has[k]; k++)
				all &= strstr(base, w->base_has[k]) != NULL;
			if (!all)
				continue;
			snprintf(buf, sizeof buf, "%s.%s", base, w->sub);
			if (offered(o, b, buf))
				return strdup(buf);
		}
	}
	return NULL;
}

/* config builds o's config image for the metrics added to it into
 * img and size and returns the passes it needs (0 on error). */
static size_t config(gpc_host_object *o, uint8_t **img, size_t *size)
{
	gpc_host_get_config_image_size_params zs = {
		.structSize = GPC_SIZE(gpc_host_get_config_image_size_params, configImageSize), .pHostObject = o};
	gpc_result r = gpc.cuptiProfilerHostGetConfigImageSize(&zs);
	if (r != GPC_SUCCESS) {
		gpc_err("cuptiProfilerHostGetConfigImageSize", r);
		return 0;
	}
	uint8_t *buf = malloc(zs.configImageSize ? zs.configImageSize : 1);
	if (!buf)
		return 0;
	gpc_host_get_config_image_params ip = {.structSize = GPC_SIZE(gpc_host_get_config_image_params, pConfigImage),
					       .pHostObject = o,
					       .configImageSize = zs.configImageSize,
					       .pConfigImage = buf};
	gpc_host_get_num_of_passes_params np = {.structSize = GPC_SIZE(gpc_host_get_num_of_passes_params, numOfPasses),
						.configImageSize = zs.configImageSize,
						.pConfigImage = buf};
	if ((r = gpc.cuptiProfilerHostGetConfigImage(&ip)) != GPC_SUCCESS ||
	    (r = gpc.cuptiProfilerHostGetNumOfPasses(&np)) != GPC_SUCCESS) {
		gpc_err("cuptiProfilerHostGetConfigImage/GetNumOfPasses", r);
		free(buf);
		return 0;
	}
	*img = buf;
	*size = zs.configImageSize;
	return np.numOfPasses;
}

/* try_set adds names[0..n) to a new host object: on success (one pass)
 * it returns the object with its config image in h, else NULL and, for a
 * rejected last name, its reason in *why. */
static gpc_host_object *try_set(struct gpc_host *h, const char **names, size_t n, const char **why)
{
	gpc_host_object *o = host_new(h);
	if (!o) {
		*why = "cuptiProfilerHostInitialize failed";
		return NULL;
	}
	gpc_host_config_add_metrics_params p = {.structSize = GPC_SIZE(gpc_host_config_add_metrics_params, numMetrics),
						.pHostObject = o,
						.ppMetricNames = names,
						.numMetrics = n};
	gpc_result r = gpc.cuptiProfilerHostConfigAddMetrics(&p);
	if (r != GPC_SUCCESS) {
		*why = r == GPC_ERROR_INVALID_METRIC_NAME ? "not a metric of this chip for PM sampling"
							  : "cuptiProfilerHostConfigAddMetrics refused it";
		host_free(o);
		return NULL;
	}
	uint8_t *img = NULL;
	size_t size = 0, passes = config(o, &img, &size);
	if (passes != 1) {
		*why = passes ? "needs a second pass with the metrics before it" : "no config image";
		free(img);
		host_free(o);
		return NULL;
	}
	free(h->config);
	h->config = img;
	h->config_size = size;
	return o;
}

/* fit keeps, in order, each of cand[0..n) that still fits one pass with
 * those kept before it. */
static int fit(struct gpc_host *h, char **cand, const char **keys, size_t n, struct gpc_metrics *m)
{
	for (size_t i = 0; i < n; i++) {
		const char *why = NULL;
		m->name[m->n] = cand[i];
		gpc_host_object *o = try_set(h, m->name, m->n + 1, &why);
		if (!o) {
			fprintf(stderr, "gpuprobe-counters: %s (%s): %s\n", cand[i], keys[i], why);
			m->missing[m->nmissing] = keys[i][0] ? keys[i] : cand[i];
			m->why[m->nmissing++] = why;
			continue;
		}
		host_free(h->obj);
		h->obj = o;
		m->key[m->n++] = keys[i];
	}
	return m->n ? 0 : GPC_EXIT_NO_METRIC;
}

/* pick_defaults fills cand/keys with the default set's names the chip
 * offers, and m's missing list with the others. */
static size_t pick_defaults(gpc_host_object *o, const struct bases *b, char **cand, const char **keys,
			    struct gpc_metrics *m)
{
	size_t n = 0;
	for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) {
		const struct want *w = &defaults[i];
		char *got = NULL;
		for (size_t k = 0; k < 5 && w->names[k] && !got; k++)
			if (offered(o, b, w->names[k]))
				got = strdup(w->names[k]);
		if (!got)
			got = by_pattern(o, b, w);
		if (!got) {
			m->missing[m->nmissing] = w->key;
			m->why[m->nmissing++] = "not enumerated for PM sampling on this chip";
			fprintf(stderr, "gpuprobe-counters: %s: none of its metrics is offered\n", w->key);
			continue;
		}
		cand[n] = got;
		keys[n++] = w->key;
	}
	return n;
}

int gpc_choose(struct gpc_host *h, const char *user, struct gpc_metrics *m)
{
	char *cand[GPC_MAX_METRICS];
	const char *keys[GPC_MAX_METRICS];
	size_t n = 0;

	memset(m, 0, sizeof *m);
	if (user && *user) {
		char *list = strdup(user), *save = NULL;
		for (char *t = strtok_r(list, ",", &save); t && n < GPC_MAX_METRICS; t = strtok_r(NULL, ",", &save)) {
			cand[n] = strdup(t);
			keys[n++] = "";
		}
		free(list);
	} else {
		gpc_host_object *o = host_new(h);
		struct bases b;
		if (!o)
			return GPC_EXIT_API;
		int rc = get_bases(o, &b);
		if (!rc)
			n = pick_defaults(o, &b, cand, keys, m);
		host_free(o);
		if (rc)
			return rc;
	}
	return fit(h, cand, keys, n, m);
}
