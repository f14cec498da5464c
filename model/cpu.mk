# CPU backend: the float loops in cpu_vec.c are vectorised per ISA clone.
$(BUILD)/obj/model/cpu_vec.o: XCFLAGS += -O3
