/* CURVE between coordinator and stages (daemon/curve.c): key files and
 * their validation, allow-lists, and the ZAP handler at the socket level
 * (an allowed client gets through; an unlisted key, a plaintext client
 * and any client of a server without a handler do not). Also the CURVE
 * options of both daemons' config. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include <zmq.h>

#include "common.h"
#include "log.h"
#include "../daemon/cfg.h"
#include "../daemon/curve.h"
#include "support.h"

static char g_dir[] = "/tmp/q35-test-curve-XXXXXX";
static char g_model[512];
static int g_n_ep;

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(g_dir)) return -1;
    ts_golden(g_model, sizeof g_model, "models/tiny-Q8_0.gguf");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return ts_rm_rf(g_dir);
}

static const char *path_in(const char *name)
{
    static char buf[4][300];
    static int i;
    char *p = buf[i++ % 4];
    snprintf(p, 300, "%s/%s", g_dir, name);
    return p;
}

static const char *write_file(const char *name, const char *text, mode_t mode)
{
    const char *p = path_in(name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(chmod(p, mode), 0);
    return p;
}

/* err contains every needle. */
static void assert_err_has(const char *err, const char *a, const char *b)
{
    if (!strstr(err, a) || (b && !strstr(err, b)))
        fail_msg("error '%s' lacks '%s' or '%s'", err, a, b ? b : "");
    assert_null(strchr(err, '\n'));
}

/* ---- keys ------------------------------------------------------------------- */

static void keygen_writes_a_pair(void **state)
{
    (void)state;
    char err[Q35_ERRSZ] = "";
    char prefix[300];
    snprintf(prefix, sizeof prefix, "%s/gen", g_dir);
    assert_int_equal(curve_keygen(prefix, err, sizeof err), 0);
    struct stat st;
    assert_int_equal(stat(path_in("gen.key"), &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(stat(path_in("gen.pub"), &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    curve_key sec, pub, derived;
    assert_int_equal(curve_key_read(path_in("gen.key"), true, &sec, err, sizeof err), 0);
    assert_int_equal(curve_key_read(path_in("gen.pub"), false, &pub, err, sizeof err), 0);
    assert_int_equal(curve_key_public(&sec, &derived, err, sizeof err), 0);
    assert_string_equal(pub.z85, derived.z85);
    /* never overwrites */
    assert_int_equal(curve_keygen(prefix, err, sizeof err), Q35_EIO);
    assert_err_has(err, "gen.", "exists (not overwritten)");
}

static void key_files_refused(void **state)
{
    (void)state;
    char pubz[41], secz[41], err[Q35_ERRSZ];
    assert_int_equal(zmq_curve_keypair(pubz, secz), 0);
    curve_key k;
    char text[128];

    /* wrong length */
    snprintf(text, sizeof text, "%.39s\n", pubz);
    const char *p = write_file("short.pub", text, 0644);
    assert_int_equal(curve_key_read(p, false, &k, err, sizeof err), Q35_EINVAL);
    assert_err_has(err, "short.pub: not a CURVE public key: 39 characters", "is 40");

    /* not Z85: ',' is outside the alphabet */
    snprintf(text, sizeof text, "%.20s,%.19s\n", pubz, pubz + 21);
    p = write_file("bad.pub", text, 0644);
    assert_int_equal(curve_key_read(p, false, &k, err, sizeof err), Q35_EINVAL);
    assert_err_has(err, "bad.pub: not a CURVE public key: character 21", "is not Z85");

    /* a secret key anyone in the group can read */
    snprintf(text, sizeof text, "%s\n", secz);
    p = write_file("open.key", text, 0640);
    assert_int_equal(curve_key_read(p, true, &k, err, sizeof err), Q35_EINVAL);
    assert_err_has(err, "open.key: secret key readable by others (mode 0640)", "chmod 600");
    p = write_file("world.key", text, 0604);
    assert_int_equal(curve_key_read(p, true, &k, err, sizeof err), Q35_EINVAL);
    assert_err_has(err, "readable by others (mode 0604)", NULL);

    /* the same text, private: fine; and the newline is optional */
    p = write_file("ok.key", secz, 0600);
    assert_int_equal(curve_key_read(p, true, &k, err, sizeof err), 0);
    assert_string_equal(k.z85, secz);

    /* two keys in one file, a missing file */
    snprintf(text, sizeof text, "%s\n%s\n", pubz, pubz);
    p = write_file("two.pub", text, 0644);
    assert_int_equal(curve_key_read(p, false, &k, err, sizeof err), Q35_EINVAL);
    assert_err_has(err, "two.pub: not a CURVE public key", "characters");
    assert_int_equal(curve_key_read(path_in("none.pub"), false, &k, err, sizeof err), Q35_EIO);
    assert_err_has(err, "none.pub: No such file", NULL);
}

static void allow_list(void **state)
{
    (void)state;
    char a[41], b[41], s[41], err[Q35_ERRSZ];
    assert_int_equal(zmq_curve_keypair(a, s), 0);
    assert_int_equal(zmq_curve_keypair(b, s), 0);
    char text[512];
    snprintf(text, sizeof text, "# coordinators\n\n%s\n  %s   # host b\n#\n", a, b);
    const char *p = write_file("clients", text, 0644);
    curve_key *keys = NULL;
    int n = 0;
    assert_int_equal(curve_keys_read_list(p, &keys, &n, err, sizeof err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(keys[0].z85, a);
    assert_string_equal(keys[1].z85, b);
    free(keys);

    snprintf(text, sizeof text, "# coordinators\n%s\n%.30s\n", a, b);
    p = write_file("clients-bad", text, 0644);
    assert_int_equal(curve_keys_read_list(p, &keys, &n, err, sizeof err), Q35_EINVAL);
    assert_err_has(err, "clients-bad:3: not a CURVE public key: 30 characters", NULL);
    assert_null(keys);

    p = write_file("clients-empty", "# nobody\n\n", 0644);
    assert_int_equal(curve_keys_read_list(p, &keys, &n, err, sizeof err), Q35_EINVAL);
    assert_err_has(err, "clients-empty: no client key listed", NULL);
}

/* ---- sockets ------------------------------------------------------------------ */

typedef struct { char pub[41], sec[41]; } pair;

static pair mkpair(void)
{
    pair p;
    assert_int_equal(zmq_curve_keypair(p.pub, p.sec), 0);
    return p;
}

static curve_key key_of(const char *z85)
{
    curve_key k;
    char err[Q35_ERRSZ];
    assert_int_equal(curve_key_parse(z85, &k, err, sizeof err), 0);
    return k;
}

static const char *next_endpoint(void)
{
    static char ep[340];
    snprintf(ep, sizeof ep, "ipc://%s/s%d", g_dir, g_n_ep++);
    return ep;
}

/* A ROUTER server set up like a stage's, bound to a fresh endpoint. */
static void *server(void *ctx, const pair *sp, char *ep)
{
    char err[Q35_ERRSZ];
    void *s = zmq_socket(ctx, ZMQ_ROUTER);
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    curve_key sec = key_of(sp->sec);
    assert_int_equal(curve_server_setup(s, &sec, err, sizeof err), 0);
    strcpy(ep, next_endpoint());
    assert_int_equal(zmq_bind(s, ep), 0);
    return s;
}

/* A DEALER that connects (with CURVE when cp is set) and sends "hi". */
static void *client(void *ctx, const pair *cp, const char *server_pub, const char *ep)
{
    char err[Q35_ERRSZ];
    void *c = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(c, ZMQ_LINGER, &linger, sizeof linger);
    if (cp) {
        curve_key sec = key_of(cp->sec), spk = key_of(server_pub);
        assert_int_equal(curve_client_setup(c, &sec, &spk, err, sizeof err), 0);
    }
    assert_int_equal(zmq_connect(c, ep), 0);
    assert_int_equal(zmq_send(c, "hi", 2, ZMQ_DONTWAIT), 2);
    return c;
}

/* 1 when `s` has a message within ms. */
static int readable(void *s, int ms)
{
    zmq_pollitem_t it = { .socket = s, .events = ZMQ_POLLIN };
    return zmq_poll(&it, 1, ms);
}

static void allowed_client_gets_through(void **state)
{
    (void)state;
    char err[Q35_ERRSZ], ep[340];
    void *ctx = zmq_ctx_new();
    pair sp = mkpair(), cp = mkpair();
    curve_key allow[1] = { key_of(cp.pub) };
    curve_zap *z = curve_zap_new(ctx, allow, 1, err, sizeof err);
    assert_non_null(z);
    void *s = server(ctx, &sp, ep);
    void *c = client(ctx, &cp, sp.pub, ep);
    assert_int_equal(readable(s, 5000), 1);
    zmq_msg_t id, body;
    zmq_msg_init(&id);
    zmq_msg_init(&body);
    assert_true(zmq_msg_recv(&id, s, 0) > 0);
    assert_int_equal(zmq_msg_recv(&body, s, 0), 2);
    assert_memory_equal(zmq_msg_data(&body), "hi", 2);
    /* and back */
    assert_true(zmq_msg_send(&id, s, ZMQ_SNDMORE) > 0);
    assert_int_equal(zmq_send(s, "ok", 2, 0), 2);
    assert_int_equal(readable(c, 5000), 1);
    char buf[8];
    assert_int_equal(zmq_recv(c, buf, sizeof buf, 0), 2);
    assert_memory_equal(buf, "ok", 2);
    zmq_msg_close(&body);
    assert_int_equal(curve_zap_denied(z), 0);
    zmq_close(c);
    zmq_close(s);
    curve_zap_destroy(&z);
    assert_null(z);
    assert_int_equal(zmq_ctx_term(ctx), 0);
}

static pair g_intruder;
static int g_got;       /* asserted after stderr is back */
static long g_denied;

/* An unlisted key (from two peers) and a plaintext client: nothing
 * reaches the server; the unlisted key is logged once. */
static void run_refused(void)
{
    char err[Q35_ERRSZ], ep[340];
    void *ctx = zmq_ctx_new();
    pair sp = mkpair(), cp = mkpair();
    g_intruder = mkpair();
    curve_key allow[1] = { key_of(cp.pub) };
    curve_zap *z = curve_zap_new(ctx, allow, 1, err, sizeof err);
    assert_non_null(z);
    void *s = server(ctx, &sp, ep);
    /* the same unlisted key twice: two refusals, one log line */
    void *bad[2];
    curve_key bsec = key_of(g_intruder.sec), spk = key_of(sp.pub);
    for (int i = 0; i < 2; i++) {
        bad[i] = zmq_socket(ctx, ZMQ_DEALER);
        int linger = 0;
        zmq_setsockopt(bad[i], ZMQ_LINGER, &linger, sizeof linger);
        assert_int_equal(curve_client_setup(bad[i], &bsec, &spk, err, sizeof err), 0);
        assert_int_equal(zmq_connect(bad[i], ep), 0);
        zmq_send(bad[i], "hi", 2, ZMQ_DONTWAIT);
    }
    void *plain = client(ctx, NULL, NULL, ep);
    g_got = readable(s, 800);
    g_denied = curve_zap_denied(z);
    zmq_close(bad[0]);
    zmq_close(bad[1]);
    zmq_close(plain);
    zmq_close(s);
    curve_zap_destroy(&z);
    zmq_ctx_term(ctx);
}

static void unlisted_and_plaintext_refused(void **state)
{
    (void)state;
    const char *log = ts_capture_stderr(run_refused, false);
    assert_int_equal(g_got, 0);
    assert_int_equal(g_denied, 2);
    const char *hit = strstr(log, g_intruder.pub);
    if (!hit || !strstr(log, "refused client key"))
        fail_msg("no denial naming %s in the log: '%s'", g_intruder.pub, log);
    if (strstr(hit + 1, g_intruder.pub))
        fail_msg("the refused key is logged more than once: '%s'", log);
}

/* ZMQ_ZAP_ENFORCE_DOMAIN: with no handler in the context, CURVE must
 * refuse, not let in whoever knows the server key. */
static void no_handler_refuses_everyone(void **state)
{
    (void)state;
    char ep[340];
    void *ctx = zmq_ctx_new();
    pair sp = mkpair(), cp = mkpair();
    void *s = server(ctx, &sp, ep);
    void *c = client(ctx, &cp, sp.pub, ep);
    assert_int_equal(readable(s, 500), 0);
    zmq_close(c);
    zmq_close(s);
    zmq_ctx_term(ctx);
}

static void one_handler_per_context(void **state)
{
    (void)state;
    char err[Q35_ERRSZ];
    void *ctx = zmq_ctx_new();
    curve_key k = key_of(mkpair().pub);
    curve_zap *a = curve_zap_new(ctx, &k, 1, err, sizeof err);
    assert_non_null(a);
    curve_zap *b = curve_zap_new(ctx, &k, 1, err, sizeof err);
    assert_null(b);
    assert_err_has(err, "ZAP handler: bind inproc://zeromq.zap.01", "another handler");
    curve_zap_destroy(&a);
    assert_int_equal(zmq_ctx_term(ctx), 0);
}

/* ---- config ------------------------------------------------------------------- */

static void write_pair(const char *name, pair *p)
{
    char text[64], n[64];
    *p = mkpair();
    snprintf(text, sizeof text, "%s\n", p->sec);
    snprintf(n, sizeof n, "%s.key", name);
    write_file(n, text, 0600);
    snprintf(text, sizeof text, "%s\n", p->pub);
    snprintf(n, sizeof n, "%s.pub", name);
    write_file(n, text, 0644);
}

static void stage_config(void **state)
{
    (void)state;
    pair st, co;
    write_pair("st", &st);
    write_pair("co", &co);
    char clients[128], key[300], cl[300], conf_text[2048];
    snprintf(clients, sizeof clients, "# the coordinator\n%s\n", co.pub);
    strcpy(cl, write_file("clients", clients, 0644));
    strcpy(key, path_in("st.key"));
    snprintf(conf_text, sizeof conf_text,
             "[stage]\nmodel = %s\nlayers = 0:8\nbind = ipc:///tmp/x.sock\n"
             "curve-secret-key = %s\ncurve-clients = %s\n", g_model, key, cl);
    char conf[300];
    strcpy(conf, write_file("s.conf", conf_text, 0644));
    stage_cfg c = {0};
    char err[Q35_ERRSZ] = "";
    ts_args a = ts_args_of("--config", conf, NULL);
    assert_int_equal(stage_cfg_load(&c, a.argc, a.argv, err, sizeof err), 0);
    assert_true(c.curve);
    assert_string_equal(c.curve_public.z85, st.pub);
    assert_int_equal(c.n_curve_allowed, 1);
    assert_string_equal(c.curve_allowed[0].z85, co.pub);
    stage_cfg_free(&c);
    assert_null(c.curve_allowed);

    /* a group-readable secret key: the config line and the fix */
    chmod(key, 0640);
    memset(&c, 0, sizeof c);
    assert_int_equal(stage_cfg_load(&c, a.argc, a.argv, err, sizeof err), Q35_EINVAL);
    char where[1024];
    snprintf(where, sizeof where, "%s:5: curve-secret-key: %s: secret key readable by others", conf, key);
    assert_err_has(err, where, "chmod 600");
    stage_cfg_free(&c);
    chmod(key, 0600);

    /* one without the other */
    memset(&c, 0, sizeof c);
    ts_args b = ts_args_of("--model", g_model, "--layers", "0:8", "--bind", "ipc:///tmp/x.sock",
                    "--curve-secret-key", key, NULL);
    assert_int_equal(stage_cfg_load(&c, b.argc, b.argv, err, sizeof err), Q35_EINVAL);
    assert_err_has(err, "--curve-secret-key: curve-secret-key is set but curve-clients is not", NULL);
    stage_cfg_free(&c);

    /* a bad client key names its line in the list */
    write_file("clients", "# the coordinator\nnot-a-key\n", 0644);
    memset(&c, 0, sizeof c);
    assert_int_equal(stage_cfg_load(&c, a.argc, a.argv, err, sizeof err), Q35_EINVAL);
    snprintf(where, sizeof where, "%s:6: curve-clients: %s:2: not a CURVE public key", conf, cl);
    assert_err_has(err, where, NULL);
    stage_cfg_free(&c);
}

static void coordinator_config(void **state)
{
    (void)state;
    pair s0, s1, co;
    write_pair("s0", &s0);
    write_pair("s1", &s1);
    write_pair("coord", &co);
    char k0[300], k1[300], ck[300];
    strcpy(k0, path_in("s0.pub"));
    strcpy(k1, path_in("s1.pub"));
    strcpy(ck, path_in("coord.key"));
    coord_cfg c = {0};
    char err[Q35_ERRSZ] = "";
    ts_args a = ts_args_of("--model", g_model, "--listen", "ipc:///tmp/l.sock",
                    "--stage", "ipc:///tmp/a.sock 0:4", "--stage", "ipc:///tmp/b.sock 4:8",
                    "--curve-secret-key", ck, "--stage-key", k0, "--stage-key", k1, NULL);
    assert_int_equal(coord_cfg_load(&c, a.argc, a.argv, err, sizeof err), 0);
    assert_true(c.curve);
    assert_string_equal(c.curve_secret.z85, co.sec);
    assert_string_equal(c.stages[0].server_key.z85, s0.pub);
    assert_string_equal(c.stages[1].server_key.z85, s1.pub);
    coord_cfg_free(&c);

    /* one stage-key short */
    memset(&c, 0, sizeof c);
    a.argc -= 2;
    assert_int_equal(coord_cfg_load(&c, a.argc, a.argv, err, sizeof err), Q35_EINVAL);
    assert_err_has(err, "--curve-secret-key: curve-secret-key is set, so every stage needs its "
                   "stage-key: 1 stage-key for 2 stages", NULL);
    coord_cfg_free(&c);

    /* a stage-key without a secret key */
    memset(&c, 0, sizeof c);
    ts_args b = ts_args_of("--model", g_model, "--listen", "ipc:///tmp/l.sock",
                    "--stage", "ipc:///tmp/a.sock", "--stage-key", k0, NULL);
    assert_int_equal(coord_cfg_load(&c, b.argc, b.argv, err, sizeof err), Q35_EINVAL);
    assert_err_has(err, "--stage-key: stage-key is set but curve-secret-key is not", NULL);
    coord_cfg_free(&c);

    /* a secret key given as the stage key's public file: wrong length is not
     * the issue, the mode is (0644) */
    memset(&c, 0, sizeof c);
    ts_args d = ts_args_of("--model", g_model, "--listen", "ipc:///tmp/l.sock",
                    "--stage", "ipc:///tmp/a.sock", "--curve-secret-key", k0, "--stage-key", k0, NULL);
    assert_int_equal(coord_cfg_load(&c, d.argc, d.argv, err, sizeof err), Q35_EINVAL);
    assert_err_has(err, "--curve-secret-key: curve-secret-key: ", "readable by others (mode 0644)");
    coord_cfg_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(keygen_writes_a_pair),
        cmocka_unit_test(key_files_refused),
        cmocka_unit_test(allow_list),
        cmocka_unit_test(allowed_client_gets_through),
        cmocka_unit_test(unlisted_and_plaintext_refused),
        cmocka_unit_test(no_handler_refuses_everyone),
        cmocka_unit_test(one_handler_per_context),
        cmocka_unit_test(stage_config),
        cmocka_unit_test(coordinator_config),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
