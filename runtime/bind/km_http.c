/* km_http.c — `require "km.http"`: an HTTP/1.1 server (GNU libmicrohttpd) whose requests a
 * Lua loop takes and answers when it likes: the transport of `kmrun serve --listen`
 * (km.serve.server). It parses nothing itself and decides nothing but transport limits.
 *
 *   local http = require "km.http"
 *   local srv = http.listen { host = "127.0.0.1", port = 0 }   -- or { unix = PATH }
 *       -- opts: max_body (bytes, 413 over it), io_timeout (s of silence before a connection
 *       -- closes), request_timeout (s to send one whole request: a client sending one byte a
 *       -- second is cut off), tokens = { { name, secret }, ... } (Authorization: Bearer
 *       -- SECRET, checked before the body is read: 401), max_conns, per_ip
 *   srv:port()                      -> the TCP port bound (port 0: the kernel's choice)
 *   srv:poll(ms)                    -> { id, method, path, query = { name = v }, headers = { lower = v },
 *                                        body, peer, client } | nil   (waits up to ms)
 *   srv:respond(id, status, body [, headers])  -> true | nil, why, "GONE"
 *   srv:stream(id, status [, headers])         -> true | nil, why, "GONE"  (chunked body follows)
 *   srv:write(id, bytes)            -> true | nil, why, "GONE"
 *   srv:finish(id)                  -> true          (the stream's end)
 *   srv:alive(id)                   -> false once the client is gone
 *   srv:stats()                     -> { connections, open (requests held), cut (connections cut
 *                                        for a slow request) }
 *   srv:close()
 *   http.read_secret(path)          -> the file's text | nil, why, CODE  (INSECURE: another user
 *                                      could read it or it is not this user's; a token file
 *                                      must be mode 0600 or stricter)
 *
 * Threads: libmicrohttpd runs a thread per connection. Each request's thread reads it,
 * queues it for the Lua side and waits (on a condition variable) for the answer; a streamed
 * answer's thread waits for each chunk. While it waits, the connection's idle timeout is off
 * (a batch may take minutes) and the client's socket is watched: a client that hangs up is
 * seen as gone. Until a request is wholly received, the Lua side's poll cuts a connection
 * that has taken longer than request_timeout (shutdown of its socket).
 * Ownership: the server owns every request; a request lives until both its connection is
 * done with it and the Lua side has answered (or finished) it. srv:close stops the daemon
 * (waking every waiting thread first) and frees them all. */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <microhttpd.h>

#include <lua.h>
#include <lauxlib.h>

#include "km.h"

#define KM_HTTP_MT "km.HttpServer"
#define MAX_TOKENS 64

enum { RQ_READING, RQ_QUEUED, RQ_TAKEN, RQ_ANSWERED };

typedef struct km_conn { /* a connection, for the slow-request watch */
  struct km_conn *next;
  int fd;
  int reading;  /* a request is being received (the deadline runs) */
  double since; /* when it began (or the last answer ended) */
} km_conn;

typedef struct km_req {
  struct km_req *next;
  uint64_t id;
  struct MHD_Connection *conn;
  km_conn *watch;
  int state, mhd_done, lua_done, gone, reject, streaming, ended;
  char *method, *url, *peer, *client, *hdrs, *args; /* hdrs, args: "name\0value\0"... */
  size_t hdrs_len, hdrs_cap, args_len, args_cap;
  char *body;
  size_t body_len, body_cap;
  int status;
  char *out, *out_hdrs; /* the answer: its body (or the stream's pending bytes), "name\0value\0"... */
  size_t out_len, out_off, out_cap, out_hdrs_len;
} km_req;

typedef struct {
  struct MHD_Daemon *d;
  pthread_mutex_t mu;
  pthread_cond_t queued, answered;
  km_req *reqs;
  km_conn *conns;
  uint64_t next_id;
  int closing, lfd, port;
  size_t max_body;
  unsigned io_timeout;
  double request_timeout;
  int ntokens;
  char *token_name[MAX_TOKENS], *token_secret[MAX_TOKENS];
  long connections, cut;
} km_http;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static km_http *http_check(lua_State *L) {
  km_http *h = luaL_checkudata(L, 1, KM_HTTP_MT);
  if (!h->d) luaL_error(L, "attempt to use a closed km.HttpServer");
  return h;
}

/* ---- buffers ---- */

static int grow(char **buf, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  size_t n = *cap ? *cap : 256;
  while (n < need) n *= 2;
  char *p = realloc(*buf, n);
  if (!p) return -1;
  *buf = p;
  *cap = n;
  return 0;
}

static int append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
  if (grow(buf, cap, *len + n + 1)) return -1;
  memcpy(*buf + *len, s, n);
  *len += n;
  (*buf)[*len] = 0;
  return 0;
}

/* ---- requests (under h->mu) ---- */

static void req_free(km_req *r) {
  free(r->method); free(r->url); free(r->peer); free(r->client); free(r->hdrs); free(r->args);
  free(r->body); free(r->out); free(r->out_hdrs);
  free(r);
}

/* Frees r once neither its connection nor the Lua side holds it. */
static void req_release(km_http *h, km_req *r) {
  if (!(r->mhd_done && r->lua_done)) return;
  for (km_req **p = &h->reqs; *p; p = &(*p)->next) {
    if (*p == r) { *p = r->next; break; }
  }
  req_free(r);
}

static km_req *req_find(km_http *h, uint64_t id) {
  for (km_req *r = h->reqs; r; r = r->next)
    if (r->id == id && !r->lua_done && r->state >= RQ_TAKEN) return r;
  return NULL;
}

/* ---- the connection side (libmicrohttpd's threads) ---- */

/* A header (or a query argument) of r, kept as "name\0value\0". */
static enum MHD_Result add_value(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
  km_req *r = cls;
  char **buf = kind == MHD_HEADER_KIND ? &r->hdrs : &r->args;
  size_t *len = kind == MHD_HEADER_KIND ? &r->hdrs_len : &r->args_len;
  size_t *cap = kind == MHD_HEADER_KIND ? &r->hdrs_cap : &r->args_cap;
  if (!value) value = "";
  if (append(buf, len, cap, key, strlen(key) + 1) || append(buf, len, cap, value, strlen(value) + 1)) return MHD_NO;
  return MHD_YES;
}

static char *peer_of(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  char text[INET6_ADDRSTRLEN + 8] = "unix";
  if (ci && ci->client_addr) {
    const struct sockaddr *sa = ci->client_addr;
    if (sa->sa_family == AF_INET) inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, text, sizeof text);
    else if (sa->sa_family == AF_INET6)
      inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, text, sizeof text);
  }
  return strdup(text);
}

/* Constant-time comparison of the presented secret with each token's. -> the token's name | NULL */
static const char *token_of(km_http *h, const char *auth) {
  const char *found = NULL;
  if (!auth || strncasecmp(auth, "Bearer ", 7) != 0) return NULL;
  const char *got = auth + 7;
  size_t n = strlen(got);
  for (int i = 0; i < h->ntokens; i++) {
    const char *want = h->token_secret[i];
    size_t m = strlen(want);
    unsigned char diff = (unsigned char)(n != m);
    for (size_t k = 0; k < m; k++) diff |= (unsigned char)(want[k] ^ (k < n ? got[k] : 0));
    if (!diff) found = h->token_name[i];
  }
  return found;
}

/* A short JSON answer made here, before the Lua side sees the request (401, 413, 503). */
static enum MHD_Result answer_now(struct MHD_Connection *c, unsigned status, const char *msg) {
  char body[256];
  snprintf(body, sizeof body, "{\"error\":\"%s\"}\n", msg);
  struct MHD_Response *res = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_COPY);
  if (!res) return MHD_NO;
  MHD_add_response_header(res, "Content-Type", "application/json");
  if (status == 401) MHD_add_response_header(res, "WWW-Authenticate", "Bearer");
  MHD_add_response_header(res, "Connection", "close");
  enum MHD_Result ok = MHD_queue_response(c, status, res);
  MHD_destroy_response(res);
  return ok;
}

/* The request's first call (its headers read): the request made, checked for its token and
 * its declared size. -> the request, with r->reject set where it is refused */
static km_req *req_new(km_http *h, struct MHD_Connection *c, const char *url, const char *method) {
  km_req *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->conn = c;
  r->method = strdup(method);
  r->url = strdup(url);
  r->peer = peer_of(c);
  MHD_get_connection_values(c, MHD_HEADER_KIND, add_value, r);
  MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, add_value, r);
  const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
  if (cl && strtoull(cl, NULL, 10) > h->max_body) r->reject = 413;
  if (h->ntokens > 0) {
    const char *name = token_of(h, MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION));
    if (!name) r->reject = 401;
    else r->client = strdup(name);
  }
  if (!r->client) r->client = strdup(r->peer ? r->peer : "?");
  const union MHD_ConnectionInfo *si = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  r->watch = si ? si->socket_context : NULL;
  pthread_mutex_lock(&h->mu);
  r->id = ++h->next_id;
  r->next = h->reqs;
  h->reqs = r;
  pthread_mutex_unlock(&h->mu);
  return r;
}

/* true when the client hung up (checked while its answer is awaited). */
static int client_gone(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (!ci) return 1;
  struct pollfd p = { .fd = ci->connect_fd, .events = POLLRDHUP };
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Waits (h->mu held) for a change to r, up to 200 ms; marks r gone when its client hung up. */
static void await(km_http *h, km_req *r) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += 200 * 1000000L;
  if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
  pthread_cond_timedwait(&h->answered, &h->mu, &ts);
  if (!r->gone && client_gone(r->conn)) r->gone = 1;
}

static void set_timeout(struct MHD_Connection *c, unsigned s) {
  MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, s);
}

typedef struct { km_http *h; km_req *r; } km_stream;

/* A streamed answer's bytes, as they come (blocking: a thread per connection). */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
  km_stream *s = cls;
  km_http *h = s->h;
  km_req *r = s->r;
  ssize_t n;
  (void)pos;
  pthread_mutex_lock(&h->mu);
  if (r->out_off == r->out_len && !r->ended) set_timeout(r->conn, 0); /* a verdict may take minutes */
  while (r->out_off == r->out_len && !r->ended && !h->closing && !r->gone) await(h, r);
  if (h->closing || r->gone) n = MHD_CONTENT_READER_END_WITH_ERROR;
  else if (r->out_off == r->out_len) n = MHD_CONTENT_READER_END_OF_STREAM;
  else {
    n = (ssize_t)(r->out_len - r->out_off < max ? r->out_len - r->out_off : max);
    memcpy(buf, r->out + r->out_off, (size_t)n);
    r->out_off += (size_t)n;
    if (r->out_off == r->out_len) r->out_off = r->out_len = 0;
  }
  pthread_mutex_unlock(&h->mu);
  set_timeout(r->conn, h->io_timeout);
  return n;
}

static void stream_free(void *cls) { free(cls); }

/* The answer the Lua side gave r, queued on its connection. */
static enum MHD_Result queue_answer(km_http *h, km_req *r) {
  struct MHD_Response *res;
  if (r->streaming) {
    km_stream *s = malloc(sizeof *s);
    if (!s) return MHD_NO;
    s->h = h;
    s->r = r;
    res = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, stream_reader, s, stream_free);
    if (!res) { free(s); return MHD_NO; }
  } else {
    res = MHD_create_response_from_buffer(r->out_len, r->out ? r->out : "", MHD_RESPMEM_MUST_COPY);
    if (!res) return MHD_NO;
  }
  for (size_t i = 0; i < r->out_hdrs_len;) {
    const char *k = r->out_hdrs + i, *v = k + strlen(k) + 1;
    MHD_add_response_header(res, k, v);
    i = (size_t)(v - r->out_hdrs) + strlen(v) + 1;
  }
  enum MHD_Result ok = MHD_queue_response(r->conn, (unsigned)r->status, res);
  MHD_destroy_response(res);
  return ok;
}

/* The request wholly received: handed to the Lua side, and its answer awaited. */
static enum MHD_Result hand_over(km_http *h, km_req *r) {
  if (r->watch) r->watch->reading = 0;
  set_timeout(r->conn, 0);
  pthread_mutex_lock(&h->mu);
  r->state = RQ_QUEUED;
  pthread_cond_broadcast(&h->queued);
  while (r->state != RQ_ANSWERED && !h->closing && !r->gone) await(h, r);
  int answered = r->state == RQ_ANSWERED && !h->closing && !r->gone;
  pthread_mutex_unlock(&h->mu);
  set_timeout(r->conn, h->io_timeout);
  return answered ? queue_answer(h, r) : MHD_NO;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *data, size_t *size, void **req_cls) {
  km_http *h = cls;
  km_req *r = *req_cls;
  (void)version;
  if (!r) {
    r = req_new(h, c, url, method);
    if (!r) return MHD_NO;
    *req_cls = r;
    if (r->reject == 401) return answer_now(c, 401, "a token is required (Authorization: Bearer ...)");
    if (r->reject == 413) return answer_now(c, 413, "the request is over the size limit");
    return MHD_YES;
  }
  if (*size) {
    if (r->body_len + *size > h->max_body) return MHD_NO; /* no Content-Length, and over: cut */
    if (append(&r->body, &r->body_len, &r->body_cap, data, *size)) return MHD_NO;
    *size = 0;
    return MHD_YES;
  }
  if (r->reject) return MHD_YES; /* answered already */
  return hand_over(h, r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls, enum MHD_RequestTerminationCode toe) {
  km_http *h = cls;
  km_req *r = *req_cls;
  (void)c;
  if (!r) return;
  *req_cls = NULL;
  pthread_mutex_lock(&h->mu);
  if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) r->gone = 1;
  if (r->watch) { r->watch->reading = 1; r->watch->since = now_s(); }
  r->watch = NULL;
  r->mhd_done = 1;
  if (r->state < RQ_TAKEN) r->lua_done = 1; /* never handed over: nobody on the Lua side holds it */
  req_release(h, r);
  pthread_mutex_unlock(&h->mu);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **sock_cls, enum MHD_ConnectionNotificationCode what) {
  km_http *h = cls;
  pthread_mutex_lock(&h->mu);
  if (what == MHD_CONNECTION_NOTIFY_STARTED) {
    km_conn *w = calloc(1, sizeof *w);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (w) {
      w->fd = ci ? ci->connect_fd : -1;
      w->reading = 1;
      w->since = now_s();
      w->next = h->conns;
      h->conns = w;
      h->connections++;
    }
    *sock_cls = w;
  } else if (*sock_cls) {
    for (km_conn **p = &h->conns; *p; p = &(*p)->next) {
      if (*p == *sock_cls) { *p = (*p)->next; break; }
    }
    free(*sock_cls);
    *sock_cls = NULL;
  }
  pthread_mutex_unlock(&h->mu);
}

static void quiet_log(void *cls, const char *fmt, va_list ap) { (void)cls; (void)fmt; (void)ap; }

/* ---- the Lua side ---- */

/* A listening socket for opts: unix = PATH (mode 0600), else host:port. -> fd | -1 (message in err) */
static int open_listener(lua_State *L, int *port, char *err, size_t errlen) {
  const char *unix_path = km_optfield_str(L, 1, "unix", NULL);
  if (unix_path) {
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(unix_path) >= sizeof sa.sun_path) { snprintf(err, errlen, "socket path too long: %s", unix_path); return -1; }
    strcpy(sa.sun_path, unix_path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    mode_t old = umask(0177);
    int rc = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&sa, sizeof sa);
    umask(old);
    if (rc || listen(fd, 128)) {
      snprintf(err, errlen, "%s: %s", unix_path, strerror(errno));
      if (fd >= 0) close(fd);
      return -1;
    }
    return fd;
  }
  const char *host = km_optfield_str(L, 1, "host", "127.0.0.1");
  char service[16];
  snprintf(service, sizeof service, "%d", (int)km_optfield_int(L, 1, "port", 0));
  struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *ai;
  int gerr = getaddrinfo(host, service, &hints, &ai);
  if (gerr) { snprintf(err, errlen, "%s: %s", host, gai_strerror(gerr)); return -1; }
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 128)) {
    snprintf(err, errlen, "%s:%s: %s", host, service, strerror(errno));
    if (fd >= 0) close(fd);
    freeaddrinfo(ai);
    return -1;
  }
  freeaddrinfo(ai);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  getsockname(fd, (struct sockaddr *)&ss, &sl);
  *port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                   : ntohs(((struct sockaddr_in *)&ss)->sin_port);
  return fd;
}

/* opts.tokens = { { name, secret }, ... } into h. */
static void read_tokens(lua_State *L, km_http *h) {
  if (lua_getfield(L, 1, "tokens") == LUA_TTABLE) {
    lua_Integer n = luaL_len(L, -1);
    luaL_argcheck(L, n <= MAX_TOKENS, 1, "too many tokens");
    for (lua_Integer i = 1; i <= n; i++) {
      lua_geti(L, -1, i);
      luaL_argcheck(L, lua_istable(L, -1), 1, "tokens: a list of { name, secret }");
      lua_geti(L, -1, 1);
      lua_geti(L, -2, 2);
      const char *name = luaL_checkstring(L, -2), *secret = luaL_checkstring(L, -1);
      luaL_argcheck(L, *secret, 1, "tokens: an empty secret");
      h->token_name[h->ntokens] = strdup(name);
      h->token_secret[h->ntokens] = strdup(secret);
      h->ntokens++;
      lua_pop(L, 3);
    }
  }
  lua_pop(L, 1);
}

static int l_listen(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  km_http *h = lua_newuserdatauv(L, sizeof *h, 0);
  memset(h, 0, sizeof *h);
  h->lfd = -1;
  luaL_setmetatable(L, KM_HTTP_MT);
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->queued, NULL);
  pthread_cond_init(&h->answered, NULL);
  h->max_body = (size_t)km_optfield_int(L, 1, "max_body", 8 << 20);
  h->io_timeout = (unsigned)km_optfield_int(L, 1, "io_timeout", 10);
  h->request_timeout = km_optfield_num(L, 1, "request_timeout", 30);
  read_tokens(L, h);
  char err[512];
  h->lfd = open_listener(L, &h->port, err, sizeof err);
  if (h->lfd < 0) return km_fail(L, errno == EADDRINUSE ? "EXISTS" : "IO", "listening on %s", err);
  int is_unix = km_optfield_str(L, 1, "unix", NULL) != NULL;
  unsigned per_ip = (unsigned)km_optfield_int(L, 1, "per_ip", 64);
  h->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD, 0, NULL, NULL,
                          on_request, h, MHD_OPTION_LISTEN_SOCKET, h->lfd,
                          MHD_OPTION_CONNECTION_TIMEOUT, h->io_timeout,
                          MHD_OPTION_CONNECTION_LIMIT, (unsigned)km_optfield_int(L, 1, "max_conns", 256),
                          MHD_OPTION_PER_IP_CONNECTION_LIMIT, is_unix ? 0u : per_ip,
                          MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 << 10),
                          MHD_OPTION_THREAD_STACK_SIZE, (size_t)(512 << 10),
                          MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                          MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                          MHD_OPTION_EXTERNAL_LOGGER, quiet_log, NULL, MHD_OPTION_END);
  if (!h->d) {
    close(h->lfd);
    h->lfd = -1;
    return km_fail(L, "IO", "libmicrohttpd did not start");
  }
  return 1;
}

/* Cuts (shutdown) every connection whose request has taken longer than request_timeout. */
static void cut_slow(km_http *h) {
  double t = now_s();
  for (km_conn *w = h->conns; w; w = w->next) {
    if (w->reading && w->fd >= 0 && t - w->since > h->request_timeout) {
      shutdown(w->fd, SHUT_RDWR);
      w->reading = 0;
      h->cut++;
    }
  }
}

static km_req *take_queued(km_http *h) {
  km_req *best = NULL;
  for (km_req *r = h->reqs; r; r = r->next)
    if (r->state == RQ_QUEUED && !r->gone && (!best || r->id < best->id)) best = r;
  if (best) best->state = RQ_TAKEN;
  return best;
}

/* "name\0value\0"... as a table (names lower-cased where lower). */
static void push_pairs(lua_State *L, const char *buf, size_t len, int lower) {
  lua_newtable(L);
  for (size_t i = 0; i < len;) {
    const char *k = buf + i, *v = k + strlen(k) + 1;
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (const char *p = k; *p; p++) luaL_addchar(&b, (char)((lower && *p >= 'A' && *p <= 'Z') ? *p + 32 : *p));
    luaL_pushresult(&b);
    lua_pushstring(L, v);
    lua_settable(L, -3);
    i = (size_t)(v - buf) + strlen(v) + 1;
  }
}

static void push_request(lua_State *L, km_req *r) {
  lua_createtable(L, 0, 9);
  lua_pushinteger(L, (lua_Integer)r->id); lua_setfield(L, -2, "id");
  lua_pushstring(L, r->method); lua_setfield(L, -2, "method");
  lua_pushstring(L, r->url); lua_setfield(L, -2, "path");
  push_pairs(L, r->args, r->args_len, 0);
  lua_setfield(L, -2, "query");
  lua_pushlstring(L, r->body ? r->body : "", r->body_len); lua_setfield(L, -2, "body");
  lua_pushstring(L, r->peer); lua_setfield(L, -2, "peer");
  lua_pushstring(L, r->client); lua_setfield(L, -2, "client");
  push_pairs(L, r->hdrs, r->hdrs_len, 1);
  lua_setfield(L, -2, "headers");
}

static int l_poll(lua_State *L) {
  km_http *h = http_check(L);
  lua_Number ms = luaL_optnumber(L, 2, 0);
  double deadline = now_s() + ms / 1e3;
  pthread_mutex_lock(&h->mu);
  cut_slow(h);
  km_req *r;
  while (!(r = take_queued(h))) {
    double left = deadline - now_s();
    if (left <= 0) break;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double wait = left < 0.05 ? left : 0.05; /* the slow-request watch runs meanwhile */
    long ns = ts.tv_nsec + (long)(wait * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_cond_timedwait(&h->queued, &h->mu, &ts);
    cut_slow(h);
  }
  if (!r) { pthread_mutex_unlock(&h->mu); return 0; }
  /* copied while held: the connection's thread waits for the answer and touches nothing */
  pthread_mutex_unlock(&h->mu);
  push_request(L, r);
  return 1;
}

/* Checks the headers table at idx (none, or string names to string values with no newline).
 * Raises on a bad one: called before h->mu is taken, so no error leaves it locked. */
static void check_headers(lua_State *L, int idx) {
  if (lua_isnoneornil(L, idx)) return;
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "a header's name and value must be strings");
    size_t kl, vl;
    const char *k = lua_tolstring(L, -2, &kl), *v = lua_tolstring(L, -1, &vl);
    if (memchr(k, '\n', kl) || memchr(v, '\n', vl) || memchr(v, '\r', vl)) luaL_error(L, "a header with a newline");
    lua_pop(L, 1);
  }
}

/* The headers table at idx (checked by check_headers) as "name\0value\0"... into r->out_hdrs.
 * Raises nothing: it runs under h->mu. -> 0, or -1 out of memory */
static int set_headers(lua_State *L, int idx, km_req *r) {
  size_t cap = 0;
  free(r->out_hdrs);
  r->out_hdrs = NULL;
  r->out_hdrs_len = 0;
  if (lua_isnoneornil(L, idx)) return 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    size_t kl, vl;
    const char *k = lua_tolstring(L, -2, &kl), *v = lua_tolstring(L, -1, &vl);
    lua_pop(L, 1);
    if (append(&r->out_hdrs, &r->out_hdrs_len, &cap, k, kl + 1) || append(&r->out_hdrs, &r->out_hdrs_len, &cap, v, vl + 1)) {
      lua_pop(L, 1);
      return -1;
    }
  }
  return 0;
}

/* The request whose id is argument 2, or NULL; h->mu is locked either way. */
static km_req *req_locked(lua_State *L, km_http *h) {
  uint64_t id = (uint64_t)luaL_checkinteger(L, 2);
  pthread_mutex_lock(&h->mu);
  return req_find(h, id);
}

/* The request id at 2, locked (h->mu held on success). -> r | NULL (pushed the GONE triple) */
static km_req *lock_req(lua_State *L, km_http *h, int *nret) {
  km_req *r = req_locked(L, h);
  if (r && !r->gone) return r;
  if (r) { r->lua_done = 1; req_release(h, r); }
  pthread_mutex_unlock(&h->mu);
  *nret = km_fail(L, "GONE", "request %I: the client is gone", lua_tointeger(L, 2));
  return NULL;
}

/* A request answered already: the lock let go, then the misuse raised. */
static int not_taken(lua_State *L, km_http *h) {
  pthread_mutex_unlock(&h->mu);
  return luaL_argerror(L, 2, "answered already");
}

/* The end of an answer made under h->mu: its connection woken, the lock let go, true. */
static int answered(lua_State *L, km_http *h) {
  pthread_cond_broadcast(&h->answered);
  pthread_mutex_unlock(&h->mu);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_respond(lua_State *L) {
  km_http *h = http_check(L);
  int status = (int)luaL_checkinteger(L, 3);
  size_t n;
  const char *body = luaL_optlstring(L, 4, "", &n);
  check_headers(L, 5);
  int nret = 0;
  km_req *r = lock_req(L, h, &nret);
  if (!r) return nret;
  if (r->state != RQ_TAKEN) return not_taken(L, h);
  free(r->out);
  r->out = malloc(n ? n : 1);
  if (r->out) memcpy(r->out, body, n);
  r->out_len = r->out ? n : 0;
  if (set_headers(L, 5, r)) r->out_len = 0, r->status = 500;
  else r->status = status;
  r->state = RQ_ANSWERED;
  r->lua_done = 1;
  return answered(L, h);
}

static int l_stream(lua_State *L) {
  km_http *h = http_check(L);
  int status = (int)luaL_checkinteger(L, 3);
  check_headers(L, 4);
  int nret = 0;
  km_req *r = lock_req(L, h, &nret);
  if (!r) return nret;
  if (r->state != RQ_TAKEN) return not_taken(L, h);
  r->status = set_headers(L, 4, r) ? 500 : status;
  r->streaming = 1;
  r->state = RQ_ANSWERED;
  return answered(L, h);
}

static int l_write(lua_State *L) {
  km_http *h = http_check(L);
  size_t n;
  const char *s = luaL_checklstring(L, 3, &n);
  int nret = 0;
  km_req *r = lock_req(L, h, &nret);
  if (!r) return nret;
  int bad = !r->streaming || r->ended;
  if (!bad && append(&r->out, &r->out_len, &r->out_cap, s, n)) bad = 2;
  pthread_cond_broadcast(&h->answered);
  pthread_mutex_unlock(&h->mu);
  if (bad == 1) return luaL_argerror(L, 2, "not a stream under way");
  if (bad == 2) return km_fail(L, "NOMEM", "out of memory");
  lua_pushboolean(L, 1);
  return 1;
}

static int l_finish(lua_State *L) {
  km_http *h = http_check(L);
  km_req *r = req_locked(L, h);
  if (r) {
    r->ended = 1;
    r->lua_done = 1;
    pthread_cond_broadcast(&h->answered);
    req_release(h, r);
  }
  pthread_mutex_unlock(&h->mu);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_alive(lua_State *L) {
  km_http *h = http_check(L);
  km_req *r = req_locked(L, h);
  int alive = r && !r->gone;
  pthread_mutex_unlock(&h->mu);
  lua_pushboolean(L, alive);
  return 1;
}

static int l_port(lua_State *L) {
  km_http *h = http_check(L);
  lua_pushinteger(L, h->port);
  return 1;
}

static int l_stats(lua_State *L) {
  km_http *h = http_check(L);
  lua_Integer open = 0;
  pthread_mutex_lock(&h->mu);
  for (km_req *r = h->reqs; r; r = r->next) open++;
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, h->connections); lua_setfield(L, -2, "connections");
  lua_pushinteger(L, open); lua_setfield(L, -2, "open");
  lua_pushinteger(L, h->cut); lua_setfield(L, -2, "cut");
  pthread_mutex_unlock(&h->mu);
  return 1;
}

static int l_close(lua_State *L) {
  km_http *h = luaL_checkudata(L, 1, KM_HTTP_MT);
  if (h->d) {
    pthread_mutex_lock(&h->mu);
    h->closing = 1;
    pthread_cond_broadcast(&h->answered);
    pthread_mutex_unlock(&h->mu);
    MHD_stop_daemon(h->d);
    h->d = NULL;
    while (h->reqs) {
      km_req *r = h->reqs;
      h->reqs = r->next;
      req_free(r);
    }
    while (h->conns) {
      km_conn *w = h->conns;
      h->conns = w->next;
      free(w);
    }
    for (int i = 0; i < h->ntokens; i++) { free(h->token_name[i]); free(h->token_secret[i]); }
    h->ntokens = 0;
    pthread_cond_destroy(&h->queued);
    pthread_cond_destroy(&h->answered);
    pthread_mutex_destroy(&h->mu);
  }
  if (h->lfd >= 0) close(h->lfd);
  h->lfd = -1;
  return 0;
}

static int l_read_secret(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  FILE *f = fopen(path, "rb");
  if (!f) return km_fail(L, errno == ENOENT ? "NOT_FOUND" : "IO", "%s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
    fclose(f);
    return km_fail(L, "IO", "%s: not a regular file", path);
  }
  if ((st.st_mode & 077) || st.st_uid != geteuid()) {
    char mode[8];
    snprintf(mode, sizeof mode, "%03o", (unsigned)(st.st_mode & 0777));
    fclose(f);
    return km_fail(L, "INSECURE", "%s: a token file must be this user's and readable by no one else (chmod 600; its mode is %s)",
                   path, mode);
  }
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  char buf[4096];
  size_t n, total = 0;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0 && total < (1u << 20)) {
    luaL_addlstring(&b, buf, n);
    total += n;
  }
  fclose(f);
  luaL_pushresult(&b);
  return 1;
}

int luaopen_km_http(lua_State *L) {
  static const luaL_Reg methods[] = {{"poll", l_poll},     {"respond", l_respond}, {"stream", l_stream},
                                     {"write", l_write},   {"finish", l_finish},   {"alive", l_alive},
                                     {"port", l_port},     {"stats", l_stats},     {"close", l_close},
                                     {NULL, NULL}};
  static const luaL_Reg fns[] = {{"listen", l_listen}, {"read_secret", l_read_secret}, {NULL, NULL}};
  km_newclass(L, KM_HTTP_MT, methods, l_close);
  luaL_newlib(L, fns);
  return 1;
}
