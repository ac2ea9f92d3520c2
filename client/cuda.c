/* cuda.c — the client end of CUDA IPC arenas: open the broker's
 * cudaIpcMemHandle_t on the same GPU, close it when the arena goes.
 *
 * libscdb does not link the CUDA runtime (the installed library stays
 * usable on machines without one): the few entry points it needs are found
 * at first use with dlopen -- a libcudart the process already has loaded
 * first (RTLD_NOLOAD), else $SCDB_CUDART, libcudart.so, .so.13, .so.12.
 * Every runtime shares the driver's primary context of a device, so memory
 * opened here is usable from the application's own CUDA code on that
 * device.  The caller's current device is restored after each call. */
#include "libscdb_int.h"

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

scdb_err scdb_cl_cuda_open(scdb *h, const uint8_t *handle, size_t len, int ordinal, const char *pci,
                       void **dev_ptr, int *device)
{
    ipc_handle ih;
    int prev = 0, dev, e;
    void *p = NULL;

    *dev_ptr = NULL;
    if (len != sizeof ih) return scdb_cl_fail(h, SCDB_EPROTO, "CUDA IPC handle of %zu bytes", len);
    pthread_once(&rt_once, rt_load);
    if (!rt.lib) return scdb_cl_fail(h, SCDB_EUNSUPPORTED, "%s", rt.err);
    memcpy(&ih, handle, sizeof ih);
    dev = find_device(ordinal, pci);
    if (rt.get_device(&prev)) prev = -1;
    if ((e = rt.set_device(dev)))
        return scdb_cl_fail(h, SCDB_EDEVICE, "cudaSetDevice(%d) (broker's device %d, %s): %s", dev,
                        ordinal, pci && *pci ? pci : "no bus id", cuda_str(e));
    e = rt.ipc_open(&p, ih, CUDA_IPC_LAZY_ENABLE_PEER_ACCESS);
    if (prev >= 0 && prev != dev) rt.set_device(prev);
    if (e)
        return scdb_cl_fail(h, SCDB_EDEVICE, "cudaIpcOpenMemHandle on device %d: %s (same host and "
                        "GPU as the broker? not in the broker's own process?)", dev, cuda_str(e));
    *dev_ptr = p;
    *device = dev;
    return SCDB_OK;
}

void scdb_cl_cuda_close(void *dev_ptr, int device)
{
    int prev = -1;

    if (!dev_ptr || !rt.lib) return;
    if (rt.get_device(&prev)) prev = -1;
    rt.set_device(device);
    rt.ipc_close(dev_ptr);
    if (prev >= 0 && prev != device) rt.set_device(prev);
}
