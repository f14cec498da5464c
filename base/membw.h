/* membw.h — the machine's memory read bandwidth, measured in-process.
 *
 * Every benchmark in the project reports its speed as a share of this
 * figure, measured in the same run (the machine is shared, so an absolute
 * GB/s from another run means little).
 */
#ifndef Q35_MEMBW_H
#define Q35_MEMBW_H

#include <stddef.h>

/* Read bandwidth in GB/s (1e9 bytes/s) of `threads` threads (>= 1) each
 * streaming its share of a `bytes` buffer (much larger than the caches:
 * 1 GiB is a good default) with wide vector loads; the best of `passes`
 * passes. With one thread a pass is timed by the thread's CPU time (on a
 * shared machine, time the scheduler gives to others is not counted);
 * with several, by the wall clock. The buffer is allocated, touched and freed inside. Returns 0 and
 * the figure in *gbps, or a Q35_E* code with a message in err. */
int membw_read(size_t bytes, int threads, int passes, double *gbps,
               char *err, size_t errsz);

#endif
