/* um-cuda-emu.cc — the host emulation of the CUDA runtime, kernel launches
 * and cuBLAS that tests/cuda-emu's tests run gpu/ on (see um-cuda-emu.h).
 * Logic only: no timing, no real device, no memory-ordering effects. */
#include "cuda_runtime_api.h"
#include "cublas_v2.h"
#include "um-cuda-emu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <setjmp.h>
#include <ucontext.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

/* ---- errors ---- */

static thread_local cudaError_t last_error = cudaSuccess;

static cudaError_t
fail (cudaError_t e)
{
  last_error = e;
  return e;
}

extern "C" const char *
cudaGetErrorString (cudaError_t e)
{
  switch (e)
    {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoKernelImageForDevice: return "no kernel image is available for execution on the device";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnmatched: return "capture was not initiated in this stream";
    case cudaErrorStreamCaptureUnjoined: return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    default: return "unknown error";
    }
}

extern "C" const char *cudaGetErrorName (cudaError_t e) { return cudaGetErrorString (e); }

extern "C" cudaError_t
cudaGetLastError (void)
{
  cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

extern "C" cudaError_t cudaPeekAtLastError (void) { return last_error; }

/* ---- stream capture (see cuda_runtime_api.h) ---- */

struct UmEmuCapture {
  unsigned long id;
  cudaStream_t origin;
  cudaStreamCaptureMode mode;
  bool invalid;
  std::vector<std::function<void ()>> nodes;
  std::vector<cudaStream_t> joined;
};

struct UmEmuStream {
  UmEmuCapture *cap;      /* the capture this stream records into, or NULL */
  size_t n_nodes;         /* work recorded from this stream in that capture */
  size_t joined_upto;     /* ... of which the origin waited on this much */
};

struct UmEmuEvent {
  double t;
  bool recorded;
  unsigned long cap_id;   /* recorded in this capture (0: not captured) */
  cudaStream_t stream;
  size_t seq;
};

struct UmEmuGraph { std::vector<std::function<void ()>> nodes; };
struct UmEmuGraphExec { std::vector<std::function<void ()>> nodes; };

static std::recursive_mutex cap_lock;
static std::map<unsigned long, UmEmuCapture *> live_captures;
static unsigned long next_capture_id = 1;
/* The capture this thread began in a mode that refuses unsafe calls here. */
static thread_local UmEmuCapture *thread_capture;
static UmEmuGraphCounts counts;

extern "C" void
um_emu_graph_counts (UmEmuGraphCounts *out)
{
  std::lock_guard<std::recursive_mutex> g (cap_lock);
  *out = counts;
}

extern "C" void
um_emu_graph_reset_counts (void)
{
  std::lock_guard<std::recursive_mutex> g (cap_lock);
  memset (&counts, 0, sizeof counts);
}

static void
invalidate (UmEmuCapture *cap, const char *why)
{
  if (!cap->invalid)
    {
      counts.invalidated++;
      if (getenv ("UM_EMU_VERBOSE") != NULL)
        fprintf (stderr, "cuda-emu: capture %lu invalidated: %s\n", cap->id, why);
    }
  cap->invalid = true;
}

/* A call that must wait or allocate: refused while this thread captures
 * (global or thread-local mode), or while any thread captures in global
 * mode; the capture is invalidated. */
static cudaError_t
unsafe_call (const char *what)
{
  std::lock_guard<std::recursive_mutex> g (cap_lock);
  UmEmuCapture *hit = thread_capture;
  if (hit == NULL)
    for (auto &it : live_captures)
      if (it.second->mode == cudaStreamCaptureModeGlobal)
        hit = it.second;
  if (hit == NULL)
    return cudaSuccess;
  invalidate (hit, what);
  return fail (cudaErrorStreamCaptureUnsupported);
}

/* Whether @p is memory a captured copy may read or write: device memory or
 * pinned host memory (forward: the block maps are below). */
static bool copy_ok_in_capture (const void *p);

cudaError_t
um_emu_enqueue (cudaStream_t s, std::function<void ()> work)
{
  {
    std::lock_guard<std::recursive_mutex> g (cap_lock);
    if (s != NULL && s->cap != NULL)
      {
        if (s->cap->invalid)
          return fail (cudaErrorStreamCaptureInvalidated);
        s->cap->nodes.push_back (std::move (work));
        s->n_nodes++;
        return cudaSuccess;
      }
  }
  work ();
  return cudaSuccess;
}

static UmEmuCapture *
live (unsigned long id)
{
  auto it = live_captures.find (id);
  return it == live_captures.end () ? NULL : it->second;
}

static void
end_capture (UmEmuCapture *cap)
{
  cap->origin->cap = NULL;
  for (cudaStream_t j : cap->joined)
    j->cap = NULL;
  live_captures.erase (cap->id);
  if (thread_capture == cap)
    thread_capture = NULL;
  delete cap;
}

extern "C" cudaError_t
cudaStreamBeginCapture (cudaStream_t s, cudaStreamCaptureMode mode)
{
  std::lock_guard<std::recursive_mutex> g (cap_lock);
  if (s == NULL)   /* the legacy stream cannot be captured */
    return fail (cudaErrorStreamCaptureUnsupported);
  if (s->cap != NULL)
    return fail (cudaErrorIllegalState);
  UmEmuCapture *cap = new UmEmuCapture ();
  cap->id = next_capture_id++;
  cap->origin = s;
  cap->mode = mode;
  cap->invalid = false;
  live_captures[cap->id] = cap;
  s->cap = cap;
  s->n_nodes = s->joined_upto = 0;
  if (mode != cudaStreamCaptureModeRelaxed)
    thread_capture = cap;
  return cudaSuccess;
}

extern "C" cudaError_t
cudaStreamEndCapture (cudaStream_t s, cudaGraph_t *graph)
{
  std::lock_guard<std::recursive_mutex> g (cap_lock);
  UmEmuCapture *cap;

  *graph = NULL;
  if (s == NULL || s->cap == NULL)
    return fail (cudaErrorIllegalState);
  cap = s->cap;
  if (cap->origin != s)
    return fail (cudaErrorStreamCaptureUnmatched);
  if (cap->invalid)
    {
      end_capture (cap);
      return fail (cudaErrorStreamCaptureInvalidated);
    }
  for (cudaStream_t j : cap->joined)
    if (j->n_nodes > j->joined_upto)
      {
        counts.invalidated++;
        end_capture (cap);
        return fail (cudaErrorStreamCaptureUnjoined);
      }
  *graph = new UmEmuGraph ();
  (*graph)->nodes = std::move (cap->nodes);
  counts.captured++;
  end_capture (cap);
  return cudaSuccess;
}

extern "C" cudaError_t
cudaStreamIsCapturing (cudaStream_t s, cudaStreamCaptureStatus *status)
{
  std::lock_guard<std::recursive_mutex> g (cap_lock);
  *status = s == NULL || s->cap == NULL ? cudaStreamCaptureStatusNone
          : s->cap->invalid            ? cudaStreamCaptureStatusInvalidated
                                       : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

extern "C" cudaError_t
cudaGraphInstantiate (cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long)
{
  if (graph == NULL)
    return fail (cudaErrorInvalidValue);
  *exec = new UmEmuGraphExec ();
  (*exec)->nodes = graph->nodes;
  return cudaSuccess;
}

extern "C" cudaError_t
cudaGraphLaunch (cudaGraphExec_t exec, cudaStream_t s)
{
  if (exec == NULL)
    return fail (cudaErrorInvalidValue);
  {
    std::lock_guard<std::recursive_mutex> g (cap_lock);
    counts.launches++;
  }
  return um_emu_enqueue (s, [exec] () {
    for (auto &n : exec->nodes)
      n ();
    std::lock_guard<std::recursive_mutex> g (cap_lock);
    counts.replayed_nodes += (long) exec->nodes.size ();
  });
}

extern "C" cudaError_t cudaGraphExecDestroy (cudaGraphExec_t exec) { delete exec; return cudaSuccess; }
extern "C" cudaError_t cudaGraphDestroy (cudaGraph_t graph) { delete graph; return cudaSuccess; }

/* ---- the device ---- */

static std::mutex mem_lock;
static std::map<const char *, size_t> device_blocks, host_blocks;
static size_t device_total = (size_t) 16 << 30, device_used;

/* Device memory held by "another process": not ours to free, off what
 * cudaMemGetInfo says is free and what cudaMalloc can take, as on a GPU
 * shared with another program. UM_EMU_DEVICE_HELD (bytes, or with a K, M or
 * G suffix) sets it from the start, for whole programs (unmask-cli-emu);
 * um_emu_hold_device_memory () from a test, at any moment. */
static size_t device_held;
static bool device_held_read;

/* A byte count from the environment: a number, or with a K, M or G
 * suffix; 0 when unset or not positive. */
static size_t
env_bytes (const char *name)
{
  const char *v = getenv (name);
  char *end = NULL;
  double b;

  if (v == NULL)
    return 0;
  b = strtod (v, &end);
  if (end != NULL && (*end == 'K' || *end == 'k'))
    b *= 1024.0;
  else if (end != NULL && (*end == 'M' || *end == 'm'))
    b *= 1048576.0;
  else if (end != NULL && (*end == 'G' || *end == 'g'))
    b *= 1073741824.0;
  return b > 0 ? (size_t) b : 0;
}

/* Call locked. */
static size_t
held_bytes (void)
{
  if (!device_held_read)
    {
      device_held_read = true;
      device_held = env_bytes ("UM_EMU_DEVICE_HELD");
    }
  return device_held;
}

/* What is left for this process: call locked. */
static size_t
device_free_bytes (void)
{
  size_t taken = device_used + held_bytes ();
  return taken < device_total ? device_total - taken : 0;
}

/* UM_EMU_FAIL_AFTER (bytes, K/M/G): a cudaMalloc that would take this
 * process past it fails, though cudaMemGetInfo said the memory was free:
 * another process took it meanwhile (after a plan was made, mid-load). */
static size_t fail_after_v;
static bool fail_after_read;

static size_t
fail_after_bytes (void)
{
  if (!fail_after_read)
    {
      fail_after_read = true;
      fail_after_v = env_bytes ("UM_EMU_FAIL_AFTER");
    }
  return fail_after_v;
}

extern "C" void um_emu_set_device_memory (size_t total) { std::lock_guard<std::mutex> g (mem_lock); device_total = total; }
extern "C" size_t um_emu_device_bytes_in_use (void) { std::lock_guard<std::mutex> g (mem_lock); return device_used; }
extern "C" void
um_emu_fail_after (size_t bytes)
{
  std::lock_guard<std::mutex> g (mem_lock);
  fail_after_read = true;
  fail_after_v = bytes;
}

extern "C" void
um_emu_hold_device_memory (size_t bytes)
{
  std::lock_guard<std::mutex> g (mem_lock);
  (void) held_bytes ();
  device_held = bytes;
}

extern "C" cudaError_t cudaGetDeviceCount (int *n) { *n = 1; return cudaSuccess; }
extern "C" cudaError_t
cudaDeviceGetPCIBusId (char *bus_id, int len, int device)
{
  if (device != 0)
    return fail (cudaErrorInvalidDevice);
  snprintf (bus_id, (size_t) len, "0000:00:00.0");
  return cudaSuccess;
}
extern "C" cudaError_t cudaSetDevice (int d) { return d == 0 ? cudaSuccess : fail (cudaErrorInvalidDevice); }
extern "C" cudaError_t cudaGetDevice (int *d) { *d = 0; return cudaSuccess; }
extern "C" cudaError_t cudaDeviceSynchronize (void) { return unsafe_call ("cudaDeviceSynchronize"); }
extern "C" cudaError_t cudaDriverGetVersion (int *v) { *v = 13000; return cudaSuccess; }
extern "C" cudaError_t cudaRuntimeGetVersion (int *v) { *v = 13000; return cudaSuccess; }

extern "C" cudaError_t
cudaGetDeviceProperties (struct cudaDeviceProp *p, int device)
{
  if (device != 0)
    return fail (cudaErrorInvalidDevice);
  memset (p, 0, sizeof *p);
  snprintf (p->name, sizeof p->name, "Unmask host emulation");
  p->totalGlobalMem = device_total;
  p->sharedMemPerBlock = 48 << 10;
  p->sharedMemPerBlockOptin = 227 << 10;
  p->sharedMemPerMultiprocessor = 228 << 10;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7fffffff;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 132;
  p->maxThreadsPerMultiProcessor = 2048;
  p->memoryBusWidth = 5120;
  p->l2CacheSize = 50 << 20;
  return cudaSuccess;
}

extern "C" cudaError_t
cudaDeviceGetLimit (size_t *v, cudaLimit l)
{
  *v = l == cudaLimitStackSize ? 1024 : l == cudaLimitPrintfFifoSize ? (1 << 20) : (8 << 20);
  return cudaSuccess;
}

extern "C" cudaError_t
cudaMemGetInfo (size_t *free_b, size_t *total_b)
{
  std::lock_guard<std::mutex> g (mem_lock);
  *free_b = device_free_bytes ();
  *total_b = device_total;
  return cudaSuccess;
}

extern "C" cudaError_t
cudaMalloc (void **ptr, size_t bytes)
{
  *ptr = NULL;
  if (unsafe_call ("cudaMalloc") != cudaSuccess)
    return cudaErrorStreamCaptureUnsupported;
  std::lock_guard<std::mutex> g (mem_lock);
  char *p;
  if (bytes > device_free_bytes ()
      || (fail_after_bytes () > 0 && device_used + bytes > fail_after_bytes ()))
    return fail (cudaErrorMemoryAllocation);
  /* 256-byte aligned like cudaMalloc, so alignment-dependent paths run. */
  if ((p = (char *) aligned_alloc (256, (bytes + 255) & ~(size_t) 255)) == NULL)
    return fail (cudaErrorMemoryAllocation);
  device_blocks[p] = bytes;
  device_used += bytes;
  *ptr = p;
  return cudaSuccess;
}

extern "C" cudaError_t
cudaFree (void *ptr)
{
  /* cudaFree (NULL) only makes the context: safe. */
  if (ptr != NULL && unsafe_call ("cudaFree") != cudaSuccess)
    return cudaErrorStreamCaptureUnsupported;
  std::lock_guard<std::mutex> g (mem_lock);
  if (ptr == NULL)
    return cudaSuccess;
  auto it = device_blocks.find ((const char *) ptr);
  if (it == device_blocks.end ())
    return fail (cudaErrorInvalidValue);
  device_used -= it->second;
  device_blocks.erase (it);
  free (ptr);
  return cudaSuccess;
}

extern "C" cudaError_t
cudaHostAlloc (void **ptr, size_t bytes, unsigned int)
{
  *ptr = NULL;
  if (unsafe_call ("cudaHostAlloc") != cudaSuccess)
    return cudaErrorStreamCaptureUnsupported;
  std::lock_guard<std::mutex> g (mem_lock);
  char *p = (char *) aligned_alloc (4096, (bytes + 4095) & ~(size_t) 4095);
  *ptr = p;
  if (p == NULL)
    return fail (cudaErrorMemoryAllocation);
  host_blocks[p] = bytes;
  return cudaSuccess;
}

extern "C" cudaError_t cudaMallocHost (void **ptr, size_t bytes) { return cudaHostAlloc (ptr, bytes, 0); }

extern "C" cudaError_t
cudaFreeHost (void *ptr)
{
  if (ptr != NULL && unsafe_call ("cudaFreeHost") != cudaSuccess)
    return cudaErrorStreamCaptureUnsupported;
  std::lock_guard<std::mutex> g (mem_lock);
  if (ptr == NULL)
    return cudaSuccess;
  auto it = host_blocks.find ((const char *) ptr);
  if (it == host_blocks.end ())
    return fail (cudaErrorInvalidValue);
  host_blocks.erase (it);
  free (ptr);
  return cudaSuccess;
}

extern "C" cudaError_t cudaHostRegister (void *, size_t, unsigned int) { return cudaSuccess; }
extern "C" cudaError_t cudaHostUnregister (void *) { return cudaSuccess; }

/* Which allocation holds @ptr, if any. */
static bool
find_block (const std::map<const char *, size_t> &m, const void *ptr)
{
  auto it = m.upper_bound ((const char *) ptr);
  if (it == m.begin ())
    return false;
  --it;
  return (const char *) ptr < it->first + (it->second ? it->second : 1);
}

extern "C" cudaError_t
cudaPointerGetAttributes (struct cudaPointerAttributes *a, const void *ptr)
{
  std::lock_guard<std::mutex> g (mem_lock);
  memset (a, 0, sizeof *a);
  a->type = find_block (device_blocks, ptr) ? cudaMemoryTypeDevice
          : find_block (host_blocks, ptr)   ? cudaMemoryTypeHost
                                            : cudaMemoryTypeUnregistered;
  a->devicePointer = a->type == cudaMemoryTypeDevice ? (void *) ptr : NULL;
  a->hostPointer = a->type == cudaMemoryTypeHost ? (void *) ptr : NULL;
  return cudaSuccess;
}

static cudaError_t
copy_now (void *dst, const void *src, size_t bytes)
{
  if (bytes && (dst == NULL || src == NULL))
    return fail (cudaErrorInvalidValue);
  /* CUDA accepts an empty copy from NULL (an empty host vector's data ());
   * memmove does not. */
  if (bytes > 0)
    memmove (dst, src, bytes);
  return cudaSuccess;
}

extern "C" cudaError_t
cudaMemcpy (void *dst, const void *src, size_t bytes, cudaMemcpyKind)
{
  if (unsafe_call ("cudaMemcpy") != cudaSuccess)
    return cudaErrorStreamCaptureUnsupported;
  return copy_now (dst, src, bytes);
}

/* Captured, a copy runs when the graph does, reading and writing then:
 * the host side must be pinned (CUDA stages pageable memory at the call,
 * which a capture cannot). */
extern "C" cudaError_t
cudaMemcpyAsync (void *dst, const void *src, size_t bytes, cudaMemcpyKind, cudaStream_t s)
{
  if (bytes && (dst == NULL || src == NULL))
    return fail (cudaErrorInvalidValue);
  {
    std::lock_guard<std::recursive_mutex> g (cap_lock);
    if (s != NULL && s->cap != NULL && bytes > 0 && (!copy_ok_in_capture (dst) || !copy_ok_in_capture (src)))
      {
        invalidate (s->cap, "a copy to or from pageable host memory");
        return fail (cudaErrorStreamCaptureUnsupported);
      }
  }
  return um_emu_enqueue (s, [dst, src, bytes] () { copy_now (dst, src, bytes); });
}

extern "C" cudaError_t
cudaMemset (void *dst, int value, size_t bytes)
{
  if (bytes && dst == NULL)
    return fail (cudaErrorInvalidValue);
  if (unsafe_call ("cudaMemset") != cudaSuccess)
    return cudaErrorStreamCaptureUnsupported;
  memset (dst, value, bytes);
  return cudaSuccess;
}

extern "C" cudaError_t
cudaMemsetAsync (void *d, int v, size_t b, cudaStream_t s)
{
  if (b && d == NULL)
    return fail (cudaErrorInvalidValue);
  return um_emu_enqueue (s, [d, v, b] () { memset (d, v, b); });
}

/* ---- streams and events: work runs when queued (or is recorded, see
 * above), so outside a capture both are markers ---- */

static bool
copy_ok_in_capture (const void *p)
{
  std::lock_guard<std::mutex> g (mem_lock);
  return find_block (device_blocks, p) || find_block (host_blocks, p);
}

static double
now_ms (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

extern "C" cudaError_t cudaStreamCreate (cudaStream_t *s) { *s = new UmEmuStream (); return cudaSuccess; }
extern "C" cudaError_t cudaStreamCreateWithFlags (cudaStream_t *s, unsigned int) { return cudaStreamCreate (s); }
extern "C" cudaError_t cudaStreamDestroy (cudaStream_t s) { delete s; return cudaSuccess; }

extern "C" cudaError_t
cudaStreamSynchronize (cudaStream_t s)
{
  std::lock_guard<std::recursive_mutex> g (cap_lock);
  if (s != NULL && s->cap != NULL)
    {
      invalidate (s->cap, "cudaStreamSynchronize on a capturing stream");
      return fail (cudaErrorStreamCaptureUnsupported);
    }
  return cudaSuccess;
}

/* Waiting on an event recorded in a capture joins @s to it (a fork); the
 * origin waiting on a joined stream's event joins that stream's work so
 * far back (a join). */
extern "C" cudaError_t
cudaStreamWaitEvent (cudaStream_t s, cudaEvent_t e, unsigned int)
{
  std::lock_guard<std::recursive_mutex> g (cap_lock);
  UmEmuCapture *cap;

  if (e == NULL)
    return fail (cudaErrorInvalidValue);
  cap = e->cap_id != 0 ? live (e->cap_id) : NULL;
  if (cap == NULL)
    return cudaSuccess;   /* work already complete, or outside any capture */
  if (s == NULL)
    {
      invalidate (cap, "the legacy stream waits on a captured event");
      return fail (cudaErrorStreamCaptureIsolation);
    }
  if (s->cap == NULL)
    {
      s->cap = cap;
      s->n_nodes = s->joined_upto = 0;
      cap->joined.push_back (s);
      return cudaSuccess;
    }
  if (s->cap != cap)
    {
      invalidate (cap, "a stream of another capture waits on its event");
      return fail (cudaErrorStreamCaptureIsolation);
    }
  if (e->stream != NULL && e->stream != s && e->stream->cap == cap && e->seq > e->stream->joined_upto)
    e->stream->joined_upto = e->seq;
  return cudaSuccess;
}

extern "C" cudaError_t cudaEventCreate (cudaEvent_t *e) { *e = new UmEmuEvent (); return cudaSuccess; }
extern "C" cudaError_t cudaEventCreateWithFlags (cudaEvent_t *e, unsigned int) { return cudaEventCreate (e); }
extern "C" cudaError_t cudaEventDestroy (cudaEvent_t e) { delete e; return cudaSuccess; }

extern "C" cudaError_t
cudaEventRecord (cudaEvent_t e, cudaStream_t s)
{
  std::lock_guard<std::recursive_mutex> g (cap_lock);
  if (s != NULL && s->cap != NULL)
    {
      cudaError_t r;
      e->cap_id = s->cap->id;
      e->stream = s;
      e->recorded = false;
      r = um_emu_enqueue (s, [e] () { e->t = now_ms (); e->recorded = true; });
      /* The record itself is the last work the event covers. */
      e->seq = s->n_nodes;
      return r;
    }
  e->cap_id = 0;
  e->stream = s;
  e->t = now_ms ();
  e->recorded = true;
  return cudaSuccess;
}

/* An event last recorded in a capture that is still going on. */
static bool
event_in_capture (cudaEvent_t e)
{
  std::lock_guard<std::recursive_mutex> g (cap_lock);
  UmEmuCapture *cap = e->cap_id != 0 ? live (e->cap_id) : NULL;
  if (cap != NULL)
    invalidate (cap, "waiting on or querying a captured event");
  return cap != NULL;
}

extern "C" cudaError_t
cudaEventSynchronize (cudaEvent_t e)
{
  return event_in_capture (e) ? fail (cudaErrorCapturedEvent) : cudaSuccess;
}

extern "C" cudaError_t
cudaEventQuery (cudaEvent_t e)
{
  return event_in_capture (e) ? fail (cudaErrorCapturedEvent) : cudaSuccess;
}

extern "C" cudaError_t
cudaEventElapsedTime (float *ms, cudaEvent_t a, cudaEvent_t b)
{
  if (!a->recorded || !b->recorded)
    return fail (cudaErrorInvalidValue);
  *ms = (float) (b->t - a->t);
  return cudaSuccess;
}

extern "C" cudaError_t
cudaFuncGetAttributes (struct cudaFuncAttributes *a, const void *func)
{
  if (func == NULL)
    return fail (cudaErrorInvalidValue);
  memset (a, 0, sizeof *a);
  a->maxThreadsPerBlock = 1024;
  a->ptxVersion = a->binaryVersion = 90;
  return cudaSuccess;
}

/* ---- kernel launches: blocks in order, threads as fibers ---- */

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace {

enum { RUNNING, AT_BLOCK_BARRIER, AT_WARP_BARRIER, DONE };
constexpr size_t STACK_BYTES = 256 << 10;

/* A fiber is started once per launch (makecontext) and then runs the kernel
 * once per block, switching with _setjmp/_longjmp: swapcontext would make
 * two system calls per switch. */
struct Fiber {
  ucontext_t ctx;
  jmp_buf jb;
  bool started;
  int state;
  uint3 idx;
  uint64_t slot;      /* warp exchange: the value this lane offers */
  int src;            /* ... and the lane it reads */
  int reduce;         /* __syncthreads_or/and/count: the predicate */
  const char *file;   /* the __syncthreads waited at */
  int line;
};

struct Launch {
  std::vector<Fiber> fibers;
  ucontext_t start_ctx;
  jmp_buf sched;
  int current;
  const std::function<void ()> *body;
  std::vector<char> shared;
  bool failed;
  int reduce_result;
};

Launch *active;

/* Stacks are kept for the next launch, and freed at exit (so that the
 * sanitizers' leak check sees them owned). */
std::vector<std::unique_ptr<char[]>> stack_pool;

void
yield_to_scheduler (int state)
{
  Launch *L = active;
  Fiber &f = L->fibers[L->current];
  f.state = state;
  if (_setjmp (f.jb) == 0)
    _longjmp (L->sched, 1);
}

void
fiber_main (void)
{
  for (;;)
    {
      Launch *L = active;
      (*L->body) ();
      yield_to_scheduler (DONE);
    }
}

/* Runs fiber @i until it yields. */
void
resume (Launch *L, int i)
{
  Fiber &f = L->fibers[i];
  L->current = i;
  threadIdx = f.idx;
  if (_setjmp (L->sched) == 0)
    {
      if (!f.started)
        {
          f.started = true;
          swapcontext (&L->start_ctx, &f.ctx);
        }
      else
        _longjmp (f.jb, 1);
    }
}

} // namespace

void *
um_emu_dynamic_shared (void)
{
  return active->shared.data ();
}

static void
barrier_site (const char *file, int line)
{
  active->fibers[active->current].file = file;
  active->fibers[active->current].line = line;
}

void
um_emu_syncthreads (const char *file, int line)
{
  barrier_site (file, line);
  yield_to_scheduler (AT_BLOCK_BARRIER);
}

int
um_emu_syncthreads_reduce (int pred, int op, const char *file, int line)
{
  barrier_site (file, line);
  active->fibers[active->current].reduce = pred ? 1 : 0;
  active->fibers[active->current].src = 1000 + op;   /* marks a reducing barrier */
  yield_to_scheduler (AT_BLOCK_BARRIER);
  return active->reduce_result;
}

uint64_t
um_emu_warp_exchange (uint64_t value, int src_lane, int width)
{
  Launch *L = active;
  int me = L->current;
  int warp0 = me - me % 32;
  uint64_t v;
  (void) width;
  L->fibers[me].slot = value;
  L->fibers[me].src = src_lane;
  yield_to_scheduler (AT_WARP_BARRIER);
  /* Every live lane of the warp has offered its value; a lane that exited
   * offers nothing, and reading it is a kernel bug. */
  if (warp0 + src_lane >= (int) L->fibers.size () || L->fibers[warp0 + src_lane].state == DONE)
    {
      if (!L->failed)   /* once per launch, not once per lane */
        fprintf (stderr, "cuda-emu: block (%u,%u,%u): a warp shuffle reads lane %d, which has exited or does not "
                 "exist\n", blockIdx.x, blockIdx.y, blockIdx.z, src_lane);
      L->failed = true;
      return 0;
    }
  v = L->fibers[warp0 + src_lane].slot;
  /* A second meeting, so no lane overwrites its slot before all have read. */
  yield_to_scheduler (AT_WARP_BARRIER);
  return v;
}

unsigned
um_emu_warp_ballot (int pred)
{
  Launch *L = active;
  int me = L->current, warp0 = me - me % 32;
  unsigned bits = 0;
  L->fibers[me].slot = pred ? 1 : 0;
  yield_to_scheduler (AT_WARP_BARRIER);
  for (int i = warp0; i < warp0 + 32 && i < (int) L->fibers.size (); i++)
    if (L->fibers[i].state != DONE && L->fibers[i].slot)
      bits |= 1u << (i - warp0);
  yield_to_scheduler (AT_WARP_BARRIER);
  return bits;
}

/* Odd blocks run their threads last to first: a thread that reads shared
 * memory another wrote without a barrier between then sees garbage in one
 * order or the other, so a missing __syncthreads shows. */
static void
run_block (Launch *L, bool reverse)
{
  const int n = (int) L->fibers.size ();

  for (int i = 0; i < n; i++)
    {
      L->fibers[i].state = RUNNING;
      L->fibers[i].src = 0;
    }
  for (;;)
    {
      bool progressed = false, all_done = true;
      for (int j = 0; j < n; j++)
        {
          const int i = reverse ? n - 1 - j : j;
          if (L->fibers[i].state == RUNNING)
            {
              resume (L, i);
              progressed = true;
            }
        }
      /* Release warps whose live lanes all wait at a warp barrier. */
      for (int w = 0; w < n; w += 32)
        {
          int waiting = 0, live = 0;
          for (int i = w; i < w + 32 && i < n; i++)
            if (L->fibers[i].state != DONE)
              {
                live++;
                waiting += L->fibers[i].state == AT_WARP_BARRIER;
              }
          if (live > 0 && waiting == live)
            {
              for (int i = w; i < w + 32 && i < n; i++)
                if (L->fibers[i].state == AT_WARP_BARRIER)
                  L->fibers[i].state = RUNNING;
              progressed = true;
            }
        }
      /* Release the block when every live thread waits at __syncthreads. */
      {
        int waiting = 0, live = 0, op = -1, acc_or = 0, acc_and = 1, acc_count = 0;
        for (int i = 0; i < n; i++)
          if (L->fibers[i].state != DONE)
            {
              live++;
              if (L->fibers[i].state == AT_BLOCK_BARRIER)
                {
                  waiting++;
                  if (L->fibers[i].src >= 1000)
                    {
                      op = L->fibers[i].src - 1000;
                      acc_or |= L->fibers[i].reduce;
                      acc_and &= L->fibers[i].reduce;
                      acc_count += L->fibers[i].reduce;
                    }
                }
            }
        if (live > 0 && waiting == live)
          {
            const Fiber *first = NULL;
            for (int i = 0; i < n; i++)
              if (L->fibers[i].state == AT_BLOCK_BARRIER)
                {
                  const Fiber &f = L->fibers[i];
                  if (first == NULL)
                    first = &f;
                  else if (f.line != first->line || strcmp (f.file, first->file) != 0)
                    {
                      fprintf (stderr, "cuda-emu: block (%u,%u,%u): threads wait at different __syncthreads "
                               "(%s:%d and %s:%d)\n", blockIdx.x, blockIdx.y, blockIdx.z, first->file,
                               first->line, f.file, f.line);
                      L->failed = true;
                      return;
                    }
                }
            L->reduce_result = op == 0 ? acc_or : op == 1 ? acc_and : acc_count;
            for (int i = 0; i < n; i++)
              if (L->fibers[i].state == AT_BLOCK_BARRIER)
                {
                  L->fibers[i].state = RUNNING;
                  L->fibers[i].src = 0;
                }
            progressed = true;
          }
        for (int i = 0; i < n; i++)
          all_done = all_done && L->fibers[i].state == DONE;
      }
      if (all_done)
        return;
      if (!progressed)
        {
          fprintf (stderr, "cuda-emu: block (%u,%u,%u) is stuck: threads wait at barriers others never reach\n",
                   blockIdx.x, blockIdx.y, blockIdx.z);
          L->failed = true;
          return;
        }
    }
}

/* getcontext () below only captures a template that makecontext () then
 * redirects to fiber_main: nothing ever resumes at it, so the "might be
 * clobbered by longjmp" warning (-O2) cannot apply. */
#pragma GCC diagnostic ignored "-Wclobbered"

static void run_grid (dim3 grid, dim3 block, size_t shared_bytes, const std::function<void ()> &body);

/* A bad configuration fails at the launch, as CUDA's does; the blocks run
 * now, or when a recorded graph does. */
void
um_emu_run (dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, std::function<void ()> body)
{
  const unsigned nthreads = block.x * block.y * block.z;

  if (nthreads == 0 || nthreads > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535
      || grid.z > 65535 || block.z > 64 || shared_bytes > (227u << 10))
    {
      fail (cudaErrorInvalidConfiguration);
      return;
    }
  um_emu_enqueue (stream, [grid, block, shared_bytes, body] () { run_grid (grid, block, shared_bytes, body); });
}

static void
run_grid (dim3 grid, dim3 block, size_t shared_bytes, const std::function<void ()> &body)
{
  static std::mutex one_launch;   /* `__shared__` is static: one block at a time, process-wide */
  std::lock_guard<std::mutex> g (one_launch);
  const unsigned nthreads = block.x * block.y * block.z;
  Launch L;

  L.fibers.resize (nthreads);
  L.body = &body;
  L.failed = false;
  L.shared.assign (shared_bytes + 16, 0);
  while (stack_pool.size () < nthreads)
    stack_pool.emplace_back (new char[STACK_BYTES]);
  for (unsigned i = 0; i < nthreads; i++)
    {
      Fiber &f = L.fibers[i];
      f.idx = { i % block.x, (i / block.x) % block.y, i / (block.x * block.y) };
      f.started = false;
      getcontext (&f.ctx);
      f.ctx.uc_stack.ss_sp = stack_pool[i].get ();
      f.ctx.uc_stack.ss_size = STACK_BYTES;
      f.ctx.uc_link = NULL;
      makecontext (&f.ctx, fiber_main, 0);
    }
  active = &L;
  blockDim = block;
  gridDim = grid;
  for (unsigned z = 0; z < grid.z && !L.failed; z++)
    for (unsigned y = 0; y < grid.y && !L.failed; y++)
      for (unsigned x = 0; x < grid.x && !L.failed; x++)
        {
          blockIdx = { x, y, z };
          /* Fresh shared memory per block: garbage, like the GPU's. */
          memset (L.shared.data (), 0xa5, L.shared.size ());
          run_block (&L, ((x + y + z) & 1) != 0);
        }
  active = NULL;
  if (L.failed)
    fail (cudaErrorLaunchFailure);
}
