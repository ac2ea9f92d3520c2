/* device.c — choosing the compute device (`--device auto|cpu|cuda`): parse
 * the preference, resolve it against this build and the devices that
 * answer, and log which device was chosen and why (kernels.h). */
#include "kernels.h"

#include <stdio.h>
#include <string.h>

static const char *const PREF_NAMES[] = {"auto", "cpu", "cuda"};

scdb_err scdb_device_parse(const char *s, scdb_device_pref *out)
{
    if (!s || !out) return SCDB_EINVAL;
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, PREF_NAMES[i])) { *out = (scdb_device_pref)i; return SCDB_OK; }
    return SCDB_EINVAL;
}

const char *scdb_device_pref_name(scdb_device_pref p)
{
    return (unsigned)p < 3 ? PREF_NAMES[p] : "?";
}

const char *scdb_device_name(scdb_device d) { return d == SCDB_DEV_CUDA ? "cuda" : "cpu"; }

static int cuda_built(void)
{
#ifdef SCDB_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}

scdb_err scdb_device_resolve(scdb_device_pref pref, scdb_device *out, char *why, size_t whylen)
{
    char msg[384], dev[300] = "";
    scdb_err rc = SCDB_OK;
    int count = 0;
    scdb_device d = SCDB_DEV_CPU;

    if (!out || (unsigned)pref > SCDB_DEVPREF_CUDA) return SCDB_EINVAL;
    if (pref != SCDB_DEVPREF_CPU && cuda_built()) {
        scdb_k_cuda_info info;
        count = scdb_k_cuda_device_count();
        if (count > 0 && scdb_k_cuda_device_info(0, &info) == SCDB_OK)
            snprintf(dev, sizeof dev, "CUDA device 0 (%s, %.0f GiB)", info.name,
                     (double)info.total_mem / (1024.0 * 1024.0 * 1024.0));
        else if (count > 0)
            snprintf(dev, sizeof dev, "CUDA device 0");
    }
    switch (pref) {
    case SCDB_DEVPREF_CPU:
        snprintf(msg, sizeof msg, "cpu requested: CPU");
        break;
    case SCDB_DEVPREF_AUTO:
        if (!cuda_built())
            snprintf(msg, sizeof msg, "auto: this build has no CUDA backend: CPU");
        else if (count <= 0)
            snprintf(msg, sizeof msg, "auto: no CUDA device answers: CPU");
        else {
            snprintf(msg, sizeof msg, "auto: %s answers: CUDA", dev);
            d = SCDB_DEV_CUDA;
        }
        break;
    default:
        if (!cuda_built()) {
            snprintf(msg, sizeof msg, "cuda requested but this build has no CUDA backend "
                                      "(nvcc not found or -DSCDB_CUDA=OFF)");
            rc = SCDB_EUNSUPPORTED;
        } else if (count <= 0) {
            snprintf(msg, sizeof msg, "cuda requested but no CUDA device answers");
            rc = SCDB_EDEVICE;
        } else {
            snprintf(msg, sizeof msg, "cuda requested: %s", dev);
            d = SCDB_DEV_CUDA;
        }
        break;
    }
    if (rc) scdb_error("device: %s", msg);
    else scdb_info("device: %s", msg);
    if (why && whylen) snprintf(why, whylen, "%s", msg);
    if (!rc) *out = d;
    return rc;
}

scdb_err scdb_device_resolve_cpu_only(scdb_device_pref pref, const char *what, scdb_device *out,
                                      char *why, size_t whylen)
{
    char msg[384];
    scdb_err rc = SCDB_OK;

    if (!out || (unsigned)pref > SCDB_DEVPREF_CUDA) return SCDB_EINVAL;
    if (!what || !*what) what = "this command";
    switch (pref) {
    case SCDB_DEVPREF_CPU:
        snprintf(msg, sizeof msg, "cpu requested: CPU");
        break;
    case SCDB_DEVPREF_AUTO:
        snprintf(msg, sizeof msg, "auto: %s has no CUDA path yet: CPU", what);
        break;
    default:
        snprintf(msg, sizeof msg, "cuda requested but %s has no CUDA path yet: use --device "
                                  "cpu or auto", what);
        rc = SCDB_EUNSUPPORTED;
        break;
    }
    if (rc) scdb_error("device: %s", msg);
    else scdb_info("device: %s", msg);
    if (why && whylen) snprintf(why, whylen, "%s", msg);
    if (!rc) *out = SCDB_DEV_CPU;
    return rc;
}
