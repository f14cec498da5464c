/* emu_int.h — what the emulator's own files share (emu_exec.cc: fibers
 * and blocks; emu_check.cc: shadow memory and the access hooks;
 * emu_rt.cc: the runtime API). Not seen by the kernels. */
#ifndef Q35_EMU_INT_H
#define Q35_EMU_INT_H

#include "cuda_runtime.h"
#include "emu.h"

namespace q35emu {

enum fstate { F_RUN, F_WARP, F_BAR, F_DONE };

/* A fiber: one emulated thread and its saved stack pointer. */
struct fiber : q35emu_thread {
    void *sp;
    int state, lin;            /* linear thread index in the block */
    int op, arg, width;
    unsigned mask;
    uint64_t val, res;
};

/* One grid being run (shared by the worker threads that run its blocks). */
struct grid_run {
    const char *name;          /* the kernel, as its template instance prints */
    dim3 grid, block;
    size_t shm;
    thunk_fn run;
    void *closure;
};

/* Per host thread running blocks: fibers, the scheduler's stack pointer,
 * the shared-memory window and its race shadow. */
struct worker;
worker *worker_self();

/* The current device's limits (emu_rt.cc). */
const q35_emu_profile *profile();

/* Runs the grid: 0, or a cudaError_t with the report in report(). */
cudaError_t run_grid(const grid_run *g);

/* Stops the current kernel with a report (from a hook or a warp op on a
 * fiber); never returns to the caller. */
[[noreturn]] void fault(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "kernel K block (x,y,z) thread (x,y,z)" of the running fiber. */
int where(char *buf, size_t n);
int where_thread(char *buf, size_t n, int lin);

/* Shared memory of the running block: the TLS window, valid extent. */
void shm_bounds(uintptr_t *lo, uintptr_t *dyn, uintptr_t *hi);
/* Race epochs: a new block / a barrier passed (or the block's end):
 * false with the report when a read of never-written shared memory is
 * left unexplained. */
void race_block_start(size_t dyn_shm);
bool race_barrier(char *msg, size_t n);
/* A __syncwarp(mask) of the warp starting at thread warp0 completed: it
 * orders the shared accesses of the lanes it names (racecheck). */
void race_syncwarp(int warp0, unsigned mask);

/* Device heap (emu_check.cc). */
int heap_alloc(size_t n, void **p);
int heap_free(void *p);
/* Checks [p, p+n) lies in one live allocation; how = "copy"/"memset". */
cudaError_t heap_range(const void *p, size_t n, const char *how);
void heap_mark_init(const void *p, size_t n);
void heap_copy_init(void *dst, const void *src, size_t n);
bool heap_contains(const void *p);
size_t heap_used();
void heap_reset();
/* A checked access by the running fiber (atomics use it too). */
void access(uintptr_t a, size_t n, bool store, bool atomic);

/* Host threads that run blocks; the enabled checks (emu_rt.cc). */
int threads_conf();
int checks();
extern int g_checks;        /* checks(), once any API call has run */

/* The sticky error and its text (emu_rt.cc). */
void set_report(cudaError_t e, const char *text);
const char *report();

}

#endif
