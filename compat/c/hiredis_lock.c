/*
 * hiredis (Debian's libhiredis-dev 0.14) through lockproxy: the lock flow C
 * code writes with its synchronous API (redisCommand, and redisAppendCommand
 * with redisGetReply for a pipeline), then with its asynchronous API
 * (redisAsyncCommand, driven here by poll(2) through hiredis's event hooks,
 * as its libevent and libev adapters drive it).
 *
 * Built and run by compat/langs_test.go, against one plain redis-server and
 * through lockproxy:
 *
 *     hiredis_lock PORT PREFIX
 *
 * Each "STEP name result" line is compared with the plain run's; at each
 * "CHECK ..." line the test reads the masters and answers "ok" (runDriven).
 * An assertion that fails exits 1 with the reason on stderr.
 */
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

static int port;
static const char *prefix;

static void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("FAIL: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

/* check prints a checkpoint for the test, which reads the masters, and
 * waits for its "ok". */
static void check(const char *fmt, ...)
{
	char what[512], answer[64] = "";
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	printf("CHECK %s\n", what);
	fflush(stdout);
	if (!fgets(answer, sizeof answer, stdin) || strcmp(answer, "ok\n") != 0)
		fail("checkpoint %s: test answered %s", what, answer);
}

/* show appends reply r to buf: strings quoted, +status, :integer, nil,
 * [arrays], and errors as their first word (the error code: both servers'
 * texts differ in detail). */
static void show(char *buf, size_t n, const redisReply *r)
{
	size_t len = strlen(buf);
	size_t i;

	if (r == NULL) {
		snprintf(buf + len, n - len, "(no reply)");
		return;
	}
	switch (r->type) {
	case REDIS_REPLY_STRING:
		snprintf(buf + len, n - len, "\"%s\"", r->str);
		break;
	case REDIS_REPLY_STATUS:
		snprintf(buf + len, n - len, "+%s", r->str);
		break;
	case REDIS_REPLY_ERROR:
		snprintf(buf + len, n - len, "error %.*s", (int)strcspn(r->str, " "), r->str);
		break;
	case REDIS_REPLY_INTEGER:
		snprintf(buf + len, n - len, ":%lld", r->integer);
		break;
	case REDIS_REPLY_NIL:
		snprintf(buf + len, n - len, "nil");
		break;
	case REDIS_REPLY_ARRAY:
		snprintf(buf + len, n - len, "[");
		for (i = 0; i < r->elements; i++) {
			if (i > 0)
				strncat(buf, ",", n - strlen(buf) - 1);
			show(buf, n, r->element[i]);
		}
		strncat(buf, "]", n - strlen(buf) - 1);
		break;
	default:
		snprintf(buf + len, n - len, "type %d", r->type);
	}
}

static void print_step(const char *name, const char *result)
{
	printf("STEP %s %s\n", name, result);
	fflush(stdout);
}

/* step prints reply r under name and returns it (to be freed). */
static redisReply *step(const char *name, redisContext *c, redisReply *r)
{
	char buf[2048] = "";
	if (r == NULL)
		fail("%s: connection error: %s", name, c->errstr);
	show(buf, sizeof buf, r);
	print_step(name, buf);
	return r;
}

static void stepf(const char *name, redisContext *c, redisReply *r)
{
	freeReplyObject(step(name, c, r));
}

static int pttl_in(redisContext *c, const char *key, long long lo, long long hi)
{
	redisReply *r = redisCommand(c, "PTTL %s", key);
	int ok = r && r->type == REDIS_REPLY_INTEGER && r->integer >= lo && r->integer <= hi;
	if (r)
		freeReplyObject(r);
	return ok;
}

static redisContext *open_conn(void)
{
	struct timeval tv = {5, 0};
	redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
	if (c == NULL || c->err)
		fail("connect to 127.0.0.1:%d: %s", port, c ? c->errstr : "out of memory");
	redisSetTimeout(c, tv);
	return c;
}

static const char *extend =
	"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
static const char *release =
	"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/* random_bytes fills b with n bytes of /dev/urandom, as C services make a
 * lock's token. */
static void random_bytes(unsigned char *b, size_t n)
{
	FILE *f = fopen("/dev/urandom", "rb");
	if (f == NULL || fread(b, 1, n, f) != n)
		fail("reading /dev/urandom");
	fclose(f);
}

/* random_hex writes 16 random bytes as 32 hex digits and a NUL. */
static void random_hex(char *hex)
{
	unsigned char b[16];
	size_t i;
	random_bytes(b, sizeof b);
	for (i = 0; i < sizeof b; i++)
		sprintf(hex + 2 * i, "%02x", b[i]);
}

/* --- the asynchronous API, on poll(2) ------------------------------------ */

/* pollev is this program's event library: hiredis asks it, through the
 * hooks of redisAsyncContext.ev, to watch its socket for reading and
 * writing, as it asks libevent or libev. */
struct pollev {
	int reading, writing;
};

static void add_read(void *p) { ((struct pollev *)p)->reading = 1; }
static void del_read(void *p) { ((struct pollev *)p)->reading = 0; }
static void add_write(void *p) { ((struct pollev *)p)->writing = 1; }
static void del_write(void *p) { ((struct pollev *)p)->writing = 0; }
static void cleanup(void *p) { ((struct pollev *)p)->reading = ((struct pollev *)p)->writing = 0; }

static int pending; /* async replies still to come */

static void on_reply(redisAsyncContext *ac, void *reply, void *name)
{
	char buf[2048] = "";
	(void)ac;
	show(buf, sizeof buf, reply);
	print_step(name, buf);
	pending--;
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	if (status != REDIS_OK)
		fail("async connect: %s", ac->errstr);
}

/* run_async serves ac's socket until every command sent has its reply. */
static void run_async(redisAsyncContext *ac, struct pollev *ev)
{
	while (pending > 0) {
		struct pollfd pfd = {ac->c.fd, 0, 0};
		if (ev->reading)
			pfd.events |= POLLIN;
		if (ev->writing)
			pfd.events |= POLLOUT;
		if (poll(&pfd, 1, 5000) <= 0)
			fail("async: no reply within 5s (%d pending)", pending);
		if (pfd.revents & POLLOUT)
			redisAsyncHandleWrite(ac);
		if (pfd.revents & (POLLIN | POLLHUP | POLLERR))
			redisAsyncHandleRead(ac);
		if (ac->err)
			fail("async: %s", ac->errstr);
	}
}

static void async_flow(const char *key)
{
	struct pollev ev = {0, 0};
	redisAsyncContext *ac = redisAsyncConnect("127.0.0.1", port);
	if (ac == NULL || ac->err)
		fail("async connect: %s", ac ? ac->errstr : "out of memory");
	ac->ev.data = &ev;
	ac->ev.addRead = add_read;
	ac->ev.delRead = del_read;
	ac->ev.addWrite = add_write;
	ac->ev.delWrite = del_write;
	ac->ev.cleanup = cleanup;
	redisAsyncSetConnectCallback(ac, on_connect);

	/* One write: the handshake, acquire, a second acquire refused, read,
	 * extend, release; hiredis queues them and the loop sends them. */
	redisAsyncCommand(ac, on_reply, "async select 0", "SELECT 0");
	redisAsyncCommand(ac, on_reply, "async client setname", "CLIENT SETNAME c-async");
	redisAsyncCommand(ac, on_reply, "async ping", "PING");
	redisAsyncCommand(ac, on_reply, "async set nx px", "SET %s %s NX PX %d", key, "c-async-token", 5000);
	redisAsyncCommand(ac, on_reply, "async set nx px again", "SET %s %s NX PX %d", key, "c-async-other", 5000);
	redisAsyncCommand(ac, on_reply, "async get", "GET %s", key);
	redisAsyncCommand(ac, on_reply, "async eval extend", "EVAL %s 1 %s %s %d", extend, key, "c-async-token", 7000);
	redisAsyncCommand(ac, on_reply, "async stranger's release", "EVAL %s 1 %s %s", release, key, "c-async-other");
	pending = 8;
	run_async(ac, &ev);
	check("held %s c-async-token", key);

	redisAsyncCommand(ac, on_reply, "async eval release", "EVAL %s 1 %s %s", release, key, "c-async-token");
	redisAsyncCommand(ac, on_reply, "async get, free", "GET %s", key);
	pending = 2;
	run_async(ac, &ev);
	redisAsyncFree(ac);
}

/* pubsub_flow waits for a release the way C services do: an async
 * connection subscribed to a channel, a message published from the sync
 * connection when the lock is released. hiredis calls the SUBSCRIBE
 * callback for the confirmation, each message and the unsubscription. */
static void pubsub_flow(redisContext *c, const char *chan)
{
	struct pollev ev = {0, 0};
	redisAsyncContext *ac = redisAsyncConnect("127.0.0.1", port);
	if (ac == NULL || ac->err)
		fail("async connect: %s", ac ? ac->errstr : "out of memory");
	ac->ev.data = &ev;
	ac->ev.addRead = add_read;
	ac->ev.delRead = del_read;
	ac->ev.addWrite = add_write;
	ac->ev.delWrite = del_write;
	ac->ev.cleanup = cleanup;
	redisAsyncSetConnectCallback(ac, on_connect);

	redisAsyncCommand(ac, on_reply, "subscriber", "SUBSCRIBE %s", chan);
	pending = 1;
	run_async(ac, &ev);
	stepf("publish the release", c, redisCommand(c, "PUBLISH %s %s", chan, "released"));
	pending = 1;
	run_async(ac, &ev);
	redisAsyncCommand(ac, NULL, NULL, "UNSUBSCRIBE %s", chan);
	pending = 1;
	run_async(ac, &ev);
	redisAsyncFree(ac);
	stepf("publish to nobody", c, redisCommand(c, "PUBLISH %s %s", chan, "released"));
}

/* handshake sends what C services send after redisConnect. */
static void handshake(redisContext *c)
{
	char buf[2048];
	redisReply *r;
	int i;

	stepf("ping", c, redisCommand(c, "PING"));
	stepf("auth without requirepass", c, redisCommand(c, "AUTH %s", "secret"));
	stepf("select 0", c, redisCommand(c, "SELECT %d", 0));
	stepf("client setname", c, redisCommand(c, "CLIENT SETNAME %s", "c-named"));
	stepf("client getname", c, redisCommand(c, "CLIENT GETNAME"));
	r = redisCommand(c, "INFO");
	if (r == NULL || r->type != REDIS_REPLY_STRING)
		fail("INFO did not answer a string");
	print_step("info has redis_version", strstr(r->str, "redis_version:") ? "yes" : "no");
	freeReplyObject(r);
	r = redisCommand(c, "INFO server");
	print_step("info server has redis_version", r && r->type == REDIS_REPLY_STRING && strstr(r->str, "redis_version:") ? "yes" : "no");
	freeReplyObject(r);
	r = redisCommand(c, "HELLO 2");
	/* HELLO 2 (hiredis 0.14 parses RESP2 only): the field names, not the
	 * values (version and id differ). */
	buf[0] = 0;
	for (i = 0; r && r->type == REDIS_REPLY_ARRAY && i + 1 < (int)r->elements; i += 2) {
		strncat(buf, r->element[i]->str, sizeof buf - strlen(buf) - 2);
		strncat(buf, ",", sizeof buf - strlen(buf) - 1);
	}
	print_step("hello 2 fields", r && r->type == REDIS_REPLY_ARRAY ? buf : "not an array");
	freeReplyObject(r);
	stepf("echo", c, redisCommand(c, "ECHO %s", "hi"));
}

/* lock_flow runs a lock's life on key with random tokens, c the holder
 * and c2 the contender; sha is the release script's, as SCRIPT LOAD
 * answers it (41 bytes at least). */
static void lock_flow(redisContext *c, redisContext *c2, const char *key, char *sha)
{
	char buf[2048], tok[33], other[33];
	redisReply *r;
	int i;

	random_hex(tok);
	random_hex(other);
	/* The lock flow: the token and key passed with %s and %b, as C code
	 * passes binary-safe values. */
	r = step("set nx px", c, redisCommand(c, "SET %s %s NX PX %d", key, tok, 5000));
	if (r->type != REDIS_REPLY_STATUS)
		fail("SET NX PX refused a free lock");
	freeReplyObject(r);
	check("held %s %s", key, tok);
	r = step("contender set nx px", c2, redisCommand(c2, "SET %b %b NX PX %d", key, strlen(key), other, strlen(other), 5000));
	if (r->type != REDIS_REPLY_NIL)
		fail("a contender got a held lock");
	freeReplyObject(r);
	r = redisCommand(c, "GET %s", key);
	print_step("get is the token", r && r->type == REDIS_REPLY_STRING && strcmp(r->str, tok) == 0 ? "yes" : "no");
	freeReplyObject(r);
	stepf("exists", c, redisCommand(c, "EXISTS %s", key));
	print_step("pttl in 1000..5000", pttl_in(c, key, 1000, 5000) ? "yes" : "no");
	r = step("eval extend", c, redisCommand(c, "EVAL %s 1 %s %s %d", extend, key, tok, 8000));
	if (r->type != REDIS_REPLY_INTEGER || r->integer != 1)
		fail("extend failed");
	freeReplyObject(r);
	check("pttl %s 6000 8000", key);
	stepf("stranger's extend", c2, redisCommand(c2, "EVAL %s 1 %s %s %d", extend, key, other, 9000));
	stepf("stranger's release", c2, redisCommand(c2, "EVAL %s 1 %s %s", release, key, other));
	check("held %s %s", key, tok);
	r = step("script load", c, redisCommand(c, "SCRIPT LOAD %s", release));
	if (r->type != REDIS_REPLY_STRING || r->len != 40)
		fail("SCRIPT LOAD did not answer a sha1");
	snprintf(sha, 41, "%s", r->str); /* r->len is 40 */
	freeReplyObject(r);
	stepf("script exists", c, redisCommand(c, "SCRIPT EXISTS %s %s", sha, "0000000000000000000000000000000000000000"));
	stepf("evalsha of an unknown sha1", c, redisCommand(c, "EVALSHA %s 1 %s %s", "0000000000000000000000000000000000000000", key, tok));
	stepf("stranger's evalsha release", c2, redisCommand(c2, "EVALSHA %s 1 %s %s", sha, key, other));
	check("held %s %s", key, tok);

	/* A pipeline: appended, sent in one write by the first redisGetReply. */
	redisAppendCommand(c, "GET %s", key);
	redisAppendCommand(c, "PTTL %s", key);
	redisAppendCommand(c, "EXISTS %s", key);
	redisAppendCommand(c, "SET %s %s NX PX %d", key, other, 5000);
	buf[0] = 0;
	for (i = 0; i < 4; i++) {
		if (redisGetReply(c, (void **)&r) != REDIS_OK)
			fail("pipeline reply %d: %s", i + 1, c->errstr);
		if (i == 0) {
			strncat(buf, r->type == REDIS_REPLY_STRING && strcmp(r->str, tok) == 0 ? "token" : "other", sizeof buf - strlen(buf) - 1);
		} else if (i == 1) {
			strncat(buf, r->integer >= 1000 && r->integer <= 8000 ? "pttl-ok" : "pttl-out", sizeof buf - strlen(buf) - 1);
		} else {
			show(buf, sizeof buf, r);
		}
		strncat(buf, " ", sizeof buf - strlen(buf) - 1);
		freeReplyObject(r);
	}
	print_step("pipeline get, pttl, exists, set nx px", buf);

	r = step("evalsha release", c, redisCommand(c, "EVALSHA %s 1 %s %s", sha, key, tok));
	if (r->type != REDIS_REPLY_INTEGER || r->integer != 1)
		fail("release failed");
	freeReplyObject(r);
	check("gone %s", key);
	stepf("release again", c, redisCommand(c, "EVALSHA %s 1 %s %s", sha, key, tok));
	stepf("set ex nx", c2, redisCommand(c2, "SET %s %s EX %d NX", key, other, 5));
	check("held %s %s", key, other);
	stepf("del", c2, redisCommand(c2, "DEL %s", key));
	check("gone %s", key);
}

/* binary_flow locks key with a token of raw random bytes. */
static void binary_flow(redisContext *c, redisContext *c2, const char *key, const char *sha)
{
	unsigned char bin[20];
	redisReply *r;

	/* A token of raw random bytes, passed with %b (binary-safe): zero
	 * bytes, CR and LF in it reach the masters and the scripts intact. */
	random_bytes(bin, sizeof bin);
	bin[3] = 0;
	bin[4] = '\r';
	bin[5] = '\n';
	stepf("binary token set nx px", c, redisCommand(c, "SET %s %b NX PX %d", key, bin, sizeof bin, 5000));
	r = redisCommand(c, "GET %s", key);
	print_step("binary token get", r && r->type == REDIS_REPLY_STRING && r->len == sizeof bin && memcmp(r->str, bin, sizeof bin) == 0 ? "same bytes" : "differs");
	freeReplyObject(r);
	stepf("release with a prefix of the binary token", c2, redisCommand(c2, "EVALSHA %s 1 %s %b", sha, key, bin, (size_t)3));
	check("keys %s %s", prefix, key);
	stepf("binary token release", c, redisCommand(c, "EVALSHA %s 1 %s %b", sha, key, bin, sizeof bin));
	check("gone %s", key);
}

int main(int argc, char **argv)
{
	char key[256], sha[64];
	redisContext *c, *c2;

	if (argc != 3)
		fail("usage: hiredis_lock PORT PREFIX");
	port = atoi(argv[1]);
	prefix = argv[2];
	printf("hiredis %d.%d.%d\n", HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH);
	c = open_conn();
	c2 = open_conn();
	handshake(c);
	snprintf(key, sizeof key, "%slock", prefix);
	lock_flow(c, c2, key, sha);
	snprintf(key, sizeof key, "%sbinary", prefix);
	binary_flow(c, c2, key, sha);

	/* The asynchronous API, on another key. */
	snprintf(key, sizeof key, "%sasync", prefix);
	async_flow(key);
	check("gone %s", key);

	snprintf(key, sizeof key, "%sreleased", prefix);
	pubsub_flow(c, key);

	stepf("quit", c, redisCommand(c, "QUIT"));
	redisFree(c);
	redisFree(c2);
	return 0;
}
