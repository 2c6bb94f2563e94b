// ptxload.cu - gpuprobe end-to-end sample 5: kernels loaded at run time from
// PTX text through the driver API, the way NVRTC and Triton do it
// (scripts/gpu/samples.sh). Build with -lcuda.
//
//   ptxload [ITERS]   (default 4)
//
// Two modules from PTX strings embedded in the program: kAffinePTX (.target
// sm_70) through cuModuleLoadData, kGridPTX (.target sm_52, a predicated
// `exit`) through cuModuleLoadDataEx with JIT log options; each kernel is
// looked up with cuModuleGetFunction and launched ITERS times with
// cuLaunchKernel (ptx_affine: 1D, 160-thread blocks; ptx_grid2d: 2D grid,
// 32x3 blocks). The results are checked against a CPU reference after each
// launch. Prints the launches of each kernel and a checksum; the output must
// be identical with and without gpuprobe.
#include <cuda.h>

#include <cstring>
#include <vector>

#include "common.h"

#define CU(x)                                                                                  \
	do {                                                                                   \
		CUresult r_ = (x);                                                             \
		if (r_ != CUDA_SUCCESS) {                                                      \
			const char *s_ = "?";                                                  \
			cuGetErrorName(r_, &s_);                                               \
			fprintf(stderr, "%s:%d: %s: %s (%d)\n", __FILE__, __LINE__, #x, s_, (int)r_); \
			exit(1);                                                               \
		}                                                                              \
	} while (0)

// out[i] = in[i] * mul + add (u32), i < n.
static const char kAffinePTX[] = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry ptx_affine(
	.param .u64 p_in,
	.param .u64 p_out,
	.param .u32 p_n,
	.param .u32 p_mul,
	.param .u32 p_add
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<10>;
	.reg .b64 %rd<8>;

	ld.param.u64 %rd1, [p_in];
	ld.param.u64 %rd2, [p_out];
	ld.param.u32 %r1, [p_n];
	ld.param.u32 %r2, [p_mul];
	ld.param.u32 %r3, [p_add];
	mov.u32 %r4, %ctaid.x;
	mov.u32 %r5, %ntid.x;
	mov.u32 %r6, %tid.x;
	mad.lo.s32 %r7, %r4, %r5, %r6;
	setp.ge.u32 %p1, %r7, %r1;
	@%p1 bra $L_done;
	cvta.to.global.u64 %rd3, %rd1;
	cvta.to.global.u64 %rd4, %rd2;
	mul.wide.u32 %rd5, %r7, 4;
	add.s64 %rd6, %rd3, %rd5;
	ld.global.u32 %r8, [%rd6];
	mad.lo.s32 %r9, %r8, %r2, %r3;
	add.s64 %rd7, %rd4, %rd5;
	st.global.u32 [%rd7], %r9;
$L_done:
	ret;
}
)";

// buf[y*w+x] = (buf[y*w+x] ^ salt) * 0x9e3779b1 + (y*w+x), x < w, y < h;
// threads outside leave through a predicated exit.
static const char kGridPTX[] = R"(
.version 6.0
.target sm_52
.address_size 64

.visible .entry ptx_grid2d(
	.param .u64 p_buf,
	.param .u32 p_w,
	.param .u32 p_h,
	.param .u32 p_salt
)
{
	.reg .pred %p<3>;
	.reg .b32 %r<16>;
	.reg .b64 %rd<5>;

	ld.param.u64 %rd1, [p_buf];
	ld.param.u32 %r1, [p_w];
	ld.param.u32 %r2, [p_h];
	ld.param.u32 %r3, [p_salt];
	mov.u32 %r4, %ctaid.x;
	mov.u32 %r5, %ntid.x;
	mov.u32 %r6, %tid.x;
	mad.lo.s32 %r7, %r4, %r5, %r6;
	mov.u32 %r8, %ctaid.y;
	mov.u32 %r9, %ntid.y;
	mov.u32 %r10, %tid.y;
	mad.lo.s32 %r11, %r8, %r9, %r10;
	setp.ge.u32 %p1, %r7, %r1;
	setp.ge.u32 %p2, %r11, %r2;
	or.pred %p1, %p1, %p2;
	@%p1 exit;
	mad.lo.s32 %r12, %r11, %r1, %r7;
	cvta.to.global.u64 %rd2, %rd1;
	mul.wide.u32 %rd3, %r12, 4;
	add.s64 %rd4, %rd2, %rd3;
	ld.global.u32 %r13, [%rd4];
	xor.b32 %r14, %r13, %r3;
	mad.lo.s32 %r15, %r14, -1640531535, %r12;
	st.global.u32 [%rd4], %r15;
	ret;
}
)";

enum { N = 50001, W = 300, H = 70 };

int main(int argc, char **argv)
{
	long iters = gp_iters(argc, argv, 4);
	CUdevice dev;
	CUcontext ctx;
	CU(cuInit(0));
	CU(cuDeviceGet(&dev, 0));
	CU(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU(cuCtxSetCurrent(ctx));

	CUmodule affineMod, gridMod;
	CU(cuModuleLoadData(&affineMod, kAffinePTX));
	char info[4096] = "", errlog[4096] = "";
	CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
			       CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
	void *vals[] = {info, (void *)(uintptr_t)sizeof info, errlog, (void *)(uintptr_t)sizeof errlog};
	CUresult r = cuModuleLoadDataEx(&gridMod, kGridPTX, 4, opts, vals);
	if (r != CUDA_SUCCESS) {
		fprintf(stderr, "ptxload: cuModuleLoadDataEx: %d: %s\n", (int)r, errlog);
		return 1;
	}
	CUfunction affine, grid;
	CU(cuModuleGetFunction(&affine, affineMod, "ptx_affine"));
	CU(cuModuleGetFunction(&grid, gridMod, "ptx_grid2d"));

	const size_t abytes = N * sizeof(uint32_t), gbytes = W * H * sizeof(uint32_t);
	std::vector<uint32_t> in(N), out(N), ref(N), buf(W * H), gref(W * H);
	for (int i = 0; i < N; i++)
		in[i] = gp_mix((uint32_t)i);
	for (int i = 0; i < W * H; i++)
		gref[i] = gp_mix((uint32_t)i ^ 0xabcdef01U);
	CUdeviceptr d_in, d_out, d_buf;
	CU(cuMemAlloc(&d_in, abytes));
	CU(cuMemAlloc(&d_out, abytes));
	CU(cuMemAlloc(&d_buf, gbytes));
	CU(cuMemcpyHtoD(d_buf, gref.data(), gbytes));

	uint64_t sum = GP_FNV_INIT;
	for (long it = 0; it < iters; it++) {
		unsigned mul = 2654435761U + 2 * (unsigned)it, add = 12345u * (unsigned)it;
		unsigned n = N, w = W, h = H, salt = 0x5bd1e995U ^ (unsigned)it;
		CU(cuMemcpyHtoD(d_in, in.data(), abytes));
		void *aargs[] = {&d_in, &d_out, &n, &mul, &add};
		CU(cuLaunchKernel(affine, (N + 159) / 160, 1, 1, 160, 1, 1, 0, 0, aargs, nullptr));
		void *gargs[] = {&d_buf, &w, &h, &salt};
		CU(cuLaunchKernel(grid, (W + 31) / 32, (H + 2) / 3, 1, 32, 3, 1, 0, 0, gargs, nullptr));
		CU(cuCtxSynchronize());
		CU(cuMemcpyDtoH(out.data(), d_out, abytes));
		CU(cuMemcpyDtoH(buf.data(), d_buf, gbytes));
		for (int i = 0; i < N; i++)
			ref[i] = in[i] * mul + add;
		for (int i = 0; i < W * H; i++)
			gref[i] = (gref[i] ^ salt) * 0x9e3779b1U + (uint32_t)i;
		if (memcmp(ref.data(), out.data(), abytes) != 0 || memcmp(gref.data(), buf.data(), gbytes) != 0) {
			fprintf(stderr, "ptxload: iteration %ld: results differ from the CPU reference\n", it);
			return 1;
		}
		sum = gp_fnv(sum, out.data(), N);
		sum = gp_fnv(sum, buf.data(), W * H);
		in.swap(out);
	}
	printf("ptxload: 2 PTX modules (cuModuleLoadData, cuModuleLoadDataEx) iters=%ld results checked on the CPU\n", iters);
	printf("launches ptx_affine %ld\n", iters);
	printf("launches ptx_grid2d %ld\n", iters);
	printf("checksum %016llx\n", (unsigned long long)sum);
	cuMemFree(d_in), cuMemFree(d_out), cuMemFree(d_buf);
	cuModuleUnload(affineMod), cuModuleUnload(gridMod);
	cuDevicePrimaryCtxRelease(dev);
	return 0;
}
