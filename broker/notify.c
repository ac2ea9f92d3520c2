/* notify.c — the service manager's readiness protocol (sd_notify(3), from
 * libsystemd): READY=1 once the event loop serves, RELOADING=1 / READY=1
 * around a SIGHUP reload, STOPPING=1 when the drain starts.  Without
 * $NOTIFY_SOCKET (not started by systemd) each call does nothing. */
#include "broker_int.h"

#include <systemd/sd-daemon.h>

void bk_notify(const char *state)
{
    int rc = sd_notify(0, state);
    if (rc < 0) scdb_debug("sd_notify: error %d", rc);
}
