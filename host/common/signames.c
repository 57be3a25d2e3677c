#include "signames.h"

#include <signal.h>
#include <stddef.h>
#include <string.h>

static const struct { const char *name; int signo; } signal_names[] = {
  {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"ILL", SIGILL},
  {"TRAP", SIGTRAP}, {"ABRT", SIGABRT}, {"BUS", SIGBUS},   {"FPE", SIGFPE},
  {"KILL", SIGKILL}, {"USR1", SIGUSR1}, {"SEGV", SIGSEGV}, {"USR2", SIGUSR2},
  {"PIPE", SIGPIPE}, {"ALRM", SIGALRM}, {"TERM", SIGTERM}, {"CHLD", SIGCHLD},
  {"CONT", SIGCONT}, {"STOP", SIGSTOP}, {"TSTP", SIGTSTP}, {"TTIN", SIGTTIN},
  {"TTOU", SIGTTOU}, {"URG", SIGURG},   {"XCPU", SIGXCPU}, {"XFSZ", SIGXFSZ},
  {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF}, {"WINCH", SIGWINCH},
  {"IO", SIGIO},     {"PWR", SIGPWR},   {"SYS", SIGSYS},
};

#define N_SIGNALS (sizeof signal_names / sizeof signal_names[0])

int signal_from_name(const char *name) {
  if (strncmp(name, "SIG", 3) == 0) name += 3;
  for (size_t i = 0; i < N_SIGNALS; i++)
    if (strcmp(signal_names[i].name, name) == 0) return signal_names[i].signo;
  return 0;
}

const char *signal_to_name(int signo) {
  for (size_t i = 0; i < N_SIGNALS; i++)
    if (signal_names[i].signo == signo) return signal_names[i].name;
  return NULL;
}
