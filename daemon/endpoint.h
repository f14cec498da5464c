/* endpoint.h — who else on this host can stand in for an ipc:// endpoint
 * (endpoint.c). A daemon's socket file is absent while it is down (libzmq
 * removes it at close); a directory any local user may write to (/tmp,
 * sticky or not) lets one bind that path first and be connected to in the
 * daemon's place. The installed layout avoids it: /run/qwen35, root:qwen35
 * 0770. */
#ifndef Q35_ENDPOINT_H
#define Q35_ENDPOINT_H

#include <stddef.h>

/* 1 when ep is ipc://PATH and PATH's directory is writable by others,
 * with "DIR (mode 1777) is writable by any local user" in msg; else 0
 * (tcp://, inproc://, a private or missing directory). */
int endpoint_ipc_exposed(const char *ep, char *msg, size_t n);

#endif
