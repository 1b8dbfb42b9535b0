/* Dumps on a signal (PYCOLL_TRACE_SIGNAL, flight_ring.h). The handler only writes a byte to a pipe -- about all a
 * signal handler may do -- and a thread of its own, asleep on the pipe's other end, writes the dumps: so a rank
 * stuck inside a wait in C, the GIL released, still dumps, without the interpreter's help. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "comm/flight_ring.h"
#include "common/settings.h"

static int wake_pipe[2] = {-1, -1};

static void on_signal(int signo)
{
    (void)signo;
    const int saved = errno;
    const char byte = 1;
    ssize_t ignored = write(wake_pipe[1], &byte, 1); /* full: a dump is already due */
    (void)ignored;
    errno = saved;
}

static void *dumper_main(void *arg)
{
    (void)arg;
    for (;;) {
        char bytes[64];
        const ssize_t n = read(wake_pipe[0], bytes, sizeof bytes); /* every signal so far: one dump */
        if (n > 0)
            flight_dump_all("signal");
        else if (n == 0 || errno != EINTR)
            return NULL;
    }
}

static int signal_number(const char *name)
{
    if (!name || strcmp(name, "off") == 0)
        return 0;
    return strcmp(name, "SIGUSR1") == 0 ? SIGUSR1 : SIGUSR2;
}

static void install(void)
{
    const int signo = signal_number(setting_text(SETTING_TRACE_SIGNAL));
    struct sigaction old;
    /* Only where there is a directory to dump into, and never in place of the program's own handler. */
    if (!signo || !setting_text(SETTING_TRACE_DIR) || sigaction(signo, NULL, &old) != 0 || old.sa_handler != SIG_DFL)
        return;
    if (pipe(wake_pipe) != 0)
        return;
    for (int i = 0; i < 2; i++)
        fcntl(wake_pipe[i], F_SETFD, FD_CLOEXEC);
    fcntl(wake_pipe[1], F_SETFL, O_NONBLOCK);
    /* The thread takes no signal: they stay the program's threads' to handle. */
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    pthread_t thread;
    const int started = pthread_create(&thread, NULL, dumper_main, NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    if (!started) {
        close(wake_pipe[0]);
        close(wake_pipe[1]);
        return;
    }
    pthread_detach(thread);
    struct sigaction action = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
    sigemptyset(&action.sa_mask);
    sigaction(signo, &action, NULL);
}

static pthread_once_t installed = PTHREAD_ONCE_INIT;

void flight_signal_install(void) { pthread_once(&installed, install); }
