/*
 * image.c - what a module/library load hands the driver, and the patching
 * hook.
 *
 * Code images come as a fatbin wrapper (__fatBinC_Wrapper_t, magic
 * 0x466243B1, pointing at a fatbin), a fatbin container (magic 0xBA55ED50),
 * an ELF cubin, or NUL-terminated PTX text; cuModuleLoad and
 * cuLibraryLoadFromFile take a path instead: when the session may patch,
 * gp_image_read_file reads the file (bounded by GP_IMAGE_MAX) so that it is
 * classified like an in-memory image. The shim only classifies and sizes
 * images (the parsing is the collector's, in Go).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* Zero bytes after a file's contents: the classifier reads fixed headers
 * (16 bytes of a fatbin, 64 of an ELF) and PTX up to its NUL, so a short
 * file is classified without reading past its copy. */
#define GP_FILE_PAD 64

GP_HIDDEN void *gp_image_read_file(const char *path, struct gp_image *img, const char **why, int *err)
{
	struct stat st;
	uint8_t *buf = NULL;
	int fd = -1;
	memset(img, 0, sizeof *img);
	img->kind = GP_IMG_FILE, img->path = path;
	*err = 0;
	if (path == NULL)
		return *why = "no path", NULL;
	do
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	while (fd < 0 && errno == EINTR);
	if (fd < 0)
		return *why = "open", *err = -errno, NULL;
	if (fstat(fd, &st) != 0) {
		*why = "fstat", *err = -errno;
		goto fail;
	}
	/* A FIFO or device would block or never end: regular files only. */
	if (!S_ISREG(st.st_mode) || st.st_size <= 0) {
		*why = "not a regular file, or empty", *err = -EINVAL;
		goto fail;
	}
	if ((uint64_t)st.st_size > GP_IMAGE_MAX) {
		*why = "larger than GP_IMAGE_MAX", *err = -EFBIG;
		goto fail;
	}
	size_t n = (size_t)st.st_size, got = 0;
	if ((buf = calloc(1, n + GP_FILE_PAD)) == NULL) {
		*why = "malloc", *err = -ENOMEM;
		goto fail;
	}
	/* Read one byte more than stat said: a file that grew meanwhile is
	 * not what the size was checked for (the pad has room for it). */
	while (got < n + 1) {
		ssize_t r = read(fd, buf + got, n + 1 - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			*why = "read", *err = -errno;
			goto fail;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	if (got != n) {
		*why = "the file changed size while being read", *err = -EAGAIN;
		goto fail;
	}
	buf[n] = 0;
	close(fd);
	/* A fatbin wrapper holds a pointer into its process: meaningless in a
	 * file, and never followed. */
	if (n >= 4 && gp_rd32(buf) == GP_FATBIN_WRAPPER_MAGIC) {
		img->ptr = img->data = buf;
		img->kind = GP_IMG_UNKNOWN;
	} else {
		gp_image_classify(buf, img);
	}
	img->path = path;
	if (img->size > n) /* a header that claims more than the file holds */
		img->size = 0;
	return buf;
fail:
	free(buf);
	close(fd);
	return NULL;
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
	gp_patch_loaded(module, r);
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
