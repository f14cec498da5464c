#!/bin/sh
# The 60-second chaos run (tests/chaos.sh; `make chaos` is the 4-minute
# one): 16 streaming clients through 3 stages while 12 faults (SIGKILL,
# SIGSTOP, SIGTERM of stages, SIGKILL of the coordinator) hit; every
# request must complete identical to its undisturbed run.
exec bash "$(dirname "$0")/chaos.sh" 60 12
