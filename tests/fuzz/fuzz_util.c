/* fuzz_util.c — fuzz.h's helpers. */
#define _GNU_SOURCE
#include "fuzz.h"

#include <sys/mman.h>
#include <unistd.h>

int fuzz_memfd(const uint8_t *data, size_t size, char *path, size_t cap)
{
    int fd = memfd_create("scdb-fuzz", MFD_CLOEXEC);
    size_t off = 0;

    FUZZ_CHECK(fd >= 0);
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        FUZZ_CHECK(w > 0);
        off += (size_t)w;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}
