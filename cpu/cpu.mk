# CPU backend: the float loops in cpu_vec.c are vectorised per ISA clone.
FILE_CFLAGS.cpu/cpu_vec := -O3
