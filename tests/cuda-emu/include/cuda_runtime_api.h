/* Host emulation of the CUDA runtime API (tests/cuda-emu): just what Unmask's
 * gpu/ sources use, with the real names, so those sources build unchanged
 * for the host. Memory is host memory; streams run work at once, in order.
 * This checks logic, not timing and not the real runtime. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUDART_VERSION 13000

typedef enum {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorNoKernelImageForDevice = 209,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotReady = 600,
  cudaErrorIllegalState = 401,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureMerge = 902,
  cudaErrorStreamCaptureUnmatched = 903,
  cudaErrorStreamCaptureUnjoined = 904,
  cudaErrorStreamCaptureIsolation = 905,
  cudaErrorStreamCaptureImplicit = 906,
  cudaErrorCapturedEvent = 907,
  cudaErrorStreamCaptureWrongThread = 908,
  cudaErrorUnknown = 999,
} cudaError_t;

typedef enum {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
} cudaStreamCaptureMode;

typedef enum {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
} cudaStreamCaptureStatus;

typedef struct UmEmuGraph *cudaGraph_t;
typedef struct UmEmuGraphExec *cudaGraphExec_t;

typedef struct UmEmuStream *cudaStream_t;
typedef struct UmEmuEvent *cudaEvent_t;

typedef enum {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
} cudaMemcpyKind;

typedef enum {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3,
} cudaMemoryType;

struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void *devicePointer;
  void *hostPointer;
};

typedef enum {
  cudaLimitStackSize = 0,
  cudaLimitPrintfFifoSize = 1,
  cudaLimitMallocHeapSize = 2,
} cudaLimit;

typedef enum {
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16F = 2,
  CUDA_R_8I = 3,
  CUDA_R_32I = 10,
  CUDA_R_16BF = 14,
} cudaDataType;
typedef cudaDataType cudaDataType_t;

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  int regsPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int major;
  int minor;
  int multiProcessorCount;
  int maxThreadsPerMultiProcessor;
  size_t sharedMemPerMultiprocessor;
  size_t sharedMemPerBlockOptin;
  int memoryBusWidth;
  int l2CacheSize;
};

struct cudaFuncAttributes {
  size_t sharedSizeBytes;
  size_t constSizeBytes;
  size_t localSizeBytes;
  int maxThreadsPerBlock;
  int numRegs;
  int ptxVersion;
  int binaryVersion;
};

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostAllocWriteCombined 0x04

const char *cudaGetErrorString (cudaError_t e);
const char *cudaGetErrorName (cudaError_t e);
cudaError_t cudaGetLastError (void);
cudaError_t cudaPeekAtLastError (void);
cudaError_t cudaGetDeviceCount (int *count);
cudaError_t cudaGetDeviceProperties (struct cudaDeviceProp *prop, int device);
cudaError_t cudaSetDevice (int device);
cudaError_t cudaGetDevice (int *device);
cudaError_t cudaDeviceSynchronize (void);
cudaError_t cudaDeviceGetLimit (size_t *value, cudaLimit limit);
cudaError_t cudaDriverGetVersion (int *version);
cudaError_t cudaRuntimeGetVersion (int *version);
cudaError_t cudaMemGetInfo (size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaMalloc (void **ptr, size_t bytes);
cudaError_t cudaFree (void *ptr);
cudaError_t cudaHostAlloc (void **ptr, size_t bytes, unsigned int flags);
cudaError_t cudaMallocHost (void **ptr, size_t bytes);
cudaError_t cudaFreeHost (void *ptr);
cudaError_t cudaHostRegister (void *ptr, size_t bytes, unsigned int flags);
cudaError_t cudaHostUnregister (void *ptr);
cudaError_t cudaPointerGetAttributes (struct cudaPointerAttributes *attr, const void *ptr);
cudaError_t cudaMemcpy (void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync (void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemset (void *dst, int value, size_t bytes);
cudaError_t cudaMemsetAsync (void *dst, int value, size_t bytes, cudaStream_t stream);
cudaError_t cudaStreamCreate (cudaStream_t *stream);
cudaError_t cudaStreamCreateWithFlags (cudaStream_t *stream, unsigned int flags);
cudaError_t cudaStreamDestroy (cudaStream_t stream);
cudaError_t cudaStreamSynchronize (cudaStream_t stream);
cudaError_t cudaStreamWaitEvent (cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaEventCreate (cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags (cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventDestroy (cudaEvent_t event);
cudaError_t cudaEventRecord (cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize (cudaEvent_t event);
cudaError_t cudaEventQuery (cudaEvent_t event);
cudaError_t cudaEventElapsedTime (float *ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaFuncGetAttributes (struct cudaFuncAttributes *attr, const void *func);

/* Stream capture and graphs: work queued on a capturing stream (and on
 * streams that joined its capture by waiting on one of its events) is
 * recorded in order instead of run; a launch of the graph runs it then.
 * Calls that must wait or allocate (synchronous copies and memsets,
 * cudaMalloc/cudaFree, pinned allocations, device or captured-stream
 * synchronisation, waiting on or querying a captured event) and copies to
 * or from pageable host memory are refused during a capture, as CUDA
 * refuses them, and invalidate it; so does ending a capture that a joined
 * stream has work for that the origin never waited on. */
cudaError_t cudaStreamBeginCapture (cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture (cudaStream_t stream, cudaGraph_t *graph);
cudaError_t cudaStreamIsCapturing (cudaStream_t stream, cudaStreamCaptureStatus *status);
cudaError_t cudaGraphInstantiate (cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags);
cudaError_t cudaGraphLaunch (cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy (cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy (cudaGraph_t graph);
cudaError_t cudaDeviceGetPCIBusId (char *bus_id, int len, int device);

/* Emulation controls for tests: the device's size (default 16 GiB) and the
 * bytes allocated now. */
void   um_emu_set_device_memory (size_t total_bytes);
size_t um_emu_device_bytes_in_use (void);
/* Device memory another process holds (0: none), off what is free. */
void   um_emu_hold_device_memory (size_t bytes);
/* A cudaMalloc taking this process past @bytes fails (0: no limit), though
 * cudaMemGetInfo said the memory was free. */
void   um_emu_fail_after (size_t bytes);
/* Since the last reset: captures ended into a graph, graph launches, work
 * items run from graphs, and captures invalidated by a refused call. */
typedef struct {
  long captured;
  long launches;
  long replayed_nodes;
  long invalidated;
} UmEmuGraphCounts;
void   um_emu_graph_counts (UmEmuGraphCounts *out);
void   um_emu_graph_reset_counts (void);

#ifdef __cplusplus
}
#endif
