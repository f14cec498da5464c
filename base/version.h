/* version.h — what every program's --version prints: the release, the
 * git commit and how it was built (compiler, optimisation, CUDA archs).
 *
 * The release, commit, -O level and CUDA archs come from the Makefile
 * (base/version.mk writes $(BUILD)/gen/q35_version.h, rewritten only when
 * one of them changes, so that a build rebuilds this one file at most).
 */
#ifndef Q35_VERSION_H
#define Q35_VERSION_H

#include <stddef.h>

/* One line without a newline into buf[n], returned: "qwen35-stage 0.7.0
 * (git 214a7e5, built with gcc 12.2.0, -O2, CUDA archs 75 80 86 89 90)",
 * or "..., no CUDA)" for a build without it. prog: the program's name. */
const char *version_line(const char *prog, char *buf, size_t n);

/* That line and a newline on stdout (what --version prints). */
void version_print(const char *prog);

#endif
