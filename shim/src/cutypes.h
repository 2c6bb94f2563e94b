/*
 * cutypes.h - the few CUDA driver API types the shim needs, declared here so
 * that libgpuprobe.so builds without any CUDA header or library. They match
 * cuda.h (CUDA 11.8 and 12.x/13.x) in size and layout: handles are opaque
 * pointers, CUresult is an int-sized enum, CUlaunchConfig is the CUDA 12
 * struct, CUDA_KERNEL_NODE_PARAMS the v1 struct (v2 extends it).
 */
#ifndef GPUPROBE_SHIM_CUTYPES_H
#define GPUPROBE_SHIM_CUTYPES_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef int CUjit_option;
typedef int CUjitInputType;
typedef int CUlibraryOption;
typedef uint64_t cuuint64_t;
typedef uint64_t CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUlib_st *CUlibrary;
typedef struct CUkern_st *CUkernel;
typedef struct CUstream_st *CUstream;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUlinkState_st *CUlinkState;
typedef int CUdriverProcAddressQueryResult;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND 302
#define CUDA_ERROR_NOT_FOUND 500

#define CU_GET_PROC_ADDRESS_LEGACY_STREAM 1
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2

/* CU_STREAM_PER_THREAD: the handle of the per-thread default stream. */
#define GP_CU_STREAM_PER_THREAD ((uint64_t)0x2)

/* CUgraphNodeType: a kernel node, a child graph node. */
#define GP_CU_GRAPH_NODE_TYPE_KERNEL 0
#define GP_CU_GRAPH_NODE_TYPE_GRAPH 4

/* CUlaunchConfig (CUDA 12.0+). */
typedef struct {
	unsigned int gridDimX, gridDimY, gridDimZ;
	unsigned int blockDimX, blockDimY, blockDimZ;
	unsigned int sharedMemBytes;
	CUstream hStream;
	void *attrs;
	unsigned int numAttrs;
} CUlaunchConfig;

/* CUlaunchAttribute (CUDA 12.0+): a u32 id padded to 8 bytes, then a
 * 64-byte value union; the ids the shim tells apart (checked against
 * cuda.h on the GPU machine: scripts/gpu/kinds.sh, "abi"). */
#define GP_CU_LAUNCH_ATTR_SIZE 72
#define GP_CU_LAUNCH_ATTRIBUTE_COOPERATIVE 2
#define GP_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION 4

/* CUDA_KERNEL_NODE_PARAMS_v2 (CUDA 12.0+): v1's fields, then kern and ctx. */
typedef struct {
	CUfunction func;
	unsigned int gridDimX, gridDimY, gridDimZ;
	unsigned int blockDimX, blockDimY, blockDimZ;
	unsigned int sharedMemBytes;
	void **kernelParams;
	void **extra;
	CUkernel kern;
	CUcontext ctx;
} GPkernelNodeParams;

/* CUgraphNodeParams (CUDA 12.2+, cuGraphAddNode and friends): the node
 * type, then a 232-byte union whose kernel member is
 * CUDA_KERNEL_NODE_PARAMS_v3 (the v2 layout), then 8 reserved bytes. */
typedef struct {
	int type;
	int reserved0[3];
	union {
		long long reserved1[29];
		GPkernelNodeParams kernel;
	} u;
	long long reserved2;
} GPgraphNodeParams;

/* CUgraphEdgeData (CUDA 12.3+): 8 bytes, passed through untouched. */
typedef struct {
	unsigned char from_port, to_port, type, reserved[5];
} GPgraphEdgeData;

/* __fatBinC_Wrapper_t: what nvcc's host stub registers. */
#define GP_FATBIN_WRAPPER_MAGIC 0x466243B1u
#define GP_FATBIN_CONTAINER_MAGIC 0xBA55ED50u

#endif /* GPUPROBE_SHIM_CUTYPES_H */
