// Resolution of CUDA's entry points with dlopen/dlsym, and thin wrappers
// Go can call (cgo cannot call through function pointers).
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "dl.h"

static void *handles[AMSP_NLIBS];

static CUresult (*p_cuInit)(unsigned);
static CUresult (*p_cuDriverGetVersion)(int *);
static CUresult (*p_cuDeviceGetCount)(int *);
static CUresult (*p_cuDeviceGet)(CUdevice *, int);
static CUresult (*p_cuDeviceGetName)(char *, int, CUdevice);
static CUresult (*p_cuDeviceGetAttribute)(int *, int, CUdevice);
static CUresult (*p_cuDeviceTotalMem)(size_t *, CUdevice);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*p_cuCtxSetCurrent)(CUcontext);
static CUresult (*p_cuCtxSynchronize)(void);
static CUresult (*p_cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*p_cuMemFree)(CUdeviceptr);
static CUresult (*p_cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
static CUresult (*p_cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
static CUresult (*p_cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
static CUresult (*p_cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
static CUresult (*p_cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
static CUresult (*p_cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
static CUresult (*p_cuMemAllocHost)(void **, size_t);
static CUresult (*p_cuMemFreeHost)(void *);
static CUresult (*p_cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
static CUresult (*p_cuModuleLoadData)(CUmodule *, const void *);
static CUresult (*p_cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
static CUresult (*p_cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
	CUstream, void **, void **);
static CUresult (*p_cuStreamCreate)(CUstream *, unsigned);
static CUresult (*p_cuStreamSynchronize)(CUstream);
static CUresult (*p_cuStreamDestroy)(CUstream);
static CUresult (*p_cuEventCreate)(CUevent *, unsigned);
static CUresult (*p_cuEventRecord)(CUevent, CUstream);
static CUresult (*p_cuStreamWaitEvent)(CUstream, CUevent, unsigned);
static CUresult (*p_cuEventSynchronize)(CUevent);
static CUresult (*p_cuEventDestroy)(CUevent);
static CUresult (*p_cuEventElapsedTime)(float *, CUevent, CUevent);
static CUresult (*p_cuStreamBeginCapture)(CUstream, int);
static CUresult (*p_cuStreamEndCapture)(CUstream, CUgraph *);
static CUresult (*p_cuGraphInstantiate)(CUgraphExec *, CUgraph, unsigned long long);
static CUresult (*p_cuGraphLaunch)(CUgraphExec, CUstream);
static CUresult (*p_cuGraphExecDestroy)(CUgraphExec);
static CUresult (*p_cuGraphDestroy)(CUgraph);
static CUresult (*p_cuGetErrorString)(CUresult, const char **);

static nvrtcResult (*p_nvrtcVersion)(int *, int *);
static nvrtcResult (*p_nvrtcCreateProgram)(nvrtcProgram *, const char *, const char *, int, const char *const *,
	const char *const *);
static nvrtcResult (*p_nvrtcCompileProgram)(nvrtcProgram, int, const char *const *);
static nvrtcResult (*p_nvrtcGetProgramLogSize)(nvrtcProgram, size_t *);
static nvrtcResult (*p_nvrtcGetProgramLog)(nvrtcProgram, char *);
static nvrtcResult (*p_nvrtcGetCUBINSize)(nvrtcProgram, size_t *);
static nvrtcResult (*p_nvrtcGetCUBIN)(nvrtcProgram, char *);
static nvrtcResult (*p_nvrtcDestroyProgram)(nvrtcProgram *);
static const char *(*p_nvrtcGetErrorString)(nvrtcResult);

static size_t (*p_cublasLtGetVersion)(void);
static int (*p_cublasLtCreate)(void **);
static int (*p_cublasLtMatmulDescCreate)(void **, int, int);
static int (*p_cublasLtMatmulDescDestroy)(void *);
static int (*p_cublasLtMatmulDescSetAttribute)(void *, int, const void *, size_t);
static int (*p_cublasLtMatrixLayoutCreate)(void **, int, uint64_t, uint64_t, int64_t);
static int (*p_cublasLtMatrixLayoutDestroy)(void *);
static int (*p_cublasLtMatmulPreferenceCreate)(void **);
static int (*p_cublasLtMatmulPreferenceDestroy)(void *);
static int (*p_cublasLtMatmulPreferenceSetAttribute)(void *, int, const void *, size_t);
// cublasLtMatmulHeuristicResult_t: the algorithm (8 words), its
// workspace, a status, waves, reserved.
struct amsp_heuristic {
	uint64_t algo[8];
	size_t workspace;
	int state;
	float waves;
	int reserved[4];
};
static int (*p_cublasLtMatmulAlgoGetHeuristic)(void *, void *, void *, void *, void *, void *, void *, int,
	struct amsp_heuristic *, int *);
static int (*p_cublasLtMatmul)(void *, void *, const void *, const void *, void *, const void *, void *, const void *,
	const void *, void *, void *, void *, const void *, void *, size_t, CUstream);
static const char *(*p_cublasLtGetStatusString)(int);
static ncclResult_t (*p_ncclGetVersion)(int *);
// ncclUniqueId is a struct of NCCL_UNIQUE_ID_BYTES chars, passed by value.
typedef struct {
	char internal[128];
} amsp_ncclUniqueId;
static const char *(*p_ncclGetErrorString)(ncclResult_t);
static const char *(*p_ncclGetLastError)(ncclComm_t);
static ncclResult_t (*p_ncclGetUniqueId)(amsp_ncclUniqueId *);
static ncclResult_t (*p_ncclCommInitRank)(ncclComm_t *, int, amsp_ncclUniqueId, int);
static ncclResult_t (*p_ncclCommSplit)(ncclComm_t, int, int, ncclComm_t *, void *);
static ncclResult_t (*p_ncclCommCount)(ncclComm_t, int *);
static ncclResult_t (*p_ncclCommUserRank)(ncclComm_t, int *);
static ncclResult_t (*p_ncclCommGetAsyncError)(ncclComm_t, ncclResult_t *);
static ncclResult_t (*p_ncclCommAbort)(ncclComm_t);
static ncclResult_t (*p_ncclCommDestroy)(ncclComm_t);
static ncclResult_t (*p_ncclGroupStart)(void);
static ncclResult_t (*p_ncclGroupEnd)(void);
static ncclResult_t (*p_ncclAllGather)(const void *, void *, size_t, int, ncclComm_t, CUstream);
static ncclResult_t (*p_ncclReduceScatter)(const void *, void *, size_t, int, int, ncclComm_t, CUstream);
static ncclResult_t (*p_ncclAllReduce)(const void *, void *, size_t, int, int, ncclComm_t, CUstream);
static ncclResult_t (*p_ncclBroadcast)(const void *, void *, size_t, int, int, ncclComm_t, CUstream);

struct sym {
	int lib;
	const char *name;
	void **slot;
	int optional; // may be missing: its wrapper says so when called
};

// The driver's versioned names (_v2) are the ones its headers map the
// plain names to.
static const struct sym syms[] = {
	{AMSP_LIB_CUDA, "cuInit", (void **)&p_cuInit},
	{AMSP_LIB_CUDA, "cuDriverGetVersion", (void **)&p_cuDriverGetVersion},
	{AMSP_LIB_CUDA, "cuDeviceGetCount", (void **)&p_cuDeviceGetCount},
	{AMSP_LIB_CUDA, "cuDeviceGet", (void **)&p_cuDeviceGet},
	{AMSP_LIB_CUDA, "cuDeviceGetName", (void **)&p_cuDeviceGetName},
	{AMSP_LIB_CUDA, "cuDeviceGetAttribute", (void **)&p_cuDeviceGetAttribute},
	{AMSP_LIB_CUDA, "cuDeviceTotalMem_v2", (void **)&p_cuDeviceTotalMem},
	{AMSP_LIB_CUDA, "cuDevicePrimaryCtxRetain", (void **)&p_cuDevicePrimaryCtxRetain},
	{AMSP_LIB_CUDA, "cuCtxSetCurrent", (void **)&p_cuCtxSetCurrent},
	{AMSP_LIB_CUDA, "cuCtxSynchronize", (void **)&p_cuCtxSynchronize},
	{AMSP_LIB_CUDA, "cuMemAlloc_v2", (void **)&p_cuMemAlloc},
	{AMSP_LIB_CUDA, "cuMemFree_v2", (void **)&p_cuMemFree},
	{AMSP_LIB_CUDA, "cuMemcpyHtoD_v2", (void **)&p_cuMemcpyHtoD},
	{AMSP_LIB_CUDA, "cuMemcpyDtoD_v2", (void **)&p_cuMemcpyDtoD},
	{AMSP_LIB_CUDA, "cuMemsetD8_v2", (void **)&p_cuMemsetD8},
	{AMSP_LIB_CUDA, "cuMemcpyDtoDAsync_v2", (void **)&p_cuMemcpyDtoDAsync},
	{AMSP_LIB_CUDA, "cuMemsetD8Async", (void **)&p_cuMemsetD8Async},
	{AMSP_LIB_CUDA, "cuMemcpyHtoDAsync_v2", (void **)&p_cuMemcpyHtoDAsync},
	{AMSP_LIB_CUDA, "cuMemAllocHost_v2", (void **)&p_cuMemAllocHost},
	{AMSP_LIB_CUDA, "cuMemFreeHost", (void **)&p_cuMemFreeHost},
	{AMSP_LIB_CUDA, "cuMemcpyDtoH_v2", (void **)&p_cuMemcpyDtoH},
	{AMSP_LIB_CUDA, "cuModuleLoadData", (void **)&p_cuModuleLoadData},
	{AMSP_LIB_CUDA, "cuModuleGetFunction", (void **)&p_cuModuleGetFunction},
	{AMSP_LIB_CUDA, "cuLaunchKernel", (void **)&p_cuLaunchKernel},
	{AMSP_LIB_CUDA, "cuStreamCreate", (void **)&p_cuStreamCreate},
	{AMSP_LIB_CUDA, "cuStreamSynchronize", (void **)&p_cuStreamSynchronize},
	{AMSP_LIB_CUDA, "cuStreamDestroy_v2", (void **)&p_cuStreamDestroy},
	{AMSP_LIB_CUDA, "cuEventCreate", (void **)&p_cuEventCreate},
	{AMSP_LIB_CUDA, "cuEventRecord", (void **)&p_cuEventRecord},
	{AMSP_LIB_CUDA, "cuStreamWaitEvent", (void **)&p_cuStreamWaitEvent},
	{AMSP_LIB_CUDA, "cuEventSynchronize", (void **)&p_cuEventSynchronize},
	{AMSP_LIB_CUDA, "cuEventDestroy_v2", (void **)&p_cuEventDestroy},
	{AMSP_LIB_CUDA, "cuEventElapsedTime", (void **)&p_cuEventElapsedTime},
	{AMSP_LIB_CUDA, "cuStreamBeginCapture_v2", (void **)&p_cuStreamBeginCapture},
	{AMSP_LIB_CUDA, "cuStreamEndCapture", (void **)&p_cuStreamEndCapture},
	{AMSP_LIB_CUDA, "cuGraphInstantiateWithFlags", (void **)&p_cuGraphInstantiate},
	{AMSP_LIB_CUDA, "cuGraphLaunch", (void **)&p_cuGraphLaunch},
	{AMSP_LIB_CUDA, "cuGraphExecDestroy", (void **)&p_cuGraphExecDestroy},
	{AMSP_LIB_CUDA, "cuGraphDestroy", (void **)&p_cuGraphDestroy},
	{AMSP_LIB_CUDA, "cuGetErrorString", (void **)&p_cuGetErrorString},
	{AMSP_LIB_NVRTC, "nvrtcVersion", (void **)&p_nvrtcVersion},
	{AMSP_LIB_NVRTC, "nvrtcCreateProgram", (void **)&p_nvrtcCreateProgram},
	{AMSP_LIB_NVRTC, "nvrtcCompileProgram", (void **)&p_nvrtcCompileProgram},
	{AMSP_LIB_NVRTC, "nvrtcGetProgramLogSize", (void **)&p_nvrtcGetProgramLogSize},
	{AMSP_LIB_NVRTC, "nvrtcGetProgramLog", (void **)&p_nvrtcGetProgramLog},
	{AMSP_LIB_NVRTC, "nvrtcGetCUBINSize", (void **)&p_nvrtcGetCUBINSize},
	{AMSP_LIB_NVRTC, "nvrtcGetCUBIN", (void **)&p_nvrtcGetCUBIN},
	{AMSP_LIB_NVRTC, "nvrtcDestroyProgram", (void **)&p_nvrtcDestroyProgram},
	{AMSP_LIB_NVRTC, "nvrtcGetErrorString", (void **)&p_nvrtcGetErrorString},
	{AMSP_LIB_CUBLASLT, "cublasLtGetVersion", (void **)&p_cublasLtGetVersion},
	{AMSP_LIB_CUBLASLT, "cublasLtCreate", (void **)&p_cublasLtCreate},
	{AMSP_LIB_CUBLASLT, "cublasLtMatmulDescCreate", (void **)&p_cublasLtMatmulDescCreate},
	{AMSP_LIB_CUBLASLT, "cublasLtMatmulDescDestroy", (void **)&p_cublasLtMatmulDescDestroy},
	{AMSP_LIB_CUBLASLT, "cublasLtMatmulDescSetAttribute", (void **)&p_cublasLtMatmulDescSetAttribute},
	{AMSP_LIB_CUBLASLT, "cublasLtMatrixLayoutCreate", (void **)&p_cublasLtMatrixLayoutCreate},
	{AMSP_LIB_CUBLASLT, "cublasLtMatrixLayoutDestroy", (void **)&p_cublasLtMatrixLayoutDestroy},
	{AMSP_LIB_CUBLASLT, "cublasLtMatmulPreferenceCreate", (void **)&p_cublasLtMatmulPreferenceCreate},
	{AMSP_LIB_CUBLASLT, "cublasLtMatmulPreferenceDestroy", (void **)&p_cublasLtMatmulPreferenceDestroy},
	{AMSP_LIB_CUBLASLT, "cublasLtMatmulPreferenceSetAttribute", (void **)&p_cublasLtMatmulPreferenceSetAttribute},
	{AMSP_LIB_CUBLASLT, "cublasLtMatmulAlgoGetHeuristic", (void **)&p_cublasLtMatmulAlgoGetHeuristic},
	{AMSP_LIB_CUBLASLT, "cublasLtMatmul", (void **)&p_cublasLtMatmul},
	{AMSP_LIB_CUBLASLT, "cublasLtGetStatusString", (void **)&p_cublasLtGetStatusString},
	{AMSP_LIB_NCCL, "ncclGetVersion", (void **)&p_ncclGetVersion},
	{AMSP_LIB_NCCL, "ncclGetErrorString", (void **)&p_ncclGetErrorString, 1},
	{AMSP_LIB_NCCL, "ncclGetLastError", (void **)&p_ncclGetLastError, 1},
	{AMSP_LIB_NCCL, "ncclGetUniqueId", (void **)&p_ncclGetUniqueId, 1},
	{AMSP_LIB_NCCL, "ncclCommInitRank", (void **)&p_ncclCommInitRank, 1},
	{AMSP_LIB_NCCL, "ncclCommSplit", (void **)&p_ncclCommSplit, 1},
	{AMSP_LIB_NCCL, "ncclCommCount", (void **)&p_ncclCommCount, 1},
	{AMSP_LIB_NCCL, "ncclCommUserRank", (void **)&p_ncclCommUserRank, 1},
	{AMSP_LIB_NCCL, "ncclCommGetAsyncError", (void **)&p_ncclCommGetAsyncError, 1},
	{AMSP_LIB_NCCL, "ncclCommAbort", (void **)&p_ncclCommAbort, 1},
	{AMSP_LIB_NCCL, "ncclCommDestroy", (void **)&p_ncclCommDestroy, 1},
	{AMSP_LIB_NCCL, "ncclGroupStart", (void **)&p_ncclGroupStart, 1},
	{AMSP_LIB_NCCL, "ncclGroupEnd", (void **)&p_ncclGroupEnd, 1},
	{AMSP_LIB_NCCL, "ncclAllGather", (void **)&p_ncclAllGather, 1},
	{AMSP_LIB_NCCL, "ncclReduceScatter", (void **)&p_ncclReduceScatter, 1},
	{AMSP_LIB_NCCL, "ncclAllReduce", (void **)&p_ncclAllReduce, 1},
	{AMSP_LIB_NCCL, "ncclBroadcast", (void **)&p_ncclBroadcast, 1},
};

int amsp_load(int lib, const char **paths, char *err, size_t errlen, const char **opened) {
	err[0] = 0;
	if (handles[lib] == NULL) {
		int bare = 0; // err holds the first bare name's failure
		for (const char **p = paths; *p != NULL; p++) {
			handles[lib] = dlopen(*p, RTLD_NOW | RTLD_LOCAL);
			if (handles[lib] != NULL) {
				*opened = *p;
				break;
			}
			// Report the dynamic loader's own search (a bare name), not
			// the last install directory tried.
			const char *e = dlerror();
			if (err[0] == 0 || (!bare && strchr(*p, '/') == NULL)) {
				snprintf(err, errlen, "%s", e ? e : "dlopen failed");
				bare = strchr(*p, '/') == NULL;
			}
		}
		if (handles[lib] == NULL) {
			return 1;
		}
	}
	for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
		if (syms[i].lib != lib) {
			continue;
		}
		*syms[i].slot = dlsym(handles[lib], syms[i].name);
		if (*syms[i].slot == NULL && !syms[i].optional) {
			snprintf(err, errlen, "%s", syms[i].name);
			return 2;
		}
	}
	return 0;
}

CUresult amsp_cuInit(unsigned flags) { return p_cuInit(flags); }
CUresult amsp_cuDriverGetVersion(int *v) { return p_cuDriverGetVersion(v); }
CUresult amsp_cuDeviceGetCount(int *n) { return p_cuDeviceGetCount(n); }
CUresult amsp_cuDeviceGet(CUdevice *d, int ordinal) { return p_cuDeviceGet(d, ordinal); }
CUresult amsp_cuDeviceGetName(char *name, int len, CUdevice d) { return p_cuDeviceGetName(name, len, d); }
CUresult amsp_cuDeviceGetAttribute(int *v, int attr, CUdevice d) { return p_cuDeviceGetAttribute(v, attr, d); }
CUresult amsp_cuDeviceTotalMem(size_t *bytes, CUdevice d) { return p_cuDeviceTotalMem(bytes, d); }
CUresult amsp_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { return p_cuDevicePrimaryCtxRetain(c, d); }
CUresult amsp_cuCtxSetCurrent(CUcontext c) { return p_cuCtxSetCurrent(c); }
CUresult amsp_cuCtxSynchronize(void) { return p_cuCtxSynchronize(); }
CUresult amsp_cuMemAlloc(CUdeviceptr *p, size_t bytes) { return p_cuMemAlloc(p, bytes); }
CUresult amsp_cuMemFree(CUdeviceptr p) { return p_cuMemFree(p); }
CUresult amsp_cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t bytes) { return p_cuMemcpyHtoD(dst, src, bytes); }
CUresult amsp_cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t bytes) { return p_cuMemcpyDtoD(dst, src, bytes); }
CUresult amsp_cuMemsetD8(CUdeviceptr dst, unsigned char v, size_t n) { return p_cuMemsetD8(dst, v, n); }
CUresult amsp_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s) {
	return p_cuMemcpyDtoDAsync(dst, src, bytes, s);
}
CUresult amsp_cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
	return p_cuMemsetD8Async(dst, v, n, s);
}
CUresult amsp_cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t bytes) { return p_cuMemcpyDtoH(dst, src, bytes); }
CUresult amsp_cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t bytes, CUstream s) {
	return p_cuMemcpyHtoDAsync(dst, src, bytes, s);
}
CUresult amsp_cuMemAllocHost(void **p, size_t bytes) { return p_cuMemAllocHost(p, bytes); }
CUresult amsp_cuMemFreeHost(void *p) { return p_cuMemFreeHost(p); }
CUresult amsp_cuModuleLoadData(CUmodule *m, const void *image) { return p_cuModuleLoadData(m, image); }
CUresult amsp_cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) { return p_cuModuleGetFunction(f, m, name); }
CUresult amsp_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
	unsigned shmem, CUstream s, void **params) {
	return p_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, NULL);
}
CUresult amsp_cuStreamCreate(CUstream *s, unsigned flags) { return p_cuStreamCreate(s, flags); }
CUresult amsp_cuStreamSynchronize(CUstream s) { return p_cuStreamSynchronize(s); }
CUresult amsp_cuStreamDestroy(CUstream s) { return p_cuStreamDestroy(s); }
CUresult amsp_cuEventCreate(CUevent *e, unsigned flags) { return p_cuEventCreate(e, flags); }
CUresult amsp_cuEventRecord(CUevent e, CUstream s) { return p_cuEventRecord(e, s); }
CUresult amsp_cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) { return p_cuStreamWaitEvent(s, e, flags); }
CUresult amsp_cuEventSynchronize(CUevent e) { return p_cuEventSynchronize(e); }
CUresult amsp_cuEventDestroy(CUevent e) { return p_cuEventDestroy(e); }
CUresult amsp_cuEventElapsedTime(float *ms, CUevent start, CUevent end) { return p_cuEventElapsedTime(ms, start, end); }
CUresult amsp_cuStreamBeginCapture(CUstream s, int mode) { return p_cuStreamBeginCapture(s, mode); }
CUresult amsp_cuStreamEndCapture(CUstream s, CUgraph *g) { return p_cuStreamEndCapture(s, g); }
CUresult amsp_cuGraphInstantiate(CUgraphExec *e, CUgraph g, unsigned long long flags) {
	return p_cuGraphInstantiate(e, g, flags);
}
CUresult amsp_cuGraphLaunch(CUgraphExec e, CUstream s) { return p_cuGraphLaunch(e, s); }
CUresult amsp_cuGraphExecDestroy(CUgraphExec e) { return p_cuGraphExecDestroy(e); }
CUresult amsp_cuGraphDestroy(CUgraph g) { return p_cuGraphDestroy(g); }

const char *amsp_cuErrorString(CUresult r) {
	const char *s = NULL;
	if (p_cuGetErrorString == NULL || p_cuGetErrorString(r, &s) != 0 || s == NULL) {
		return "unknown CUDA error";
	}
	return s;
}

nvrtcResult amsp_nvrtcVersion(int *major, int *minor) { return p_nvrtcVersion(major, minor); }
nvrtcResult amsp_nvrtcCreateProgram(nvrtcProgram *p, const char *src, const char *name) {
	return p_nvrtcCreateProgram(p, src, name, 0, NULL, NULL);
}
nvrtcResult amsp_nvrtcCompileProgram(nvrtcProgram p, int nopts, const char **opts) {
	return p_nvrtcCompileProgram(p, nopts, opts);
}
nvrtcResult amsp_nvrtcGetProgramLogSize(nvrtcProgram p, size_t *n) { return p_nvrtcGetProgramLogSize(p, n); }
nvrtcResult amsp_nvrtcGetProgramLog(nvrtcProgram p, char *log) { return p_nvrtcGetProgramLog(p, log); }
nvrtcResult amsp_nvrtcGetCUBINSize(nvrtcProgram p, size_t *n) { return p_nvrtcGetCUBINSize(p, n); }
nvrtcResult amsp_nvrtcGetCUBIN(nvrtcProgram p, char *cubin) { return p_nvrtcGetCUBIN(p, cubin); }
nvrtcResult amsp_nvrtcDestroyProgram(nvrtcProgram *p) { return p_nvrtcDestroyProgram(p); }
const char *amsp_nvrtcErrorString(nvrtcResult r) {
	return p_nvrtcGetErrorString ? p_nvrtcGetErrorString(r) : "unknown NVRTC error";
}

size_t amsp_cublasLtGetVersion(void) { return p_cublasLtGetVersion(); }
int amsp_cublasLtCreate(void **handle) { return p_cublasLtCreate(handle); }
const char *amsp_cublasLtStatusString(int s) {
	return s == -1 ? "no algorithm for this problem" : p_cublasLtGetStatusString(s);
}

// Attribute and enum values of cublasLt.h and library_types.h.
enum {
	LT_COMPUTE_32F = 68,      // CUBLAS_COMPUTE_32F
	LT_R_32F = 0,             // CUDA_R_32F
	LT_DESC_TRANSA = 3,       // CUBLASLT_MATMUL_DESC_TRANSA
	LT_DESC_TRANSB = 4,       // CUBLASLT_MATMUL_DESC_TRANSB
	LT_PREF_MAX_WORKSPACE = 1 // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
};

// amsp_lt_plan makes a product's descriptors and asks cuBLASLt's
// heuristic for its algorithm once; amsp_lt_run runs it (with beta 0 or
// 1) as often as the caller likes. The caller keeps a plan per shape.
int amsp_lt_plan(void *handle, int transa, int transb, uint64_t m, uint64_t n, uint64_t k, int64_t lda, int64_t ldb,
	int64_t ldc, int dtype, int ctype, size_t wssize, struct amsp_lt_plan *p) {
	int32_t ta = transa, tb = transb;
	uint64_t wsmax = wssize;
	struct amsp_heuristic h;
	void *pref = NULL;
	int count = 0, st;
	memset(p, 0, sizeof *p);
	if ((st = p_cublasLtMatmulDescCreate(&p->desc, LT_COMPUTE_32F, LT_R_32F)) != 0) goto out;
	if ((st = p_cublasLtMatmulDescSetAttribute(p->desc, LT_DESC_TRANSA, &ta, sizeof ta)) != 0) goto out;
	if ((st = p_cublasLtMatmulDescSetAttribute(p->desc, LT_DESC_TRANSB, &tb, sizeof tb)) != 0) goto out;
	if ((st = p_cublasLtMatrixLayoutCreate(&p->la, dtype, transa ? k : m, transa ? m : k, lda)) != 0) goto out;
	if ((st = p_cublasLtMatrixLayoutCreate(&p->lb, dtype, transb ? n : k, transb ? k : n, ldb)) != 0) goto out;
	if ((st = p_cublasLtMatrixLayoutCreate(&p->lc, ctype, m, n, ldc)) != 0) goto out;
	if ((st = p_cublasLtMatmulPreferenceCreate(&pref)) != 0) goto out;
	if ((st = p_cublasLtMatmulPreferenceSetAttribute(pref, LT_PREF_MAX_WORKSPACE, &wsmax, sizeof wsmax)) != 0) goto out;
	if ((st = p_cublasLtMatmulAlgoGetHeuristic(handle, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &h, &count)) != 0) goto out;
	if (count == 0) {
		st = -1;
		goto out;
	}
	memcpy(p->algo, h.algo, sizeof p->algo);
out:
	if (pref) p_cublasLtMatmulPreferenceDestroy(pref);
	if (st != 0) amsp_lt_plan_free(p);
	return st;
}

int amsp_lt_run(void *handle, const struct amsp_lt_plan *p, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, float beta,
	CUdeviceptr ws, size_t wssize, CUstream s) {
	float alpha = 1;
	return p_cublasLtMatmul(handle, p->desc, &alpha, (const void *)a, p->la, (const void *)b, p->lb, &beta, (const void *)c,
		p->lc, (void *)c, p->lc, p->algo, (void *)ws, wssize, s);
}

void amsp_lt_plan_free(struct amsp_lt_plan *p) {
	if (p->lc) p_cublasLtMatrixLayoutDestroy(p->lc);
	if (p->lb) p_cublasLtMatrixLayoutDestroy(p->lb);
	if (p->la) p_cublasLtMatrixLayoutDestroy(p->la);
	if (p->desc) p_cublasLtMatmulDescDestroy(p->desc);
	memset(p, 0, sizeof *p);
}

ncclResult_t amsp_ncclGetVersion(int *v) { return p_ncclGetVersion(v); }

const char *amsp_nccl_missing(void) {
	for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
		if (syms[i].lib == AMSP_LIB_NCCL && *syms[i].slot == NULL) {
			return syms[i].name;
		}
	}
	return NULL;
}

// NCALL calls NCCL's entry point f, or returns AMSP_NCCL_NOSYM when this
// NCCL lacks it.
#define NCALL(f, ...) (p_##f ? p_##f(__VA_ARGS__) : AMSP_NCCL_NOSYM)

const char *amsp_ncclGetErrorString(ncclResult_t r) {
	return p_ncclGetErrorString ? p_ncclGetErrorString(r) : "unknown NCCL error";
}
// NCCL keeps the last error's message per thread; comm is unused (NULL).
const char *amsp_ncclGetLastError(void) {
	const char *s = p_ncclGetLastError ? p_ncclGetLastError(NULL) : NULL;
	return s ? s : "";
}
ncclResult_t amsp_ncclGetUniqueId(void *id) {
	amsp_ncclUniqueId u;
	ncclResult_t r = NCALL(ncclGetUniqueId, &u);
	if (r == 0) memcpy(id, u.internal, sizeof u.internal);
	return r;
}
ncclResult_t amsp_ncclCommInitRank(ncclComm_t *comm, int nranks, const void *id, int rank) {
	amsp_ncclUniqueId u;
	memcpy(u.internal, id, sizeof u.internal);
	return NCALL(ncclCommInitRank, comm, nranks, u, rank);
}
ncclResult_t amsp_ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm) {
	return NCALL(ncclCommSplit, comm, color, key, newcomm, NULL);
}
ncclResult_t amsp_ncclCommCount(ncclComm_t comm, int *n) { return NCALL(ncclCommCount, comm, n); }
ncclResult_t amsp_ncclCommUserRank(ncclComm_t comm, int *rank) { return NCALL(ncclCommUserRank, comm, rank); }
ncclResult_t amsp_ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err) {
	return NCALL(ncclCommGetAsyncError, comm, err);
}
ncclResult_t amsp_ncclCommAbort(ncclComm_t comm) { return NCALL(ncclCommAbort, comm); }
ncclResult_t amsp_ncclCommDestroy(ncclComm_t comm) { return NCALL(ncclCommDestroy, comm); }
ncclResult_t amsp_ncclGroupStart(void) { return NCALL(ncclGroupStart); }
ncclResult_t amsp_ncclGroupEnd(void) { return NCALL(ncclGroupEnd); }
ncclResult_t amsp_ncclAllGather(CUdeviceptr send, CUdeviceptr recv, size_t sendcount, int dtype, ncclComm_t comm, CUstream s) {
	return NCALL(ncclAllGather, (const void *)send, (void *)recv, sendcount, dtype, comm, s);
}
ncclResult_t amsp_ncclReduceScatter(CUdeviceptr send, CUdeviceptr recv, size_t recvcount, int dtype, int op, ncclComm_t comm,
	CUstream s) {
	return NCALL(ncclReduceScatter, (const void *)send, (void *)recv, recvcount, dtype, op, comm, s);
}
ncclResult_t amsp_ncclAllReduce(CUdeviceptr send, CUdeviceptr recv, size_t count, int dtype, int op, ncclComm_t comm,
	CUstream s) {
	return NCALL(ncclAllReduce, (const void *)send, (void *)recv, count, dtype, op, comm, s);
}
ncclResult_t amsp_ncclBroadcast(CUdeviceptr send, CUdeviceptr recv, size_t count, int dtype, int root, ncclComm_t comm,
	CUstream s) {
	return NCALL(ncclBroadcast, (const void *)send, (void *)recv, count, dtype, root, comm, s);
}
