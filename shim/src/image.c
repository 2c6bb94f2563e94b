/*
 * image.c - what a module/library load hands the driver, and the patching
 * hook.
 *
 * Code images come as a fatbin wrapper (__fatBinC_Wrapper_t, magic
 * 0x466243B1, pointing at a fatbin), a fatbin container (magic 0xBA55ED50),
 * an ELF cubin, or NUL-terminated PTX text; cuModuleLoad and
 * cuLibraryLoadFromFile take a path instead. The shim only classifies and
 * sizes them (the parsing is the collector's, in Go).
 */
#define _GNU_SOURCE
#include <string.h>

#include "gp.h"

static uint32_t gp_rd32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

/* gp_fatbin_size returns the bytes of a fatbin container at p. */
static size_t gp_fatbin_size(const uint8_t *p)
{
	uint16_t hs;
	uint64_t sz;
	memcpy(&hs, p + 6, 2);
	memcpy(&sz, p + 8, 8);
	if (hs < 16 || sz > ((uint64_t)1 << 40))
		return 0;
	return hs + sz;
}

/* gp_elf_size returns the extent of a 64-bit ELF image at p: the end of its
 * section header table, the last thing a linker writes. */
static size_t gp_elf_size(const uint8_t *p)
{
	uint64_t shoff, phoff;
	uint16_t shentsize, shnum, phentsize, phnum;
	if (p[4] != 2) /* ELFCLASS64 */
		return 0;
	memcpy(&phoff, p + 0x20, 8);
	memcpy(&shoff, p + 0x28, 8);
	memcpy(&phentsize, p + 0x36, 2);
	memcpy(&phnum, p + 0x38, 2);
	memcpy(&shentsize, p + 0x3A, 2);
	memcpy(&shnum, p + 0x3C, 2);
	uint64_t a = shoff + (uint64_t)shentsize * shnum, b = phoff + (uint64_t)phentsize * phnum;
	uint64_t n = a > b ? a : b;
	return n > ((uint64_t)1 << 40) ? 0 : (size_t)n;
}

GP_HIDDEN void gp_image_classify(const void *ptr, struct gp_image *img)
{
	const uint8_t *p = ptr;
	memset(img, 0, sizeof *img);
	img->ptr = img->data = ptr;
	if (p == NULL)
		return;
	uint32_t m = gp_rd32(p);
	if (m == GP_FATBIN_WRAPPER_MAGIC) {
		const uint8_t *d;
		memcpy(&d, p + 8, sizeof d);
		img->kind = GP_IMG_FATBIN_WRAPPER;
		img->data = d;
		if (d != NULL && gp_rd32(d) == GP_FATBIN_CONTAINER_MAGIC)
			img->size = gp_fatbin_size(d);
	} else if (m == GP_FATBIN_CONTAINER_MAGIC) {
		img->kind = GP_IMG_FATBIN;
		img->size = gp_fatbin_size(p);
	} else if (memcmp(p, "\177ELF", 4) == 0) {
		img->kind = GP_IMG_ELF;
		img->size = gp_elf_size(p);
	} else {
		/* PTX: text that starts with a comment or a directive. */
		size_t i = 0;
		while (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r')
			i++;
		if (p[i] == '/' || p[i] == '.') {
			img->kind = GP_IMG_PTX;
			img->size = strlen((const char *)p);
		}
	}
}

GP_HIDDEN const char *gp_image_kind_name(int kind)
{
	switch (kind) {
	case GP_IMG_FATBIN_WRAPPER:
		return "fatbin-wrapper";
	case GP_IMG_FATBIN:
		return "fatbin";
	case GP_IMG_ELF:
		return "elf";
	case GP_IMG_PTX:
		return "ptx";
	case GP_IMG_FILE:
		return "file";
	}
	return "unknown";
}

/* Loaded modules and libraries: handle -> image, for the trace and for the
 * later patching step (which must map device globals per module). */
struct gp_module {
	uint64_t handle; /* atomic */
	const void *image;
	size_t size;
	int kind;
};
#define GP_MODULES 4096
static struct gp_module gp_modules[GP_MODULES];

GP_HIDDEN void gp_calibrate(void);

GP_HIDDEN void gp_module_loaded(const char *api, uint64_t module, const struct gp_image *img, CUresult r)
{
	GP_COUNT(loads, 1);
	GP_TRACE("%s: %s image %p (%zu bytes%s%s) -> handle %p, result %d", api, gp_image_kind_name(img->kind),
		 img->ptr, img->size, img->path ? ", path " : "", img->path ? img->path : "", (void *)module, r);
	if (r != CUDA_SUCCESS || module == 0)
		return;
	uint32_t h = (uint32_t)((module * 0x9E3779B97F4A7C15ull) >> 52);
	for (uint32_t i = 0; i < 64; i++) {
		struct gp_module *m = &gp_modules[(h + i) % GP_MODULES];
		uint64_t k = 0;
		if (__atomic_load_n(&m->handle, __ATOMIC_ACQUIRE) == module ||
		    __atomic_compare_exchange_n(&m->handle, &k, module, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			m->image = img->ptr;
			m->size = img->size;
			m->kind = img->kind;
			/* Patched kernels write %globaltimer: give the collector
			 * a clock reading for this context (calib.c). */
			if (gp_patch_enabled)
				gp_calibrate();
			return;
		}
	}
}
