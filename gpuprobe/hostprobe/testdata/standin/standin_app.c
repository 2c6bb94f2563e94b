/* STAND-IN application for tests of gpuprobe/hostprobe: calls every CUDA
 * runtime and driver entry point that the host probes know, through the
 * stand-in libcudart/libcuda, with distinctive arguments (the expected
 * values are in the Go test's table, hostprobe_test.go). No GPU work.
 *
 *   standin_app all         call everything once; print "pid=P thread_tid=T"
 *   standin_app loop N      N calls of cuCtxSynchronize; print "ns_per_call=X"
 *   standin_app loop N launch
 *                           N calls of cudaLaunchKernel (each calls
 *                           cuLaunchKernel, as the real runtime does)
 *   standin_app wait [...]  print "ready", wait for a line on stdin, then
 *                           as the rest of the arguments (default: all)
 *
 * cuStreamSynchronize_ptsz is called from a second thread, whose tid is the
 * thread_tid printed. */
#define _GNU_SOURCE
#include "standin_cuda.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#define P(v) ((void *)(uintptr_t)(v))

static void *kargs[2];
static pid_t thread_tid;

static void *sync_thread(void *arg)
{
	(void)arg;
	thread_tid = (pid_t)syscall(SYS_gettid);
	cuStreamSynchronize_ptsz((CUstream)P(0xac15));
	return NULL;
}

static int all(void)
{
	dim3 g = {7, 3, 2}, b = {64, 6, 5};
	void *vp;
	CUdeviceptr dp;
	CUfunction fn;
	CUkernel kern;
	pthread_t th;
	char longname[301];

	/* Launches (the runtime's launch the driver's in turn). */
	cudaLaunchKernel(P(0x1001000), g, b, kargs, 1234, (cudaStream_t)P(0xabc0));
	cudaLaunchKernel_ptsz(P(0x1002000), g, b, kargs, 1235, (cudaStream_t)P(0xabc1));
	cudaLaunchConfig_t rc = {g, b, 1236, (cudaStream_t)P(0xabc2), NULL, 0};
	cudaLaunchKernelExC(&rc, P(0x1003000), kargs);
	rc.dynamicSmemBytes = 1237;
	rc.stream = (cudaStream_t)P(0xabc3);
	cudaLaunchKernelExC_ptsz(&rc, P(0x1004000), kargs);
	cudaLaunchCooperativeKernel(P(0x1009000), g, b, kargs, 1238, (cudaStream_t)P(0xabc9));
	cuLaunchKernel((CUfunction)P(0x2005000), 7, 3, 2, 64, 6, 5, 1239, (CUstream)P(0xabc5), kargs, NULL);
	cuLaunchKernel_ptsz((CUfunction)P(0x2006000), 7, 3, 2, 64, 6, 5, 1240, (CUstream)P(0xabc6), kargs, NULL);
	CUlaunchConfig dc = {7, 3, 2, 64, 6, 5, 1241, (CUstream)P(0xabc7), NULL, 0};
	cuLaunchKernelEx(&dc, (CUfunction)P(0x2007000), kargs, NULL);
	dc.sharedMemBytes = 1242;
	dc.hStream = (CUstream)P(0xabc8);
	cuLaunchKernelEx_ptsz(&dc, (CUfunction)P(0x2008000), kargs, NULL);
	cuLaunchCooperativeKernel((CUfunction)P(0x200a000), 7, 3, 2, 64, 6, 5, 1243, (CUstream)P(0xabca), kargs);

	/* Copies. */
	cudaMemcpy(P(0xd020), P(0x5020), 4097, cudaMemcpyHostToDevice);
	cudaMemcpy_ptds(P(0xd021), P(0x5021), 4098, cudaMemcpyHostToHost);
	cudaMemcpyAsync(P(0xd022), P(0x5022), 4099, cudaMemcpyDeviceToHost, (cudaStream_t)P(0xabd2));
	cudaMemcpyAsync_ptsz(P(0xd023), P(0x5023), 4100, cudaMemcpyDefault, (cudaStream_t)P(0xabd3));
	cuMemcpyHtoD_v2(0xd024, P(0x5024), 4101);
	cuMemcpyDtoH_v2(P(0xd025), 0x5025, 4102);
	cuMemcpyDtoD_v2(0xd026, 0x5026, 4103);
	cuMemcpyHtoDAsync_v2(0xd027, P(0x5027), 4104, (CUstream)P(0xabd7));
	cuMemcpyDtoHAsync_v2(P(0xd028), 0x5028, 4105, (CUstream)P(0xabd8));
	cuMemcpyDtoDAsync_v2(0xd029, 0x5029, 4106, (CUstream)P(0xabd9));
	cuMemcpy(0xd030, 0x5030, 4107);
	cuMemcpyAsync(0xd031, 0x5031, 4108, (CUstream)P(0xabe1));

	/* Allocations. */
	cudaMalloc(&vp, 5001);
	cuMemAlloc_v2(&dp, 5002);
	cudaMallocAsync(&vp, 5003, (cudaStream_t)P(0xabf2));
	cuMemAllocAsync(&dp, 5004, (CUstream)P(0xabf3));
	cudaMallocHost(&vp, 5005);
	cuMemAllocHost_v2(&vp, 5006);
	cudaMallocManaged(&vp, 5007, 1);
	cuMemAllocManaged(&dp, 5008, 1);

	/* Frees. */
	cudaFree(P(0xf050));
	cuMemFree_v2(0xf051);
	cudaFreeAsync(P(0xf052), (cudaStream_t)P(0xac02));
	cuMemFreeAsync(0xf053, (CUstream)P(0xac03));
	cudaFreeHost(P(0xf054));
	cuMemFreeHost(P(0xf055));

	/* Synchronisation. */
	cudaStreamSynchronize((cudaStream_t)P(0xac10));
	cudaStreamSynchronize_ptsz((cudaStream_t)P(0xac11));
	cudaDeviceSynchronize();
	cudaEventSynchronize((cudaEvent_t)P(0xac13));
	cuStreamSynchronize((CUstream)P(0xac14));
	if (pthread_create(&th, NULL, sync_thread, NULL) != 0 || pthread_join(th, NULL) != 0) {
		perror("pthread");
		return 1;
	}
	cuCtxSynchronize();
	cuEventSynchronize((CUevent)P(0xac17));

	/* Graph launches. */
	cudaGraphLaunch((cudaGraphExec_t)P(0x6a70), (cudaStream_t)P(0xac20));
	cudaGraphLaunch_ptsz((cudaGraphExec_t)P(0x6a71), (cudaStream_t)P(0xac21));
	cuGraphLaunch((CUgraphExec)P(0x6a72), (CUstream)P(0xac22));
	cuGraphLaunch_ptsz((CUgraphExec)P(0x6a73), (CUstream)P(0xac23));

	/* Stream captures (the modes and graphs are only recorded). */
	cudaGraph_t graph;
	cudaStreamBeginCapture((cudaStream_t)P(0xca80), 1);
	cudaStreamBeginCapture_ptsz((cudaStream_t)P(0xca81), 2);
	cudaStreamBeginCaptureToGraph((cudaStream_t)P(0xca82), (cudaGraph_t)P(0x6b82), NULL, NULL, 0, 0);
	cudaStreamBeginCaptureToGraph_ptsz((cudaStream_t)P(0xca83), (cudaGraph_t)P(0x6b83), NULL, NULL, 0, 1);
	cudaStreamEndCapture((cudaStream_t)P(0xca84), &graph);
	cudaStreamEndCapture_ptsz((cudaStream_t)P(0xca85), &graph);
	cuStreamBeginCapture((CUstream)P(0xca86));
	cuStreamBeginCapture_ptsz((CUstream)P(0xca87));
	cuStreamBeginCapture_v2((CUstream)P(0xca88), 2);
	cuStreamBeginCapture_v2_ptsz((CUstream)P(0xca89), 0);
	cuStreamBeginCaptureToGraph((CUstream)P(0xca90), (CUgraph)P(0x6b90), NULL, NULL, 0, 1);
	cuStreamBeginCaptureToGraph_ptsz((CUstream)P(0xca91), (CUgraph)P(0x6b91), NULL, NULL, 0, 2);
	cuStreamEndCapture((CUstream)P(0xca92), (CUgraph *)&graph);
	cuStreamEndCapture_ptsz((CUstream)P(0xca93), (CUgraph *)&graph);

	/* Events recorded, and streams made to wait for them. */
	cudaEventRecord((cudaEvent_t)P(0xe100), (cudaStream_t)P(0x5100));
	cudaEventRecord_ptsz((cudaEvent_t)P(0xe101), (cudaStream_t)P(0x5101));
	cudaEventRecordWithFlags((cudaEvent_t)P(0xe102), (cudaStream_t)P(0x5102), 1);
	cudaEventRecordWithFlags_ptsz((cudaEvent_t)P(0xe103), (cudaStream_t)P(0x5103), 0);
	cuEventRecord((CUevent)P(0xe104), (CUstream)P(0x5104));
	cuEventRecord_ptsz((CUevent)P(0xe105), (CUstream)P(0x5105));
	cuEventRecordWithFlags((CUevent)P(0xe106), (CUstream)P(0x5106), 1);
	cuEventRecordWithFlags_ptsz((CUevent)P(0xe107), (CUstream)P(0x5107), 1);
	cudaStreamWaitEvent((cudaStream_t)P(0x5108), (cudaEvent_t)P(0xe108), 0);
	cudaStreamWaitEvent_ptsz((cudaStream_t)P(0x5109), (cudaEvent_t)P(0xe109), 1);
	cuStreamWaitEvent((CUstream)P(0x5110), (CUevent)P(0xe110), 0);
	cuStreamWaitEvent_ptsz((CUstream)P(0x5111), (CUevent)P(0xe111), 1);

	/* Streams created (the probes read the handle through the out-pointer;
	 * CUDA's priorities are 0 or negative) and destroyed by those handles. */
	cudaStream_t rs[3];
	CUstream ds[2];
	cudaStreamCreate(&rs[0]);
	cudaStreamCreateWithFlags(&rs[1], 1); /* cudaStreamNonBlocking */
	cudaStreamCreateWithPriority(&rs[2], 1, -3);
	cuStreamCreate(&ds[0], 1); /* CU_STREAM_NON_BLOCKING */
	cuStreamCreateWithPriority(&ds[1], 1, -5);
	cudaStreamDestroy(rs[0]);
	cuStreamDestroy(ds[0]);
	cuStreamDestroy_v2(ds[1]);

	/* Kernel names: one short, one longer than the probe's 240-byte cap,
	 * one that fails (no record). */
	cuModuleGetFunction(&fn, (CUmodule)P(0x30d0), "_Z6vecAddPfS_S_i");
	memset(longname, 'x', sizeof(longname) - 1);
	memcpy(longname, "_Z4long", 7);
	longname[sizeof(longname) - 1] = 0;
	cuLibraryGetKernel(&kern, (CUlibrary)P(0x30d1), longname);
	cuModuleGetFunction(&fn, (CUmodule)P(0x30d2), "missing");

	printf("pid=%d thread_tid=%d\n", (int)getpid(), (int)thread_tid);
	return 0;
}

static int loop(long n, int launches)
{
	struct timespec a, b;
	dim3 g = {1, 1, 1}, bl = {32, 1, 1};
	clock_gettime(CLOCK_MONOTONIC, &a);
	if (launches)
		for (long i = 0; i < n; i++)
			cudaLaunchKernel(P(0x1001000), g, bl, kargs, 0, NULL);
	else
		for (long i = 0; i < n; i++)
			cuCtxSynchronize();
	clock_gettime(CLOCK_MONOTONIC, &b);
	double ns = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
	printf("ns_per_call=%.3f\n", ns / (double)n);
	return 0;
}

int main(int argc, char **argv)
{
	char line[16];

	if (argc >= 2 && strcmp(argv[1], "wait") == 0) {
		printf("ready\n");
		fflush(stdout);
		if (!fgets(line, sizeof(line), stdin))
			return 2;
		argc--;
		argv++;
		if (argc == 1)
			return all();
	}
	if (argc == 2 && strcmp(argv[1], "all") == 0)
		return all();
	if ((argc == 3 || (argc == 4 && strcmp(argv[3], "launch") == 0)) && strcmp(argv[1], "loop") == 0) {
		long n = strtol(argv[2], NULL, 10);
		if (n < 1) {
			fprintf(stderr, "standin_app: loop count %s must be ≥ 1\n", argv[2]);
			return 2;
		}
		return loop(n, argc == 4);
	}
	fprintf(stderr, "usage: standin_app [wait] all | [wait] loop N [launch]\n");
	return 2;
}
