/* cuda.c — the client end of CUDA IPC arenas: open the broker's
 * cudaIpcMemHandle_t on the same GPU, close it when the arena goes.
 *
 * libscdb does not link the CUDA runtime (the installed library stays
 * usable on machines without one): the few entry points it needs are found
 * at first use with dlopen -- a libcudart the process already has loaded
 * first (RTLD_NOLOAD), else $SCDB_CUDART, libcudart.so, .so.13, .so.12.
 * Every runtime shares the driver's primary context of a device, so memory
 * opened here is usable from the application's own CUDA code on that
 * device.  The caller's current device is restored after each call.
 *
 * Live sessions on CUDA arenas fold each step's attention on the device
 * (evict.h, "on a device").  The kernels are kernels/cuda/acc_kernels.cuh,
 * built by nvcc into a fatbin this library embeds (acc_fatbin.c, generated;
 * empty in a build without nvcc) and loads per device with the CUDA driver
 * API -- libcuda.so.1 through dlopen, like the runtime above -- in that
 * device's primary context, the one the runtime and the arena's memory use;
 * kernels/cuda/acc_launch.c sequences the launches, the same code the
 * broker's CUDA backend runs. */
#include "libscdb_int.h"

#include "acc_launch.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct { char reserved[SCDB_CUDA_IPC_HANDLE_BYTES]; } ipc_handle;   /* cudaIpcMemHandle_t */

static struct {
    void *lib;
    char err[256];
    int (*get_device)(int *);
    int (*set_device)(int);
    int (*device_count)(int *);
    int (*pci_bus_id)(char *, int, int);
    int (*ipc_open)(void **, ipc_handle, unsigned int);
    int (*ipc_close)(void *);
    const char *(*error_string)(int);
} rt;
static pthread_once_t rt_once = PTHREAD_ONCE_INIT;

#define CUDA_IPC_LAZY_ENABLE_PEER_ACCESS 1u   /* cudaIpcMemLazyEnablePeerAccess */

static void rt_load(void)
{
    const char *names[] = {getenv("SCDB_CUDART"), "libcudart.so", "libcudart.so.13",
                           "libcudart.so.12", "/usr/local/cuda/lib64/libcudart.so"};
    for (int pass = 0; pass < 2 && !rt.lib; pass++)
        for (size_t i = 0; i < sizeof names / sizeof *names && !rt.lib; i++)
            if (names[i] && *names[i])
                rt.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | (pass ? 0 : RTLD_NOLOAD));
    if (!rt.lib) {
        snprintf(rt.err, sizeof rt.err, "no CUDA runtime library (libcudart.so; set "
                 "$SCDB_CUDART to its path): %s", dlerror());
        return;
    }
    *(void **)&rt.get_device = dlsym(rt.lib, "cudaGetDevice");
    *(void **)&rt.set_device = dlsym(rt.lib, "cudaSetDevice");
    *(void **)&rt.device_count = dlsym(rt.lib, "cudaGetDeviceCount");
    *(void **)&rt.pci_bus_id = dlsym(rt.lib, "cudaDeviceGetPCIBusId");
    *(void **)&rt.ipc_open = dlsym(rt.lib, "cudaIpcOpenMemHandle");
    *(void **)&rt.ipc_close = dlsym(rt.lib, "cudaIpcCloseMemHandle");
    *(void **)&rt.error_string = dlsym(rt.lib, "cudaGetErrorString");
    if (!rt.get_device || !rt.set_device || !rt.device_count || !rt.pci_bus_id || !rt.ipc_open ||
        !rt.ipc_close || !rt.error_string) {
        snprintf(rt.err, sizeof rt.err, "the CUDA runtime library lacks the IPC entry points");
        rt.lib = NULL;
    }
}

static const char *cuda_str(int e) { return rt.error_string ? rt.error_string(e) : "?"; }

/* The device with the broker's PCI bus id in this process's numbering,
 * else the broker's ordinal. */
static int find_device(int ordinal, const char *pci)
{
    int n = 0;
    if (pci && *pci && rt.device_count(&n) == 0)
        for (int d = 0; d < n; d++) {
            char id[64] = "";
            if (rt.pci_bus_id(id, (int)sizeof id, d) == 0 && !strcasecmp(id, pci)) return d;
        }
    return ordinal;
}

scdb_err cl_cuda_open(scdb *h, const uint8_t *handle, size_t len, int ordinal, const char *pci,
                       void **dev_ptr, int *device)
{
    ipc_handle ih;
    int prev = 0, dev, e;
    void *p = NULL;

    *dev_ptr = NULL;
    if (len != sizeof ih) return cl_fail(h, SCDB_EPROTO, "CUDA IPC handle of %zu bytes", len);
    pthread_once(&rt_once, rt_load);
    if (!rt.lib) return cl_fail(h, SCDB_EUNSUPPORTED, "%s", rt.err);
    memcpy(&ih, handle, sizeof ih);
    dev = find_device(ordinal, pci);
    if (rt.get_device(&prev)) prev = -1;
    if ((e = rt.set_device(dev)))
        return cl_fail(h, SCDB_EDEVICE, "cudaSetDevice(%d) (broker's device %d, %s): %s", dev,
                        ordinal, pci && *pci ? pci : "no bus id", cuda_str(e));
    e = rt.ipc_open(&p, ih, CUDA_IPC_LAZY_ENABLE_PEER_ACCESS);
    if (prev >= 0 && prev != dev) rt.set_device(prev);
    if (e)
        return cl_fail(h, SCDB_EDEVICE, "cudaIpcOpenMemHandle on device %d: %s (same host and "
                        "GPU as the broker? not in the broker's own process?)", dev, cuda_str(e));
    *dev_ptr = p;
    *device = dev;
    return SCDB_OK;
}

void cl_cuda_close(void *dev_ptr, int device)
{
    int prev = -1;

    if (!dev_ptr || !rt.lib) return;
    if (rt.get_device(&prev)) prev = -1;
    rt.set_device(device);
    rt.ipc_close(dev_ptr);
    if (prev >= 0 && prev != device) rt.set_device(prev);
}

/* ------------------------------------------------------------ driver API */

extern const unsigned char scdb_cl_acc_fatbin[];
extern const size_t scdb_cl_acc_fatbin_len;

#define CL_MAX_DEVICES 64

typedef int CUres;                                 /* CUresult: 0 = success */
static struct {
    void *lib;
    char err[256];
    CUres (*init)(unsigned);
    CUres (*device_get)(int *, int);
    CUres (*primary_retain)(void **, int);
    CUres (*ctx_push)(void *);
    CUres (*ctx_pop)(void **);
    CUres (*module_load)(void **, const void *);
    CUres (*module_fn)(void **, void *, const char *);
    CUres (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                    void *, void **, void **);
    CUres (*mem_alloc)(unsigned long long *, size_t);
    CUres (*mem_free)(unsigned long long);
    CUres (*dtoh)(void *, unsigned long long, size_t);
    CUres (*stream_sync)(void *);
    CUres (*error_string)(CUres, const char **);
    void *ctx[CL_MAX_DEVICES];                     /* retained primary contexts */
    void *fn[CL_MAX_DEVICES][SCDB_KACC_N_KERNELS]; /* loaded kernels */
} drv;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t drv_mu = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local char drv_last[256];

static void drv_load(void)
{
    const char *names[] = {getenv("SCDB_LIBCUDA"), "libcuda.so.1", "libcuda.so"};
    for (int pass = 0; pass < 2 && !drv.lib; pass++)
        for (size_t i = 0; i < sizeof names / sizeof *names && !drv.lib; i++)
            if (names[i] && *names[i])
                drv.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | (pass ? 0 : RTLD_NOLOAD));
    if (!drv.lib) {
        snprintf(drv.err, sizeof drv.err, "no CUDA driver library (libcuda.so.1; set "
                 "$SCDB_LIBCUDA to its path): %s", dlerror());
        return;
    }
    /* the _v2 entry points are what cuda.h's names resolve to */
    *(void **)&drv.init = dlsym(drv.lib, "cuInit");
    *(void **)&drv.device_get = dlsym(drv.lib, "cuDeviceGet");
    *(void **)&drv.primary_retain = dlsym(drv.lib, "cuDevicePrimaryCtxRetain");
    *(void **)&drv.ctx_push = dlsym(drv.lib, "cuCtxPushCurrent_v2");
    *(void **)&drv.ctx_pop = dlsym(drv.lib, "cuCtxPopCurrent_v2");
    *(void **)&drv.module_load = dlsym(drv.lib, "cuModuleLoadData");
    *(void **)&drv.module_fn = dlsym(drv.lib, "cuModuleGetFunction");
    *(void **)&drv.launch = dlsym(drv.lib, "cuLaunchKernel");
    *(void **)&drv.mem_alloc = dlsym(drv.lib, "cuMemAlloc_v2");
    *(void **)&drv.mem_free = dlsym(drv.lib, "cuMemFree_v2");
    *(void **)&drv.dtoh = dlsym(drv.lib, "cuMemcpyDtoH_v2");
    *(void **)&drv.stream_sync = dlsym(drv.lib, "cuStreamSynchronize");
    *(void **)&drv.error_string = dlsym(drv.lib, "cuGetErrorString");
    if (!drv.init || !drv.device_get || !drv.primary_retain || !drv.ctx_push || !drv.ctx_pop ||
        !drv.module_load || !drv.module_fn || !drv.launch || !drv.mem_alloc || !drv.mem_free ||
        !drv.dtoh || !drv.stream_sync || !drv.error_string) {
        snprintf(drv.err, sizeof drv.err, "the CUDA driver library lacks an entry point libscdb "
                 "needs (cuLaunchKernel, cuModuleLoadData, ...)");
        drv.lib = NULL;
        return;
    }
    if (drv.init(0)) {
        snprintf(drv.err, sizeof drv.err, "cuInit failed: no usable CUDA driver");
        drv.lib = NULL;
    }
}

static scdb_err drv_fail(CUres r, const char *what)
{
    const char *m = NULL;
    if (drv.error_string) drv.error_string(r, &m);
    snprintf(drv_last, sizeof drv_last, "%s: %s (CUDA driver error %d)", what, m ? m : "?", r);
    return SCDB_EDEVICE;
}

const char *cl_cuda_error(void) { return drv_last; }

/* Push device dev's primary context (retained once, loading the kernels
 * into it); pop with ctx_pop. */
static scdb_err drv_enter(int dev)
{
    CUres r;
    scdb_err e = SCDB_OK;

    pthread_once(&drv_once, drv_load);
    if (!drv.lib) {
        snprintf(drv_last, sizeof drv_last, "%s", drv.err);
        return SCDB_EUNSUPPORTED;
    }
    if (!scdb_cl_acc_fatbin_len) {
        snprintf(drv_last, sizeof drv_last, "this libscdb was built without nvcc: it has no CUDA "
                 "kernels for live sessions on CUDA arenas");
        return SCDB_EUNSUPPORTED;
    }
    if (dev < 0 || dev >= CL_MAX_DEVICES) {
        snprintf(drv_last, sizeof drv_last, "CUDA device %d out of range", dev);
        return SCDB_EDEVICE;
    }
    pthread_mutex_lock(&drv_mu);
    if (!drv.ctx[dev]) {
        int d;
        void *ctx = NULL, *mod = NULL;
        if ((r = drv.device_get(&d, dev)) || (r = drv.primary_retain(&ctx, d))) {
            e = drv_fail(r, "cuDevicePrimaryCtxRetain");
        } else if ((r = drv.ctx_push(ctx))) {
            e = drv_fail(r, "cuCtxPushCurrent");
        } else {
            void *ignored;
            if ((r = drv.module_load(&mod, scdb_cl_acc_fatbin)))
                e = drv_fail(r, "cuModuleLoadData (libscdb's accumulator kernels)");
            for (int k = 0; !e && k < SCDB_KACC_N_KERNELS; k++)
                if ((r = drv.module_fn(&drv.fn[dev][k], mod, kn_acc_kernel_names[k])))
                    e = drv_fail(r, kn_acc_kernel_names[k]);
            drv.ctx_pop(&ignored);
            if (!e) drv.ctx[dev] = ctx;
        }
    }
    pthread_mutex_unlock(&drv_mu);
    if (e) return e;
    if ((r = drv.ctx_push(drv.ctx[dev]))) return drv_fail(r, "cuCtxPushCurrent");
    return SCDB_OK;
}

static void drv_leave(void)
{
    void *ignored;
    drv.ctx_pop(&ignored);
}

static scdb_err drv_launch(void *ctx, int kernel, unsigned grid, unsigned block, void **args)
{
    const cl_cuda_launch *l = ctx;
    CUres r = drv.launch(drv.fn[l->device][kernel], grid, 1, 1, block, 1, 1, 0, l->stream, args,
                         NULL);
    return r ? drv_fail(r, kn_acc_kernel_names[kernel]) : SCDB_OK;
}

/* the ops-table entry: `stream` carries a cl_cuda_launch (device and
 * the caller's stream), the one context the table's signature has room for */
static scdb_err cl_acc_update(const scdb_k_acc_buf *a, int n_old, const scdb_kv_cache *c,
                              const float *probs, int probs_slots, int n_new, void *scratch,
                              void *stream)
{
    const cl_cuda_launch *l = stream;
    scdb_err e;

    if (!l) return SCDB_EINVAL;
    if ((e = drv_enter(l->device))) return e;
    e = kn_acc_update_launch(a, n_old, c, probs, probs_slots, n_new, scratch, drv_launch,
                                 (void *)l);
    drv_leave();
    return e;
}

static const scdb_k_ops cl_cuda_ops = {.device = SCDB_DEV_CUDA, .acc_update = cl_acc_update};

const scdb_k_ops *cl_cuda_session_ops(void) { return &cl_cuda_ops; }

scdb_err cl_cuda_prepare(int device)
{
    scdb_err e = drv_enter(device);
    if (!e) drv_leave();
    return e;
}

scdb_err cl_cuda_alloc(int device, size_t bytes, void **out)
{
    unsigned long long p = 0;
    CUres r;
    scdb_err e;

    *out = NULL;
    if ((e = drv_enter(device))) return e;
    r = drv.mem_alloc(&p, bytes ? bytes : 1);
    drv_leave();
    if (r) return drv_fail(r, "cuMemAlloc");
    *out = (void *)(uintptr_t)p;
    return SCDB_OK;
}

void cl_cuda_free(int device, void *p)
{
    if (!p || drv_enter(device)) return;
    drv.mem_free((unsigned long long)(uintptr_t)p);
    drv_leave();
}

scdb_err cl_cuda_download(int device, void *dst, const void *src, size_t bytes)
{
    CUres r;
    scdb_err e;

    if ((e = drv_enter(device))) return e;
    r = drv.dtoh(dst, (unsigned long long)(uintptr_t)src, bytes);
    drv_leave();
    return r ? drv_fail(r, "cuMemcpyDtoH") : SCDB_OK;
}

scdb_err cl_cuda_sync(int device, void *stream)
{
    CUres r;
    scdb_err e;

    if ((e = drv_enter(device))) return e;
    r = drv.stream_sync(stream);
    drv_leave();
    return r ? drv_fail(r, "cuStreamSynchronize") : SCDB_OK;
}
