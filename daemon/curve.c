/* CURVE keys, socket setup and the ZAP handler. See curve.h. */
#include "curve.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "common.h"
#include "log.h"

/* A DRAFT option in zmq.h 4.3 (value fixed since 4.2.3); Debian's libzmq5
 * is built with drafts. Where the library lacks it, setsockopt fails and
 * curve_server_setup refuses rather than run without the guarantee. */
#ifndef ZMQ_ZAP_ENFORCE_DOMAIN
#define ZMQ_ZAP_ENFORCE_DOMAIN 93
#endif

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define ZAP_SEEN_MAX 256   /* refused keys remembered, to log each once */

static const char z85_chars[] =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

int curve_key_parse(const char *text, curve_key *key, char *err, size_t errsz)
{
    size_t len = strlen(text);
    if (len != CURVE_KEY_LEN)
        return q35_err(err, errsz, Q35_EINVAL,
                       "%zu characters; a CURVE key is %d (Z85 of 32 bytes, from qwen35-keygen)",
                       len, CURVE_KEY_LEN);
    for (size_t i = 0; i < len; i++)
        if (!strchr(z85_chars, text[i]) || !text[i])
            return q35_err(err, errsz, Q35_EINVAL, "character %zu (0x%02x) is not Z85", i + 1,
                           (unsigned char)text[i]);
    uint8_t bin[32];
    if (!zmq_z85_decode(bin, text))   /* also catches values past 2^32 per group */
        return q35_err(err, errsz, Q35_EINVAL, "not a valid Z85 encoding");
    memcpy(key->z85, text, CURVE_KEY_LEN + 1);
    return 0;
}

/* The file's text without its trailing newline / whitespace, in buf. */
static int read_small(const char *path, bool secret, char *buf, size_t bufsz, char *err, size_t errsz)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return q35_err(err, errsz, Q35_EIO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return q35_err(err, errsz, Q35_EINVAL, "%s: not a regular file", path);
    }
    if (secret && (st.st_mode & 077)) {
        close(fd);
        return q35_err(err, errsz, Q35_EINVAL, "%s: secret key %s by others (mode %04o): chmod 600 %s",
                       path, (st.st_mode & 044) ? "readable" : "accessible",
                       (unsigned)(st.st_mode & 07777), path);
    }
    ssize_t got = read(fd, buf, bufsz - 1);
    int e = errno;
    close(fd);
    if (got < 0)
        return q35_err(err, errsz, Q35_EIO, "%s: %s", path, strerror(e));
    buf[got] = 0;
    while (got > 0 && (buf[got - 1] == '\n' || buf[got - 1] == '\r' || buf[got - 1] == ' ' ||
                       buf[got - 1] == '\t'))
        buf[--got] = 0;
    return 0;
}

int curve_key_read(const char *path, bool secret, curve_key *key, char *err, size_t errsz)
{
    char buf[128], msg[256];
    int rc = read_small(path, secret, buf, sizeof buf, err, errsz);
    if (rc)
        return rc;
    if (strlen(buf) >= sizeof buf - 2)
        return q35_err(err, errsz, Q35_EINVAL, "%s: not a key file: more than one %d-character Z85 key",
                       path, CURVE_KEY_LEN);
    if (curve_key_parse(buf, key, msg, sizeof msg))
        return q35_err(err, errsz, Q35_EINVAL, "%s: not a CURVE %s key: %s", path,
                       secret ? "secret" : "public", msg);
    return 0;
}

int curve_key_public(const curve_key *secret, curve_key *pub, char *err, size_t errsz)
{
    if (zmq_curve_public(pub->z85, secret->z85) != 0)
        return q35_err(err, errsz, Q35_EINVAL, "cannot derive the public key: %s",
                       zmq_strerror(errno));
    return 0;
}

int curve_keys_read_list(const char *path, curve_key **keys, int *n, char *err, size_t errsz)
{
    *keys = NULL;
    *n = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return q35_err(err, errsz, Q35_EIO, "%s: %s", path, strerror(errno));
    char line[256], msg[256];
    int lineno = 0, cap = 0, rc = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ' ||
                       line[len - 1] == '\t'))
            line[--len] = 0;
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p || (p[0] == '#' && (p[1] == 0 || p[1] == ' ' || p[1] == '\t')))
            continue;
        char *sp = strpbrk(p, " \t");   /* "KEY  # note" */
        if (sp) {
            char *q = sp;
            while (*q == ' ' || *q == '\t') q++;
            if (*q != '#') {
                rc = q35_err(err, errsz, Q35_EINVAL, "%s:%d: more than one key on the line", path, lineno);
                break;
            }
            *sp = 0;
        }
        curve_key k;
        if (curve_key_parse(p, &k, msg, sizeof msg)) {
            rc = q35_err(err, errsz, Q35_EINVAL, "%s:%d: not a CURVE public key: %s", path, lineno, msg);
            break;
        }
        if (*n == cap) {
            cap = cap ? 2 * cap : 8;
            curve_key *nk = realloc(*keys, (size_t)cap * sizeof *nk);
            if (!nk) {
                rc = q35_err(err, errsz, Q35_ENOMEM, "out of memory");
                break;
            }
            *keys = nk;
        }
        (*keys)[(*n)++] = k;
    }
    if (!rc && ferror(f))
        rc = q35_err(err, errsz, Q35_EIO, "%s: read error", path);
    fclose(f);
    if (!rc && *n == 0)
        rc = q35_err(err, errsz, Q35_EINVAL, "%s: no client key listed (every client would be refused)",
                     path);
    if (rc) {
        free(*keys);
        *keys = NULL;
        *n = 0;
    }
    return rc;
}

static int write_key(const char *path, const char *z85, mode_t mode, char *err, size_t errsz)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0)
        return q35_err(err, errsz, Q35_EIO, "%s: %s", path,
                       errno == EEXIST ? "exists (not overwritten)" : strerror(errno));
    char line[CURVE_KEY_LEN + 2];
    snprintf(line, sizeof line, "%s\n", z85);
    /* fchmod: the umask must not widen or narrow what we promise */
    bool ok = fchmod(fd, mode) == 0 && write(fd, line, CURVE_KEY_LEN + 1) == CURVE_KEY_LEN + 1;
    int e = errno;
    ok = close(fd) == 0 && ok;
    if (!ok) {
        unlink(path);
        return q35_err(err, errsz, Q35_EIO, "%s: %s", path, strerror(e));
    }
    return 0;
}

int curve_keygen(const char *prefix, char *err, size_t errsz)
{
    curve_key pub, sec;
    if (zmq_curve_keypair(pub.z85, sec.z85) != 0)
        return q35_err(err, errsz, Q35_EIO, "zmq_curve_keypair: %s (libzmq without CURVE?)",
                       zmq_strerror(errno));
    char kpath[4096], ppath[4096];
    if (snprintf(kpath, sizeof kpath, "%s.key", prefix) >= (int)sizeof kpath ||
        snprintf(ppath, sizeof ppath, "%s.pub", prefix) >= (int)sizeof ppath)
        return q35_err(err, errsz, Q35_EINVAL, "%s: path too long", prefix);
    if (access(ppath, F_OK) == 0)
        return q35_err(err, errsz, Q35_EIO, "%s: exists (not overwritten)", ppath);
    int rc = write_key(kpath, sec.z85, 0600, err, errsz);
    if (rc)
        return rc;
    rc = write_key(ppath, pub.z85, 0644, err, errsz);
    if (rc)
        unlink(kpath);
    explicit_bzero(&sec, sizeof sec);
    return rc;
}

int curve_server_setup(void *sock, const curve_key *secret, char *err, size_t errsz)
{
    int one = 1;
    if (zmq_setsockopt(sock, ZMQ_ZAP_ENFORCE_DOMAIN, &one, sizeof one))
        return q35_err(err, errsz, Q35_EIO, "ZMQ_ZAP_ENFORCE_DOMAIN: %s (libzmq built without "
                       "its DRAFT API cannot refuse peers when no ZAP handler answers)",
                       zmq_strerror(errno));
    if (zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, CURVE_ZAP_DOMAIN, strlen(CURVE_ZAP_DOMAIN)) ||
        zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, secret->z85, CURVE_KEY_LEN + 1))
        return q35_err(err, errsz, Q35_EIO, "CURVE server setup: %s", zmq_strerror(errno));
    return 0;
}

int curve_client_setup(void *sock, const curve_key *secret, const curve_key *server_pub,
                       char *err, size_t errsz)
{
    curve_key pub;
    int rc = curve_key_public(secret, &pub, err, errsz);
    if (rc)
        return rc;
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server_pub->z85, CURVE_KEY_LEN + 1) ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, pub.z85, CURVE_KEY_LEN + 1) ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, secret->z85, CURVE_KEY_LEN + 1))
        return q35_err(err, errsz, Q35_EIO, "CURVE client setup: %s", zmq_strerror(errno));
    return 0;
}

/* ---- ZAP handler -------------------------------------------------------------- */

struct curve_zap {
    void *rep;                 /* REP on ZAP_ENDPOINT, owned by the thread once started */
    void *ctl_in, *ctl_out;    /* PAIR: ctl_out (ours) tells the thread to stop */
    pthread_t thread;
    bool started;
    int n_keys;
    uint8_t (*keys)[32];       /* [n_keys] allowed client keys, binary */
    int n_seen;
    bool logged_other;
    uint8_t seen[ZAP_SEEN_MAX][32];   /* refused keys already logged */
    atomic_long denied;
};

static bool key_allowed(const curve_zap *z, const uint8_t *k)
{
    for (int i = 0; i < z->n_keys; i++)
        if (!memcmp(z->keys[i], k, 32)) return true;
    return false;
}

/* Logs a refused key the first time it is seen (a peer retrying every
 * reconnect interval must not flood the journal). */
static void log_denied(curve_zap *z, const uint8_t *k, const char *addr)
{
    for (int i = 0; i < z->n_seen; i++)
        if (!memcmp(z->seen[i], k, 32)) return;
    if (z->n_seen < ZAP_SEEN_MAX)
        memcpy(z->seen[z->n_seen++], k, 32);
    char z85[CURVE_KEY_LEN + 1];
    zmq_z85_encode(z85, k, 32);
    q35_log_warn("CURVE: refused client key %s from %s: not in curve-clients", z85,
                 addr[0] ? addr : "?");
}

/* One request (RFC 27 frames: version, request id, domain, address,
 * identity, mechanism, credentials...), one reply. */
static void zap_answer(curve_zap *z)
{
    enum { MAXF = 8 };
    zmq_msg_t f[MAXF];
    int nf = 0, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, z->rep, 0) < 0) {
            zmq_msg_close(&m);
            for (int i = 0; i < nf; i++) zmq_msg_close(&f[i]);
            return;
        }
        more = zmq_msg_more(&m);
        if (nf < MAXF) f[nf++] = m;
        else zmq_msg_close(&m);
    }
#define FR(i) ((const char *)zmq_msg_data(&f[i]))
#define FL(i) zmq_msg_size(&f[i])
    const char *status = "400", *text = "refused";
    char addr[64] = "";
    if (nf >= 4 && FL(3) < sizeof addr) {
        memcpy(addr, FR(3), FL(3));
        addr[FL(3)] = 0;
    }
    bool ok_frames = nf >= 6 && FL(0) == 3 && !memcmp(FR(0), "1.0", 3);
    bool domain_ok = ok_frames && FL(2) == strlen(CURVE_ZAP_DOMAIN) &&
                     !memcmp(FR(2), CURVE_ZAP_DOMAIN, FL(2));
    bool curve = ok_frames && FL(5) == 5 && !memcmp(FR(5), "CURVE", 5);
    if (curve && domain_ok && nf >= 7 && FL(6) == 32) {
        const uint8_t *k = zmq_msg_data(&f[6]);
        if (key_allowed(z, k)) {
            status = "200";
            text = "OK";
        } else {
            atomic_fetch_add(&z->denied, 1);
            log_denied(z, k, addr);
            text = "client key not allowed";
        }
    } else {
        atomic_fetch_add(&z->denied, 1);
        if (!z->logged_other) {   /* once: a misconfigured socket retries forever */
            z->logged_other = true;
            q35_log_warn("CURVE: refused a %s request from %s (domain or mechanism not CURVE in %s)",
                         ok_frames ? "ZAP" : "malformed ZAP", addr[0] ? addr : "?", CURVE_ZAP_DOMAIN);
        }
        text = "CURVE required";
    }
    /* reply: version, request id (echoed), status, text, user id, metadata */
    const char *ver = "1.0";
    bool sent = zmq_send(z->rep, ver, 3, ZMQ_SNDMORE) >= 0 &&
                zmq_send(z->rep, nf >= 2 ? FR(1) : "", nf >= 2 ? FL(1) : 0, ZMQ_SNDMORE) >= 0 &&
                zmq_send(z->rep, status, 3, ZMQ_SNDMORE) >= 0 &&
                zmq_send(z->rep, text, strlen(text), ZMQ_SNDMORE) >= 0 &&
                zmq_send(z->rep, "", 0, ZMQ_SNDMORE) >= 0 && zmq_send(z->rep, "", 0, 0) >= 0;
    if (!sent)
        q35_log_warn("CURVE: ZAP reply: %s", zmq_strerror(errno));
#undef FR
#undef FL
    for (int i = 0; i < nf; i++) zmq_msg_close(&f[i]);
}

static void *zap_main(void *arg)
{
    curve_zap *z = arg;
    for (;;) {
        zmq_pollitem_t it[2] = { { .socket = z->rep, .events = ZMQ_POLLIN },
                                 { .socket = z->ctl_in, .events = ZMQ_POLLIN } };
        if (zmq_poll(it, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (it[1].revents & ZMQ_POLLIN)
            break;
        if (it[0].revents & ZMQ_POLLIN)
            zap_answer(z);
    }
    /* the thread owns these two: close them where they were used */
    zmq_close(z->rep);
    zmq_close(z->ctl_in);
    z->rep = z->ctl_in = NULL;
    return NULL;
}

curve_zap *curve_zap_new(void *zctx, const curve_key *keys, int n, char *err, size_t errsz)
{
    curve_zap *z = calloc(1, sizeof *z);
    if (!z || !(z->keys = calloc((size_t)(n > 0 ? n : 1), 32))) {
        free(z);
        q35_err(err, errsz, Q35_ENOMEM, "out of memory");
        return NULL;
    }
    atomic_init(&z->denied, 0);
    for (int i = 0; i < n; i++)
        if (!zmq_z85_decode(z->keys[i], keys[i].z85)) {
            q35_err(err, errsz, Q35_EINVAL, "client key %d is not Z85", i + 1);
            goto fail;
        }
    z->n_keys = n;
    char ctl[64];
    snprintf(ctl, sizeof ctl, "inproc://q35-zap-ctl-%p", (void *)z);
    int linger = 0;
    z->rep = zmq_socket(zctx, ZMQ_REP);
    z->ctl_in = zmq_socket(zctx, ZMQ_PAIR);
    z->ctl_out = zmq_socket(zctx, ZMQ_PAIR);
    if (!z->rep || !z->ctl_in || !z->ctl_out ||
        zmq_setsockopt(z->rep, ZMQ_LINGER, &linger, sizeof linger) ||
        zmq_setsockopt(z->ctl_in, ZMQ_LINGER, &linger, sizeof linger) ||
        zmq_setsockopt(z->ctl_out, ZMQ_LINGER, &linger, sizeof linger) ||
        zmq_bind(z->ctl_in, ctl) || zmq_connect(z->ctl_out, ctl)) {
        q35_err(err, errsz, Q35_EIO, "ZAP handler sockets: %s", zmq_strerror(errno));
        goto fail;
    }
    if (zmq_bind(z->rep, ZAP_ENDPOINT) != 0) {
        q35_err(err, errsz, Q35_EIO, "ZAP handler: bind %s: %s", ZAP_ENDPOINT,
                errno == EADDRINUSE ? "another handler runs in this context" : zmq_strerror(errno));
        goto fail;
    }
    int rc = pthread_create(&z->thread, NULL, zap_main, z);
    if (rc) {
        q35_err(err, errsz, Q35_EIO, "ZAP handler thread: %s", strerror(rc));
        goto fail;
    }
    z->started = true;
    return z;
fail:
    curve_zap_destroy(&z);
    return NULL;
}

void curve_zap_destroy(curve_zap **pz)
{
    curve_zap *z = *pz;
    if (!z)
        return;
    if (z->started) {
        zmq_send(z->ctl_out, "", 0, 0);
        pthread_join(z->thread, NULL);
    } else {
        if (z->rep) zmq_close(z->rep);
        if (z->ctl_in) zmq_close(z->ctl_in);
    }
    if (z->ctl_out)
        zmq_close(z->ctl_out);
    free(z->keys);
    free(z);
    *pz = NULL;
}

long curve_zap_denied(const curve_zap *z)
{
    return atomic_load(&((curve_zap *)z)->denied);
}
