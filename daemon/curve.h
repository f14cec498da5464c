/* curve.h — CURVE authentication between the coordinator and the stages
 * (ZeroMQ CURVE + a ZAP handler, RFC 26 / RFC 27).
 *
 * A stage with a secret key is a CURVE server; its ZAP handler lets in
 * exactly the client public keys of its allow-list. The coordinator is a
 * CURVE client with its own keypair and each stage's server public key.
 * Without a ZAP handler CURVE would let in anyone who knows the server's
 * public key, so curve_server_setup() sets ZMQ_ZAP_ENFORCE_DOMAIN=1: with
 * no handler running, every peer is refused rather than let in.
 *
 * Key files: one Z85 key (40 characters) per file, a trailing newline
 * allowed; a secret key file must not be readable or writable by group or
 * others. Allow-lists: one Z85 public key per line; blank lines and lines
 * starting with "# " (or a lone "#") are comments ('#' alone is a Z85
 * character, so "#abc…" is read as a key).
 *
 * Errors: Q35_E* codes with one line in the caller's buffer naming the
 * file (and line) and what is wrong. Nothing here exits.
 */
#ifndef Q35_CURVE_H
#define Q35_CURVE_H

#include <stdbool.h>
#include <stddef.h>

#define CURVE_KEY_LEN 40            /* Z85 characters of a 32-byte key */
#define CURVE_ZAP_DOMAIN "qwen35"   /* ZMQ_ZAP_DOMAIN of the stage sockets */

typedef struct curve_key { char z85[CURVE_KEY_LEN + 1]; } curve_key;

/* Checks that text (NUL-terminated, no newline) is a 40-character Z85
 * key and copies it into *key. Messages without location. */
int curve_key_parse(const char *text, curve_key *key, char *err, size_t errsz);

/* Reads the one key in path. secret: the file must be a regular file with
 * no group/other permission bits ("…: readable by others (mode 0644):
 * chmod 600"). */
int curve_key_read(const char *path, bool secret, curve_key *key, char *err, size_t errsz);

/* The public key of a secret key (zmq_curve_public). */
int curve_key_public(const curve_key *secret, curve_key *pub, char *err, size_t errsz);

/* Reads an allow-list (see above). *keys is a malloc'd array of *n keys
 * the caller frees; an empty list is an error (it would refuse every
 * client). Messages "path:line: …". */
int curve_keys_read_list(const char *path, curve_key **keys, int *n, char *err, size_t errsz);

/* Writes prefix.key (secret, mode 0600) and prefix.pub (mode 0644) from
 * zmq_curve_keypair. Refuses to overwrite an existing file. */
int curve_keygen(const char *prefix, char *err, size_t errsz);

/* Before bind: sock becomes a CURVE server with this secret key, in
 * domain CURVE_ZAP_DOMAIN with ZMQ_ZAP_ENFORCE_DOMAIN=1. */
int curve_server_setup(void *sock, const curve_key *secret, char *err, size_t errsz);

/* Before connect: sock becomes a CURVE client with its own secret key
 * (public derived) and the server's public key. */
int curve_client_setup(void *sock, const curve_key *secret, const curve_key *server_pub,
                       char *err, size_t errsz);

/* The ZAP handler of one ZeroMQ context: a thread answering on
 * inproc://zeromq.zap.01 (bound here, before any CURVE server socket of
 * zctx binds). It allows the CURVE clients whose key is in keys[0..n)
 * (copied) in domain CURVE_ZAP_DOMAIN and refuses everything else,
 * logging each refused key once (warn, with the key in Z85).
 * curve_zap_destroy() stops the thread and closes its sockets; call it
 * before zmq_ctx_term(zctx). */
typedef struct curve_zap curve_zap;
curve_zap *curve_zap_new(void *zctx, const curve_key *keys, int n, char *err, size_t errsz);
void curve_zap_destroy(curve_zap **z);
/* Requests refused so far (any thread). */
long curve_zap_denied(const curve_zap *z);

#endif
