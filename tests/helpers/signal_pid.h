/* signal_pid.h — kill(2) for tests, refusing pid <= 0.
 *
 * kill(-1, sig) signals every process the user may signal and kill(0, sig)
 * the whole process group: a test whose child pid variable was reset to -1
 * (or never set) must fail, not take the machine's other work down with it.
 * Include after cmocka.h. */
#ifndef SCDB_TEST_SIGNAL_PID_H
#define SCDB_TEST_SIGNAL_PID_H

#include <signal.h>
#include <stdio.h>
#include <sys/types.h>

static inline int signal_pid(pid_t pid, int sig)
{
    if (pid <= 0) {
        print_error("refusing kill(%d, %d): not a child's pid\n", (int)pid, sig);
        fail();
    }
    return kill(pid, sig);
}

#endif
