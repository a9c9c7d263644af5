// The few CUDA driver, NVRTC, cuBLASLt and NCCL entry points amspc uses,
// declared here (CUDA's headers are not needed to build amspc) and
// resolved with dlopen/dlsym at run time.
#ifndef AMSP_CUDALIB_H
#define AMSP_CUDALIB_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;       // CUDA_SUCCESS is 0
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef void *CUevent;
typedef void *CUgraph;
typedef void *CUgraphExec;
typedef unsigned long long CUdeviceptr;
typedef int nvrtcResult;    // NVRTC_SUCCESS is 0
typedef void *nvrtcProgram;
typedef int ncclResult_t;   // ncclSuccess is 0
typedef void *ncclComm_t;

// Device attributes (CUdevice_attribute).
enum {
	AMSP_ATTR_SM_COUNT = 16,
	AMSP_ATTR_CC_MAJOR = 75,
	AMSP_ATTR_CC_MINOR = 76,
};

// The libraries, in the order amsp_load opens them.
enum { AMSP_LIB_CUDA, AMSP_LIB_NVRTC, AMSP_LIB_CUBLASLT, AMSP_LIB_NCCL, AMSP_NLIBS };

// amsp_load opens library lib from the candidate paths (NULL-terminated)
// and resolves its symbols. It returns 0, or 1 when no candidate opens
// (err holds dlerror's text of the last try), or 2 when a symbol is
// missing (err names it).
int amsp_load(int lib, const char **paths, char *err, size_t errlen, const char **opened);

// Driver API.
CUresult amsp_cuInit(unsigned flags);
CUresult amsp_cuDriverGetVersion(int *v);
CUresult amsp_cuDeviceGetCount(int *n);
CUresult amsp_cuDeviceGet(CUdevice *d, int ordinal);
CUresult amsp_cuDeviceGetName(char *name, int len, CUdevice d);
CUresult amsp_cuDeviceGetAttribute(int *v, int attr, CUdevice d);
CUresult amsp_cuDeviceTotalMem(size_t *bytes, CUdevice d);
CUresult amsp_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d);
CUresult amsp_cuCtxSetCurrent(CUcontext c);
CUresult amsp_cuCtxSynchronize(void);
CUresult amsp_cuMemAlloc(CUdeviceptr *p, size_t bytes);
CUresult amsp_cuMemFree(CUdeviceptr p);
CUresult amsp_cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t bytes);
CUresult amsp_cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t bytes);
CUresult amsp_cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
CUresult amsp_cuMemsetD8(CUdeviceptr dst, unsigned char v, size_t n);
CUresult amsp_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s);
CUresult amsp_cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s);
CUresult amsp_cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t bytes, CUstream s);
CUresult amsp_cuMemAllocHost(void **p, size_t bytes);
CUresult amsp_cuMemFreeHost(void *p);
CUresult amsp_cuModuleLoadData(CUmodule *m, const void *image);
CUresult amsp_cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name);
CUresult amsp_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
	unsigned shmem, CUstream s, void **params);
CUresult amsp_cuStreamCreate(CUstream *s, unsigned flags);
CUresult amsp_cuStreamSynchronize(CUstream s);
CUresult amsp_cuStreamDestroy(CUstream s);
CUresult amsp_cuEventCreate(CUevent *e, unsigned flags);
CUresult amsp_cuEventRecord(CUevent e, CUstream s);
CUresult amsp_cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags);
CUresult amsp_cuEventSynchronize(CUevent e);
CUresult amsp_cuEventDestroy(CUevent e);
CUresult amsp_cuEventElapsedTime(float *ms, CUevent start, CUevent end);
// Graphs: stream capture (mode: CU_STREAM_CAPTURE_MODE_*), instantiation
// (cuGraphInstantiateWithFlags), launch.
CUresult amsp_cuStreamBeginCapture(CUstream s, int mode);
CUresult amsp_cuStreamEndCapture(CUstream s, CUgraph *g);
CUresult amsp_cuGraphInstantiate(CUgraphExec *e, CUgraph g, unsigned long long flags);
CUresult amsp_cuGraphLaunch(CUgraphExec e, CUstream s);
CUresult amsp_cuGraphExecDestroy(CUgraphExec e);
CUresult amsp_cuGraphDestroy(CUgraph g);
const char *amsp_cuErrorString(CUresult r);

// NVRTC.
nvrtcResult amsp_nvrtcVersion(int *major, int *minor);
nvrtcResult amsp_nvrtcCreateProgram(nvrtcProgram *p, const char *src, const char *name);
nvrtcResult amsp_nvrtcCompileProgram(nvrtcProgram p, int nopts, const char **opts);
nvrtcResult amsp_nvrtcGetProgramLogSize(nvrtcProgram p, size_t *n);
nvrtcResult amsp_nvrtcGetProgramLog(nvrtcProgram p, char *log);
nvrtcResult amsp_nvrtcGetCUBINSize(nvrtcProgram p, size_t *n);
nvrtcResult amsp_nvrtcGetCUBIN(nvrtcProgram p, char *cubin);
nvrtcResult amsp_nvrtcDestroyProgram(nvrtcProgram *p);
const char *amsp_nvrtcErrorString(nvrtcResult r);

// cuBLASLt: D = op(A) op(B) in column-major order, fp32 accumulation
// (CUBLAS_COMPUTE_32F), inputs of dtype (CUDA_R_32F 0, CUDA_R_16BF 14),
// output of ctype; a plan per product shape, run on stream s with a
// workspace no product on another stream uses at the same time. Returns
// a cublasStatus_t, or -1 when the heuristic offers no algorithm.
size_t amsp_cublasLtGetVersion(void);
int amsp_cublasLtCreate(void **handle);
// A product's cuBLASLt descriptors and the heuristic's algorithm for it.
struct amsp_lt_plan {
	void *desc, *la, *lb, *lc;
	uint64_t algo[8];
};
int amsp_lt_plan(void *handle, int transa, int transb, uint64_t m, uint64_t n, uint64_t k, int64_t lda, int64_t ldb,
	int64_t ldc, int dtype, int ctype, size_t wssize, struct amsp_lt_plan *p);
int amsp_lt_run(void *handle, const struct amsp_lt_plan *p, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, float beta,
	CUdeviceptr ws, size_t wssize, CUstream s);
void amsp_lt_plan_free(struct amsp_lt_plan *p);
const char *amsp_cublasLtStatusString(int s);

// NCCL. Only ncclGetVersion must be there for amsp_load to succeed; the
// rest (NCCL 2.18 and later: ncclCommSplit is the newest) are looked up
// but may be missing, which amsp_nccl_missing names. Each wrapper of a
// missing one returns AMSP_NCCL_NOSYM instead of calling it. Enum
// arguments (ncclDataType_t, ncclRedOp_t) are ints, as their C enums are.
enum { AMSP_NCCL_NOSYM = 1000 };
const char *amsp_nccl_missing(void);
ncclResult_t amsp_ncclGetVersion(int *v);
const char *amsp_ncclGetErrorString(ncclResult_t r);
const char *amsp_ncclGetLastError(void);
ncclResult_t amsp_ncclGetUniqueId(void *id); // NCCL_UNIQUE_ID_BYTES (128) bytes
ncclResult_t amsp_ncclCommInitRank(ncclComm_t *comm, int nranks, const void *id, int rank);
ncclResult_t amsp_ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm); // NULL config: the parent's
ncclResult_t amsp_ncclCommCount(ncclComm_t comm, int *n);
ncclResult_t amsp_ncclCommUserRank(ncclComm_t comm, int *rank);
ncclResult_t amsp_ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err);
ncclResult_t amsp_ncclCommAbort(ncclComm_t comm);
ncclResult_t amsp_ncclCommDestroy(ncclComm_t comm);
ncclResult_t amsp_ncclGroupStart(void);
ncclResult_t amsp_ncclGroupEnd(void);
ncclResult_t amsp_ncclAllGather(CUdeviceptr send, CUdeviceptr recv, size_t sendcount, int dtype, ncclComm_t comm, CUstream s);
ncclResult_t amsp_ncclReduceScatter(CUdeviceptr send, CUdeviceptr recv, size_t recvcount, int dtype, int op, ncclComm_t comm,
	CUstream s);
ncclResult_t amsp_ncclAllReduce(CUdeviceptr send, CUdeviceptr recv, size_t count, int dtype, int op, ncclComm_t comm, CUstream s);
ncclResult_t amsp_ncclBroadcast(CUdeviceptr send, CUdeviceptr recv, size_t count, int dtype, int root, ncclComm_t comm,
	CUstream s);

#endif
