/*
 * devices.c - Device records: which GPU each device ordinal of the process
 * is, written into the launch ring after every handshake, so that the
 * collector keys device state (the UUID on spans and series) by the
 * physical GPU, not by an ordinal that every container calls 0.
 *
 * The UUID is cuDeviceGetUuid_v2's where the driver has it (a MIG
 * instance's own UUID on a MIG device), else cuDeviceGetUuid's. Not on the
 * launch path: once per session, a handful of driver calls per device.
 */
#define _GNU_SOURCE
#include <string.h>

#include "gp.h"

/* CU_DEVICE_ATTRIBUTE_*: multiprocessors, compute capability. */
#define GP_ATTR_SM_COUNT 16
#define GP_ATTR_CC_MAJOR 75
#define GP_ATTR_CC_MINOR 76
/* Ordinals announced at most (the collector's bound, translate.MaxDevices). */
#define GP_MAX_DEVICES 64

static struct {
	CUresult (*count)(int *);
	CUresult (*get)(CUdevice *, int);
	CUresult (*uuid)(uint8_t *, CUdevice);
	CUresult (*name)(char *, int, CUdevice);
	CUresult (*attr)(int *, int, CUdevice);
	int looked;
} gp_dev_drv;

static void gp_dev_init(void)
{
	if (gp_dev_drv.looked)
		return;
	*(void **)&gp_dev_drv.count = gp_cuda_sym("cuDeviceGetCount");
	*(void **)&gp_dev_drv.get = gp_cuda_sym("cuDeviceGet");
	*(void **)&gp_dev_drv.uuid = gp_cuda_sym("cuDeviceGetUuid_v2");
	if (gp_dev_drv.uuid == NULL)
		*(void **)&gp_dev_drv.uuid = gp_cuda_sym("cuDeviceGetUuid");
	*(void **)&gp_dev_drv.name = gp_cuda_sym("cuDeviceGetName");
	*(void **)&gp_dev_drv.attr = gp_cuda_sym("cuDeviceGetAttribute");
	gp_dev_drv.looked = 1;
}

static uint32_t gp_dev_attr(CUdevice d, int attr)
{
	int v = 0;
	if (gp_dev_drv.attr == NULL || gp_dev_drv.attr(&v, attr, d) != CUDA_SUCCESS || v < 0)
		return 0;
	return (uint32_t)v;
}

/* gp_devices_announce writes one Device record per device the process
 * sees into a session's launch ring, before gp_install publishes it, so
 * that no launch record of the session comes first. */
GP_HIDDEN void gp_devices_announce(void *ring)
{
	int n = 0;
	if (ring == NULL)
		return;
	gp_dev_init();
	if (gp_dev_drv.count == NULL || gp_dev_drv.get == NULL || gp_dev_drv.uuid == NULL ||
	    gp_dev_drv.count(&n) != CUDA_SUCCESS) {
		GP_TRACE("device records: the driver cannot list its devices; spans carry no device UUID");
		return;
	}
	if (n > GP_MAX_DEVICES)
		n = GP_MAX_DEVICES;
	for (int i = 0; i < n; i++) {
		CUdevice d;
		struct gp_rec_device rec;
		memset(&rec, 0, sizeof rec);
		rec.h = (struct gp_rec_prefix){.type = GP_REC_DEVICE, .version = GP_REC_VERSION, .size = sizeof rec};
		if (gp_dev_drv.get(&d, i) != CUDA_SUCCESS || gp_dev_drv.uuid(rec.uuid, d) != CUDA_SUCCESS)
			continue;
		rec.device = (uint32_t)i;
		rec.pid = gp_pid();
		rec.sm_count = gp_dev_attr(d, GP_ATTR_SM_COUNT);
		rec.compute_cap = gp_dev_attr(d, GP_ATTR_CC_MAJOR) * 10 + gp_dev_attr(d, GP_ATTR_CC_MINOR);
		if (gp_dev_drv.name == NULL || gp_dev_drv.name(rec.name, sizeof rec.name - 1, d) != CUDA_SUCCESS)
			rec.name[0] = 0;
		gp_produce(ring, GP_REC_DEVICE, &rec, sizeof rec);
		GP_TRACE("device record %d: %s, sm_%u, uuid %02x%02x%02x%02x-...", i, rec.name, rec.compute_cap,
			 rec.uuid[0], rec.uuid[1], rec.uuid[2], rec.uuid[3]);
	}
}
