/* A streaming OpenAI-compatible emulator and a raw load client, for client-capacity benches.
 *
 * serve: N forked processes (SO_REUSEPORT, one epoll loop each, each pinned to one of the
 *        allowed cores), /v1/completions and /v1/chat/completions as SSE over chunked
 *        HTTP/1.1 keep-alive, one HTTP chunk per SSE message (as uvicorn sends them), usage in
 *        the last data message when stream_options.include_usage is asked, then [DONE].
 *        --ttft-ms / --itl-ms 0 (default) write the whole response at once.
 *        /v1/models and /health answer; GET /emu/stats gives the emulator's own delay per
 *        request (kernel receive of the request -> first token written, minus the TTFT:
 *        count, p50/p99/max in us, all processes) and every token's lateness against its
 *        due time (tokens, tokens_late: more than half a gap late, token_late_max_us), GET
 *        /emu/late those late tokens per 10 ms of CLOCK_MONOTONIC (the clock of the client's
 *        records: a stretch of shared reads is read beside the emulator's own lateness),
 *        GET /emu/reset zeroes them all; else 404.
 * load:  N forked processes, C keep-alive connections in all, back-to-back streaming requests,
 *        counts messages carrying choices; prints "requests chunks seconds mean_ttft_s".
 *
 *   cc -O2 -o emu emu.c
 *   emu serve --port P [--procs N] [--ttft-ms T] [--itl-ms I] [--model NAME]
 *   emu load --port P --concurrency C --requests N --osl L [--procs N] [--chat]
 *
 * Built by bench/emulator/__init__.py at bench time; the Python emulator beside it is the
 * fallback where no C compiler exists.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXFD 65536
#define INCAP 65536

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------- growable output buffer */
typedef struct {
    char *p;
    size_t len, off, cap;
} obuf;

static void ob_put(obuf *b, const char *s, size_t n) {
    if (b->len + n > b->cap) {
        if (b->off > 0) { /* compact first */
            memmove(b->p, b->p + b->off, b->len - b->off);
            b->len -= b->off;
            b->off = 0;
        }
        if (b->len + n > b->cap) {
            size_t cap = b->cap ? b->cap : 4096;
            while (cap < b->len + n) cap *= 2;
            b->p = realloc(b->p, cap);
            b->cap = cap;
        }
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void ob_chunk(obuf *b, const char *s, size_t n) { /* one HTTP chunk */
    char h[32];
    int k = snprintf(h, sizeof h, "%zx\r\n", n);
    ob_put(b, h, k);
    ob_put(b, s, n);
    ob_put(b, "\r\n", 2);
}

/* ---------------------------------------------------------------- server */
static double g_ttft, g_itl;
static const char *g_model = "emulator";
static char g_chunk_cmpl[512], g_chunk_chat[512];
static size_t g_chunk_cmpl_n, g_chunk_chat_n;

typedef struct {
    int fd;
    char in[INCAP];
    size_t inlen;
    obuf out;
    /* the stream in progress (one per connection) */
    int streaming, chat, usage;
    long left, n, prompt;
    double due;
    double rx;  /* kernel receive time (CLOCK_REALTIME) of the read that completed the request */
    int first_pending;  /* the first token of the stream is not written yet */
} conn;

static conn *conns[MAXFD];
static int g_maxfd;
static int g_ep;

/* The emulator's own delay per generation request, kernel receive of the request -> its first
 * token written (minus the configured TTFT): a histogram in memory shared by every process,
 * 10 us bins up to 2 s. GET /emu/stats reads it, GET /emu/reset zeroes it. */
#define NBINS 200000
/* Late tokens per 10 ms of CLOCK_MONOTONIC, by their due time: a ring of 655 s, read back as
 * the bins up to now (a run between two resets is shorter). */
#define NLATE 65536
typedef struct {
    long count, over;
    double max_us;
    /* Every token written: how many, how many more than half an inter-token gap after their
     * due time (a client reads two such tokens of a stream as one: not the client's error),
     * and the latest. */
    long tokens, tokens_late;
    double token_late_max_us;
    long bins[NBINS];
    long late_bins[NLATE];
} hist_t;
static hist_t *g_hist;

static double real_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void note_delay(conn *c) {
    if (!g_hist || c->rx <= 0) return;
    double us = (real_s() - c->rx - g_ttft) * 1e6;
    if (us < 0) us = 0;
    long b = (long)(us / 10);
    __atomic_fetch_add(&g_hist->count, 1, __ATOMIC_RELAXED);
    if (b >= NBINS) __atomic_fetch_add(&g_hist->over, 1, __ATOMIC_RELAXED);
    else __atomic_fetch_add(&g_hist->bins[b], 1, __ATOMIC_RELAXED);
    if (us > g_hist->max_us) g_hist->max_us = us; /* racy across processes; a bound is enough */
}

static void note_token(const conn *c) {
    if (!g_hist) return;
    double late = now_s() - c->due;
    __atomic_fetch_add(&g_hist->tokens, 1, __ATOMIC_RELAXED);
    if (late > g_itl / 2) {
        __atomic_fetch_add(&g_hist->tokens_late, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&g_hist->late_bins[(long)(c->due * 100) % NLATE], 1, __ATOMIC_RELAXED);
    }
    if (late * 1e6 > g_hist->token_late_max_us) g_hist->token_late_max_us = late * 1e6; /* racy */
}

static double hist_pct(double p) {
    long want = (long)(p / 100.0 * g_hist->count), seen = 0;
    for (long b = 0; b < NBINS; b++) {
        seen += g_hist->bins[b];
        if (seen > want) return b * 10.0 + 5.0;
    }
    return g_hist->max_us;
}

static void want_out(conn *c, int on) {
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.fd = c->fd};
    epoll_ctl(g_ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void close_conn(conn *c) {
    epoll_ctl(g_ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    conns[c->fd] = NULL;
    free(c->out.p);
    free(c);
}

static int flush_out(conn *c) { /* -1: closed */
    while (c->out.off < c->out.len) {
        ssize_t w = write(c->fd, c->out.p + c->out.off, c->out.len - c->out.off);
        if (w < 0) {
            if (errno == EAGAIN) {
                want_out(c, 1);
                return 0;
            }
            close_conn(c);
            return -1;
        }
        c->out.off += (size_t)w;
    }
    c->out.off = c->out.len = 0;
    want_out(c, 0);
    return 0;
}

static void emit_token(conn *c) {
    if (c->first_pending) {
        c->first_pending = 0;
        note_delay(c);
    }
    if (c->chat) ob_chunk(&c->out, g_chunk_chat, g_chunk_chat_n);
    else ob_chunk(&c->out, g_chunk_cmpl, g_chunk_cmpl_n);
    c->left--;
    if (c->left > 0) return;
    if (c->usage) {
        char u[512];
        int k = snprintf(u, sizeof u,
                         "data: {\"id\":\"emu\",\"object\":\"%s\",\"model\":\"%s\",\"choices\":[],"
                         "\"usage\":{\"prompt_tokens\":%ld,\"completion_tokens\":%ld,"
                         "\"total_tokens\":%ld}}\n\n",
                         c->chat ? "chat.completion.chunk" : "text_completion", g_model,
                         c->prompt, c->n, c->prompt + c->n);
        ob_chunk(&c->out, u, k);
    }
    ob_chunk(&c->out, "data: [DONE]\n\n", 14);
    ob_put(&c->out, "0\r\n\r\n", 5);
    c->streaming = 0;
}

static long json_int(const char *body, size_t n, const char *key, long dflt) {
    const char *p = memmem(body, n, key, strlen(key));
    if (!p) return dflt;
    p += strlen(key);
    while (p < body + n && (*p == ' ' || *p == ':' || *p == '"')) p++;
    return strtol(p, NULL, 10);
}

static long count_words(const char *body, size_t n) {
    /* words of the prompt (or the first message's content): spaces + 1 until the closing quote */
    const char *keys[] = {"\"prompt\":", "\"content\":"};
    for (int k = 0; k < 2; k++) {
        const char *p = memmem(body, n, keys[k], strlen(keys[k]));
        if (!p) continue;
        p += strlen(keys[k]);
        while (p < body + n && *p != '"') p++;
        long w = 1;
        for (p++; p < body + n && *p != '"'; p++) {
            if (*p == '\\') p++;
            else if (*p == ' ') w++;
        }
        return w;
    }
    return 1;
}

static void respond_simple(conn *c, const char *status, const char *ctype, const char *body) {
    char h[256];
    int k = snprintf(h, sizeof h,
                     "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n\r\n", status,
                     ctype, strlen(body));
    ob_put(&c->out, h, k);
    ob_put(&c->out, body, strlen(body));
}

/* GET /emu/late: {"bin_s":0.01,"late":[[bin,count],...]}, bin = CLOCK_MONOTONIC seconds x 100
 * (floored), the bins with late tokens among the last NLATE up to now, oldest first. */
static void respond_late(conn *c) {
    long now_bin = (long)(now_s() * 100);
    obuf b = {0};
    static const char lead[] = "{\"bin_s\":0.01,\"late\":[";
    ob_put(&b, lead, sizeof lead - 1);
    int first = 1;
    for (long k = now_bin - NLATE + 1; k <= now_bin; k++) {
        if (k < 0) continue;
        long n = g_hist->late_bins[k % NLATE];
        if (!n) continue;
        char e[64];
        int m = snprintf(e, sizeof e, "%s[%ld,%ld]", first ? "" : ",", k, n);
        ob_put(&b, e, m);
        first = 0;
    }
    ob_put(&b, "]}", 3); /* with the NUL: respond_simple measures a C string */
    respond_simple(c, "200 OK", "application/json", b.p);
    free(b.p);
}

static void handle(conn *c, const char *head, size_t hlen, const char *body, size_t blen) {
    const char *sp = memchr(head, ' ', hlen);
    const char *path = sp ? sp + 1 : "/";
    if (!strncmp(path, "/v1/models", 10) || !strncmp(path, "/health", 7)) {
        char b[256];
        snprintf(b, sizeof b, "{\"object\":\"list\",\"data\":[{\"id\":\"%s\",\"object\":\"model\"}]}",
                 g_model);
        respond_simple(c, "200 OK", "application/json", b);
        return;
    }
    if (g_hist && !strncmp(path, "/emu/late", 9)) {
        respond_late(c);
        return;
    }
    if (g_hist && (!strncmp(path, "/emu/stats", 10) || !strncmp(path, "/emu/reset", 10))) {
        char b[384];
        if (path[5] == 'r') memset(g_hist, 0, sizeof *g_hist);
        snprintf(b, sizeof b,
                 "{\"count\":%ld,\"p50_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%.1f,"
                 "\"over_2s\":%ld,\"tokens\":%ld,\"tokens_late\":%ld,"
                 "\"token_late_max_us\":%.1f}",
                 g_hist->count, hist_pct(50), hist_pct(99), g_hist->max_us, g_hist->over,
                 g_hist->tokens, g_hist->tokens_late, g_hist->token_late_max_us);
        respond_simple(c, "200 OK", "application/json", b);
        return;
    }
    int chat = !strncmp(path, "/v1/chat/completions", 20);
    if (!chat && strncmp(path, "/v1/completions", 15)) {
        respond_simple(c, "404 Not Found", "application/json", "{\"detail\":\"Not Found\"}");
        return;
    }
    long n = json_int(body, blen, "\"max_completion_tokens\"", -1);
    if (n < 0) n = json_int(body, blen, "\"max_tokens\"", 16);
    if (n < 1) n = 1;
    c->chat = chat;
    c->usage = memmem(body, blen, "include_usage", 13) != NULL;
    c->n = c->left = n;
    c->prompt = count_words(body, blen);
    c->streaming = 1;
    c->first_pending = 1;
    static const char hs[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             "Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n";
    ob_put(&c->out, hs, sizeof hs - 1);
    if (g_ttft <= 0 && g_itl <= 0) {
        while (c->streaming) emit_token(c);
    } else {
        c->due = now_s() + g_ttft;
    }
}

static void parse_requests(conn *c) {
    while (!c->streaming) {
        char *end = memmem(c->in, c->inlen, "\r\n\r\n", 4);
        if (!end) return;
        size_t hlen = end - c->in;
        long clen = 0;
        for (char *p = c->in; p < end; p++) {
            if ((*p == 'c' || *p == 'C') && !strncasecmp(p, "content-length:", 15)) {
                clen = strtol(p + 15, NULL, 10);
                break;
            }
        }
        size_t total = hlen + 4 + (size_t)clen;
        if (total > INCAP) { /* too big for us: refuse and close */
            c->inlen = 0;
            respond_simple(c, "413 Payload Too Large", "text/plain", "too large");
            return;
        }
        if (c->inlen < total) return;
        handle(c, c->in, hlen, c->in + hlen + 4, (size_t)clen);
        memmove(c->in, c->in + total, c->inlen - total);
        c->inlen -= total;
    }
}

static int serve_loop(int lfd) {
    g_ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
    epoll_ctl(g_ep, EPOLL_CTL_ADD, lfd, &ev);
    struct epoll_event evs[512];
    int timed = g_ttft > 0 || g_itl > 0;
    /* The earliest due token wakes the loop through a timerfd set to its absolute time (ns):
     * epoll_wait's millisecond timeout would send every token up to 1 ms late, a jitter of
     * ~0.3 ms sd per token that a client's ITL spread would be blamed for. */
    int tfd = timed ? timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC) : -1;
    if (tfd >= 0) {
        struct epoll_event te = {.events = EPOLLIN, .data.fd = tfd};
        epoll_ctl(g_ep, EPOLL_CTL_ADD, tfd, &te);
        prctl(PR_SET_TIMERSLACK, 1UL); /* no timer slack (50 us by default) */
    }
    double armed = 0;
    for (;;) {
        int timeout = -1;
        double t = now_s();
        if (timed) { /* wake for the earliest due stream */
            double next = 1e300;
            for (int fd = 0; fd <= g_maxfd; fd++)
                if (conns[fd] && conns[fd]->streaming && conns[fd]->due < next) next = conns[fd]->due;
            if (next < 1e300) {
                if (next <= t) timeout = 0;
                else if (tfd < 0) timeout = (int)((next - t) * 1000) + 1;
                else if (next != armed) {
                    struct itimerspec its = {0};
                    its.it_value.tv_sec = (time_t)next;
                    its.it_value.tv_nsec = (long)((next - (double)(time_t)next) * 1e9);
                    if (its.it_value.tv_nsec >= 1000000000L) its.it_value.tv_nsec = 999999999L;
                    if (timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL) == 0) armed = next;
                    else timeout = (int)((next - t) * 1000) + 1;
                }
            }
        }
        int k = epoll_wait(g_ep, evs, 512, timeout);
        for (int i = 0; i < k; i++) {
            int fd = evs[i].data.fd;
            if (fd == tfd) {
                uint64_t fired;
                if (read(tfd, &fired, sizeof fired) < 0) { /* EAGAIN: already read */ }
                armed = 0;
                continue;
            }
            if (fd == lfd) {
                for (;;) {
                    int cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
                    if (cfd < 0) break;
                    if (cfd >= MAXFD) {
                        close(cfd);
                        continue;
                    }
                    int one = 1;
                    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    setsockopt(cfd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
                    conn *c = calloc(1, sizeof *c);
                    c->fd = cfd;
                    conns[cfd] = c;
                    if (cfd > g_maxfd) g_maxfd = cfd;
                    struct epoll_event e = {.events = EPOLLIN, .data.fd = cfd};
                    epoll_ctl(g_ep, EPOLL_CTL_ADD, cfd, &e);
                }
                continue;
            }
            conn *c = conns[fd];
            if (!c) continue;
            if (evs[i].events & EPOLLOUT) {
                if (flush_out(c) < 0) continue;
            }
            if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                /* recvmsg for the kernel's receive timestamp of these bytes */
                struct iovec iov = {c->in + c->inlen, INCAP - c->inlen};
                char ctl[256];
                struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                                    .msg_controllen = sizeof ctl};
                ssize_t r = recvmsg(fd, &mh, 0);
                c->rx = 0;
                for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); r > 0 && cm; cm = CMSG_NXTHDR(&mh, cm)) {
                    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
                        struct timespec ts;
                        memcpy(&ts, CMSG_DATA(cm), sizeof ts);
                        c->rx = ts.tv_sec + ts.tv_nsec * 1e-9;
                    }
                }
                if (r > 0 && c->rx <= 0) c->rx = real_s();
                if (r <= 0) {
                    if (r < 0 && errno == EAGAIN) continue;
                    close_conn(c);
                    continue;
                }
                c->inlen += (size_t)r;
                parse_requests(c);
                if (flush_out(c) < 0) continue;
            }
        }
        if (timed) {
            t = now_s();
            for (int fd = 0; fd <= g_maxfd; fd++) {
                conn *c = conns[fd];
                if (!c || !c->streaming || c->due > t) continue;
                note_token(c);
                emit_token(c);
                c->due += g_itl;
                if (!c->streaming) parse_requests(c);
                flush_out(c);
            }
        }
    }
    return 0;
}

static int listen_on(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 8192) < 0) {
        perror("bind/listen");
        exit(2);
    }
    return fd;
}

static void pin_to(int k) { /* the k-th allowed core (mod their number) */
    cpu_set_t set, one;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return;
    int n = CPU_COUNT(&set), seen = 0;
    if (n <= 1) return;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &set)) continue;
        if (seen++ == k % n) {
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            sched_setaffinity(0, sizeof one, &one);
            return;
        }
    }
}

static int fork_n(int procs, int (*body)(int, void *), void *arg) {
    /* runs body(k) in `procs` children (each dies with the parent); returns when all exit */
    pid_t pids[256];
    if (procs > 256) procs = 256;
    for (int k = 0; k < procs; k++) {
        pid_t p = fork();
        if (p == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            pin_to(k);
            _exit(body(k, arg));
        }
        pids[k] = p;
    }
    int rc = 0;
    for (int k = 0; k < procs; k++) {
        int st;
        waitpid(pids[k], &st, 0);
        if (WIFEXITED(st) && WEXITSTATUS(st)) rc = WEXITSTATUS(st);
    }
    return rc;
}

static int g_lfds[256];

static int serve_child(int k, void *arg) {
    int procs = *(int *)arg;
    for (int i = 0; i < procs; i++)
        if (i != k) close(g_lfds[i]);
    return serve_loop(g_lfds[k]);
}

/* ---------------------------------------------------------------- load client */
typedef struct {
    int port, conc, chat;
    long requests, osl;
    long *shared; /* [requests left, chunks, done, ttft_ns_sum] */
} load_args;

typedef struct {
    int fd;
    double t0;
    int got_first;
    char tail[8];
} lconn;

static int load_child(int k, void *arg) {
    load_args *a = arg;
    int procs = (int)a->shared[4];
    int conc = a->conc / procs + (k < a->conc % procs ? 1 : 0);
    char body[1024], req[2048];
    int bl;
    if (a->chat)
        bl = snprintf(body, sizeof body,
                      "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a b c d\"}],"
                      "\"max_completion_tokens\":%ld,\"stream\":true,"
                      "\"stream_options\":{\"include_usage\":true}}", a->osl);
    else
        bl = snprintf(body, sizeof body,
                      "{\"model\":\"m\",\"prompt\":\"a b c d\",\"max_tokens\":%ld,\"stream\":true,"
                      "\"stream_options\":{\"include_usage\":true}}", a->osl);
    int rl = snprintf(req, sizeof req,
                      "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      "Content-Length: %d\r\n\r\n%s",
                      a->chat ? "/v1/chat/completions" : "/v1/completions", bl, body);
    const char *needle = "\"choices\":[{";
    int ep = epoll_create1(0);
    lconn *cs = calloc(conc, sizeof *cs);
    long chunks = 0, done = 0, ttft_ns = 0;
    int open = 0;
    for (int i = 0; i < conc; i++) {
        if (__atomic_fetch_sub(&a->shared[0], 1, __ATOMIC_RELAXED) <= 0) break;
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(a->port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
            perror("connect");
            return 3;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fcntl(fd, F_SETFL, O_NONBLOCK);
        cs[i].fd = fd;
        cs[i].t0 = now_s();
        if (write(fd, req, rl) != rl) return 3;
        struct epoll_event e = {.events = EPOLLIN, .data.u32 = i};
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
        open++;
    }
    static char buf[1 << 20];
    struct epoll_event evs[512];
    size_t nl = strlen(needle);
    while (open > 0) {
        int n = epoll_wait(ep, evs, 512, 10000);
        if (n <= 0) {
            fprintf(stderr, "load: stalled\n");
            return 3;
        }
        for (int i = 0; i < n; i++) {
            lconn *c = &cs[evs[i].data.u32];
            ssize_t r = read(c->fd, buf, sizeof buf);
            if (r <= 0) {
                if (r < 0 && errno == EAGAIN) continue;
                fprintf(stderr, "load: connection closed\n");
                return 3;
            }
            if (!c->got_first && memmem(buf, r, "data: {", 7)) {
                c->got_first = 1;
                ttft_ns += (long)((now_s() - c->t0) * 1e9);
            }
            for (char *p = buf; (p = memmem(p, buf + r - p, needle, nl)); p += nl) chunks++;
            /* the end of a chunked body: "0\r\n\r\n", possibly split across reads */
            char joined[16 + 8];
            size_t keep = r < 8 ? (size_t)r : 8;
            memcpy(joined, c->tail, 8);
            memcpy(joined + 8, buf + r - keep, keep);
            size_t jl = 8 + keep;
            memmove(c->tail, joined + jl - 8, 8);
            if (jl >= 5 && !memcmp(joined + jl - 5, "0\r\n\r\n", 5)) {
                done++;
                memset(c->tail, 0, 8);
                if (__atomic_fetch_sub(&a->shared[0], 1, __ATOMIC_RELAXED) <= 0) {
                    close(c->fd);
                    open--;
                    continue;
                }
                c->got_first = 0;
                c->t0 = now_s();
                if (write(c->fd, req, rl) != rl) return 3;
            }
        }
    }
    __atomic_fetch_add(&a->shared[1], chunks, __ATOMIC_RELAXED);
    __atomic_fetch_add(&a->shared[2], done, __ATOMIC_RELAXED);
    __atomic_fetch_add(&a->shared[3], ttft_ns, __ATOMIC_RELAXED);
    return 0;
}

/* ---------------------------------------------------------------- main */
static const char *opt(int argc, char **argv, const char *name, const char *dflt) {
    for (int i = 2; i < argc - 1; i++)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    return dflt;
}

static int flag(int argc, char **argv, const char *name) {
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], name)) return 1;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: emu serve|load --port P ...\n");
        return 64;
    }
    signal(SIGPIPE, SIG_IGN);
    int port = atoi(opt(argc, argv, "--port", "0"));
    int procs = atoi(opt(argc, argv, "--procs", "1"));
    if (procs < 1) procs = 1;
    if (!strcmp(argv[1], "serve")) {
        g_ttft = atof(opt(argc, argv, "--ttft-ms", "0")) / 1000.0;
        g_itl = atof(opt(argc, argv, "--itl-ms", "0")) / 1000.0;
        g_model = opt(argc, argv, "--model", "emulator");
        g_chunk_cmpl_n = snprintf(g_chunk_cmpl, sizeof g_chunk_cmpl,
                                  "data: {\"id\":\"emu\",\"object\":\"text_completion\",\"model\":"
                                  "\"%s\",\"choices\":[{\"index\":0,\"text\":\" tok\","
                                  "\"logprobs\":null,\"finish_reason\":null}]}\n\n", g_model);
        g_chunk_chat_n = snprintf(g_chunk_chat, sizeof g_chunk_chat,
                                  "data: {\"id\":\"emu\",\"object\":\"chat.completion.chunk\","
                                  "\"model\":\"%s\",\"choices\":[{\"index\":0,\"delta\":"
                                  "{\"content\":\" tok\"},\"finish_reason\":null}]}\n\n", g_model);
        g_hist = mmap(NULL, sizeof *g_hist, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                      -1, 0);
        if (g_hist == MAP_FAILED) g_hist = NULL;
        /* every listening socket is bound before "ready": the port answers from then on */
        if (procs > 256) procs = 256;
        for (int k = 0; k < procs; k++) g_lfds[k] = listen_on(port);
        printf("ready %d\n", procs);
        fflush(stdout);
        return fork_n(procs, serve_child, &procs);
    }
    if (!strcmp(argv[1], "load")) {
        load_args a = {.port = port, .conc = atoi(opt(argc, argv, "--concurrency", "64")),
                       .chat = flag(argc, argv, "--chat"),
                       .requests = atol(opt(argc, argv, "--requests", "1000")),
                       .osl = atol(opt(argc, argv, "--osl", "128"))};
        if (procs > a.conc) procs = a.conc;
        a.shared = mmap(NULL, 8 * sizeof(long), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        a.shared[0] = a.requests;
        a.shared[4] = procs;
        double t0 = now_s();
        int rc = fork_n(procs, load_child, &a);
        double dur = now_s() - t0;
        printf("%ld %ld %.6f %.6f\n", a.shared[2], a.shared[1], dur,
               a.shared[2] ? a.shared[3] * 1e-9 / a.shared[2] : 0.0);
        return rc;
    }
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 64;
}
