/* Who else can stand in for an ipc:// endpoint. See endpoint.h. */
#include "endpoint.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int endpoint_ipc_exposed(const char *ep, char *msg, size_t n)
{
    if (n) msg[0] = 0;
    if (!ep || strncmp(ep, "ipc://", 6)) return 0;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", ep + 6);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");     /* a relative name: the working directory */
    else if (slash == dir) dir[1] = 0;              /* "/name": the root */
    else *slash = 0;
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode) || !(st.st_mode & S_IWOTH)) return 0;
    snprintf(msg, n, "%s (mode %04o) is writable by any local user", dir, (unsigned)(st.st_mode & 07777));
    return 1;
}
