# shellcheck shell=bash
# Shell functions shared by .ci/slurm-up and .ci/slurm-down (sourced).

pid_of() { cat "$1" 2>/dev/null; }

# A zombie counts as gone: a daemon's parent is init, which reaps when it likes.
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}
