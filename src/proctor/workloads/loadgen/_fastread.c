/* The raw client's common read in C: a streamed token of a completions or chat response.
 *
 * At concurrency 1000 on one core the client's loop runs near the end of its core, and the
 * Python of each read was half its CPU (bench/NOTES.md, *The common read in C*). This does,
 * for each ready connection of a pool, exactly what fasthttp.Conn._readable and
 * sse.StreamState.feed's short path do in Python: recvmsg with the kernel receive stamp
 * (rxtime.ReadClock.arrival's arithmetic, the clock offset read again every rxtime.OFFSET_S
 * by rxtime.clock_offset_ns), and for each whole HTTP chunk at the read's start holding one
 * `data: {...}` message whose object is the common token message (sse._common_text: a
 * completions text or a chat delta's content; a chat stream's role-only opener is taken as
 * feed takes it, as no token; read by a strict scan of its JSON where that can decide, else
 * by the parser), the record's update (TTFT or one more ITL, the chunk count, the text). The
 * rest of the read (a response's usage and last chunk, a chunk the read cut, any other
 * shape) is handed to the Python path with its stamp: the record comes out the same either
 * way (tests/workloads/test_fastread.py).
 *
 * drain(epfd, conns, buf, clock, next_due, seen) -> (handed, delays, unstamped, due)
 *   one epoll_wait, no waiting, on the pool's epoll set (fasthttp.Pool._drain; conns: fd ->
 *   Conn). A connection whose read is the common one (Conn.between, a request not over,
 *   nothing pending in its stream) is read here; any other is handed back to be read in
 *   Python. handed: a Conn (read it: Conn._readable), (conn, rest, ts, now) (the rest of a
 *   read whose leading token chunks were taken: Conn._handle), (conn, exc_or_None) (the read
 *   failed, or the peer closed: Conn.connection_lost), (conn, exc, "client_error") (the
 *   tokens raised: the request fails). delays: the reads' delays after arrival (native
 *   doubles; 0.0 unstamped) where clock.recording, for ReadClock.note_all. due: the call
 *   stopped after a read because a paced send came due (next_due, perf_counter seconds);
 *   what it did not read stays ready. seen: None, or a list that gets (bytes, ts, now,
 *   taken) of every read done here (tests).
 *
 * take_tokens(data, ts, state, record, chat) -> taken
 *   the same for bytes already read, from a chunk boundary: a body whose first bytes came in
 *   the read that ended the response's head (a zero-ITL server answers whole, in one read).
 *
 * scan(body, chat) -> (text, has_role) or None; counts() -> (scanned, parsed)
 *   the scan of one token message alone (None: the parser decides), and how many token
 *   messages the scan and the parser have read in this process: for tests and benches.
 *
 * Linux only (SO_TIMESTAMPNS, epoll); elsewhere the module does not build and the Python
 * path runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#ifndef __linux__
#error "the C read path needs Linux (SO_TIMESTAMPNS); the Python path runs elsewhere"
#endif

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>

#define SIZE_DIGITS 16      /* as fasthttp's find(b"\r\n", 0, 18): at most 16 hex digits */

static PyObject *g_loads; /* orjson.loads, or json's where orjson is missing (sse.loads) */
static PyObject *g_failed_finish; /* sse.FAILED_FINISH */
static Py_ssize_t g_scanned, g_parsed; /* token messages read by scan_common / the parser */
static PyObject *g_clock_offset_ns; /* rxtime.clock_offset_ns, every rxtime.OFFSET_S */
static double g_offset_s, g_max_believed_s; /* rxtime.OFFSET_S, rxtime.MAX_BELIEVED_S */
static PyObject *k_choices, *k_usage, *k_finish, *k_text, *k_delta, *k_content,
    *k_reasoning_content, *k_reasoning, *k_role;
static PyObject *a_got_first, *a_last, *a_st, *a_itl, *a_chunks, *a_pieces, *a_ttft, *a_off,
    *a_off_until, *a_recording, *a_between, *a_ex, *a_outcome, *a_state, *a_tail, *a_cr,
    *a_chat, *a_record, *a_flight;


/* Attributes read and written by their slot's offset. Every object a read touches is of a
 * class with __slots__ (Conn, _Exchange, StreamState, RequestRecord, Flight, ReadClock), and
 * PyObject_GetAttr on a slot (type lookup, descriptor call) cost ~40 ns: with the twenty a
 * read makes, more than the Python bytecode it replaced, whose attribute loads CPython
 * specializes (perf: PyMember_GetOne 4.4 % of the client's core at 1000 streams). The offset
 * comes from the member descriptor of the first class an attribute is met on; an object of
 * any other class, or a slot left unset, goes by name as before. */
#ifndef Py_T_OBJECT_EX
#define Py_T_OBJECT_EX T_OBJECT_EX
#endif
#ifndef Py_READONLY
#define Py_READONLY READONLY
#endif

typedef struct {
    PyObject **name;     /* the interned name */
    PyTypeObject *exact; /* the class the offset is for (NULL: not looked up yet) */
    Py_ssize_t off;
    int tried, writable;
} slot_t;

/* 1 when obj's class holds the attribute in a slot (the offset is then set), else 0 */
static int slot_at(slot_t *s, PyObject *obj) {
    if (Py_TYPE(obj) == s->exact) return 1;
    if (s->tried) return 0;
    s->tried = 1;
    PyObject *d = PyObject_GetAttr((PyObject *)Py_TYPE(obj), *s->name);
    if (!d) {
        PyErr_Clear();
        return 0;
    }
    int found = 0;
    if (Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type == Py_T_OBJECT_EX) {
            s->exact = (PyTypeObject *)Py_NewRef((PyObject *)Py_TYPE(obj));
            s->off = m->offset;
            s->writable = !(m->flags & Py_READONLY);
            found = 1;
        }
    }
    Py_DECREF(d);
    return found;
}

/* obj.<name>: a new reference, or NULL with an exception */
static PyObject *sget(PyObject *obj, slot_t *s) {
    if (slot_at(s, obj)) {
        PyObject *v = *(PyObject **)((char *)obj + s->off);
        if (v) return Py_NewRef(v);
    }
    return PyObject_GetAttr(obj, *s->name);
}

/* obj.<name> = v: 0, or -1 with an exception */
static int sset(PyObject *obj, slot_t *s, PyObject *v) {
    if (slot_at(s, obj) && s->writable) {
        PyObject **p = (PyObject **)((char *)obj + s->off);
        PyObject *old = *p;
        *p = Py_NewRef(v);
        Py_XDECREF(old);
        return 0;
    }
    return PyObject_SetAttr(obj, *s->name, v);
}

static slot_t s_st_got_first = {&a_got_first, NULL, 0, 0, 0};
static slot_t s_st_last = {&a_last, NULL, 0, 0, 0};
static slot_t s_rec_chunks = {&a_chunks, NULL, 0, 0, 0};
static slot_t s_rec_itl = {&a_itl, NULL, 0, 0, 0};
static slot_t s_st_pieces = {&a_pieces, NULL, 0, 0, 0};
static slot_t s_st_st = {&a_st, NULL, 0, 0, 0};
static slot_t s_rec_ttft = {&a_ttft, NULL, 0, 0, 0};
static slot_t s_clk_off = {&a_off, NULL, 0, 0, 0};
static slot_t s_clk_until = {&a_off_until, NULL, 0, 0, 0};
static slot_t s_clk_recording = {&a_recording, NULL, 0, 0, 0};
static slot_t s_conn_between = {&a_between, NULL, 0, 0, 0};
static slot_t s_conn_ex = {&a_ex, NULL, 0, 0, 0};
static slot_t s_conn_flight = {&a_flight, NULL, 0, 0, 0};
static slot_t s_ex_outcome = {&a_outcome, NULL, 0, 0, 0};
static slot_t s_ex_state = {&a_state, NULL, 0, 0, 0};
static slot_t s_ex_record = {&a_record, NULL, 0, 0, 0};
static slot_t s_st_tail = {&a_tail, NULL, 0, 0, 0};
static slot_t s_st_cr = {&a_cr, NULL, 0, 0, 0};
static slot_t s_st_chat = {&a_chat, NULL, 0, 0, 0};
static slot_t s_fl_last = {&a_last, NULL, 0, 0, 0};

static long long clock_ns(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}


static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* sse._common_text: the first choice's text (a chat delta's content), or NULL (borrowed);
 * *delta_out is the chat delta (borrowed), for _role_only */
static PyObject *common_text(PyObject *obj, int chat, PyObject **delta_out) {
    if (!PyDict_CheckExact(obj)) return NULL;
    PyObject *choices = PyDict_GetItemWithError(obj, k_choices);
    if (!choices || !PyList_CheckExact(choices) || PyList_GET_SIZE(choices) == 0) return NULL;
    PyObject *usage = PyDict_GetItemWithError(obj, k_usage);
    if (usage && usage != Py_None) return NULL;
    PyObject *first = PyList_GET_ITEM(choices, 0);
    if (!PyDict_CheckExact(first)) return NULL;
    PyObject *reason = PyDict_GetItemWithError(first, k_finish);
    if (reason && reason != Py_None) {
        if (!PyUnicode_CheckExact(reason)) return NULL;
        int failed = PySet_Contains(g_failed_finish, reason);
        if (failed != 0) return NULL; /* 1: a failed finish; -1: an exception */
    }
    PyObject *text;
    if (!chat) {
        text = PyDict_GetItemWithError(first, k_text);
    } else {
        PyObject *delta = PyDict_GetItemWithError(first, k_delta);
        if (!delta || !PyDict_CheckExact(delta)) return NULL;
        int has = PyDict_Contains(delta, k_reasoning_content);
        if (has == 0) has = PyDict_Contains(delta, k_reasoning);
        if (has != 0) return NULL; /* 1: reasoning, the whole way; -1: an exception */
        *delta_out = delta;
        text = PyDict_GetItemWithError(delta, k_content);
    }
    return text && PyUnicode_CheckExact(text) ? text : NULL;
}

/* What the tokens of one read change, held here and written back once (take_end): one read's
 * tokens share its stamp, so a late read's N tokens cost one write of each field, not N. */
typedef struct {
    int open;         /* the fields below were read from the state and record */
    int got_first;    /* state.got_first */
    double last;      /* state.last */
    Py_ssize_t chunks; /* record.chunks */
    PyObject *itl;    /* record.itl (new reference) */
    PyObject *pieces; /* state.pieces (new reference) */
    PyObject *state, *record; /* borrowed */
} acc_t;

static int acc_open(acc_t *a) {
    PyObject *got = sget(a->state, &s_st_got_first);
    if (!got) return -1;
    a->got_first = PyObject_IsTrue(got);
    Py_DECREF(got);
    if (a->got_first < 0) return -1;
    PyObject *last = sget(a->state, &s_st_last);
    if (!last) return -1;
    a->last = PyFloat_AsDouble(last);
    Py_DECREF(last);
    if (a->last == -1.0 && PyErr_Occurred()) return -1;
    PyObject *chunks = sget(a->record, &s_rec_chunks);
    if (!chunks) return -1;
    a->chunks = PyLong_AsSsize_t(chunks);
    Py_DECREF(chunks);
    if (a->chunks == -1 && PyErr_Occurred()) return -1;
    if (!(a->itl = sget(a->record, &s_rec_itl))) return -1;
    if (!(a->pieces = sget(a->state, &s_st_pieces))) return -1;
    if (!PyList_Check(a->itl) || !PyList_Check(a->pieces)) {
        PyErr_SetString(PyExc_TypeError, "record.itl and state.pieces must be lists");
        return -1;
    }
    a->open = 1;
    return 0;
}

/* The fields taken so far, written back; 0, or -1 with an exception (kept if one was set) */
static int take_end(acc_t *a, int ok) {
    if (!a->open) return ok ? 0 : -1;
    PyObject *type, *value, *tb;
    if (!ok) PyErr_Fetch(&type, &value, &tb);
    int r = 0;
    PyObject *last = PyFloat_FromDouble(a->last);
    PyObject *chunks = PyLong_FromSsize_t(a->chunks);
    if (!last || !chunks || sset(a->state, &s_st_last, last) < 0 ||
        sset(a->record, &s_rec_chunks, chunks) < 0 ||
        sset(a->state, &s_st_got_first, a->got_first ? Py_True : Py_False) < 0)
        r = -1;
    Py_XDECREF(last);
    Py_XDECREF(chunks);
    Py_CLEAR(a->itl);
    Py_CLEAR(a->pieces);
    a->open = 0;
    if (!ok) {
        if (r < 0) {
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(tb);
        } else {
            PyErr_Restore(type, value, tb);
        }
        return -1;
    }
    return r;
}

/* The token into the record, as StreamState.feed's short path: 0, or -1 with an exception */
static int take(acc_t *a, double ts, PyObject *text) {
    if (!a->open && acc_open(a) < 0) return -1;
    if (a->got_first) {
        PyObject *gap = PyFloat_FromDouble(ts - a->last);
        int r = gap ? PyList_Append(a->itl, gap) : -1;
        Py_XDECREF(gap);
        if (r < 0) return -1;
    } else {
        PyObject *st = sget(a->state, &s_st_st);
        if (!st) return -1;
        double s = PyFloat_AsDouble(st);
        Py_DECREF(st);
        if (s == -1.0 && PyErr_Occurred()) return -1;
        PyObject *ttft = PyFloat_FromDouble(ts - s);
        int r = ttft ? sset(a->record, &s_rec_ttft, ttft) : -1;
        Py_XDECREF(ttft);
        if (r < 0) return -1;
        a->got_first = 1;
    }
    a->last = ts;
    a->chunks += 1;
    return PyList_Append(a->pieces, text);
}

/* The common token message read without building it (orjson's parse and the dict it builds
 * were ~0.46 of the ~0.66 us C spent on a token: bench/NOTES.md). A strict JSON scan of the
 * message that keeps only what _common_text looks at; it says "take" only where the parser
 * (sse.loads) would give a dict whose common text is the same: pure ASCII, no escapes,
 * integers of at most 16 digits, nesting under SCAN_DEPTH, each key that _common_text reads
 * at most once (a parser keeps the last of two). Anything else (a float, a backslash, a byte
 * over 0x7f, NaN, an error) is asked of the parser, as before: a scan never says "not JSON".
 * Held to the parser by tests/workloads/test_fastread_scan.py (hypothesis; the parser is the
 * oracle). */
#define SCAN_DEPTH 32

typedef struct {
    const char *p, *end;
} cur_t;

typedef struct {
    int chat;
    int n_choices, n_usage, usage_null; /* the message */
    int n_finish, finish_null;          /* the first choice, where it is an object */
    const char *finish;
    Py_ssize_t finish_n;
    /* the first choice's text, or in chat its delta's content (where the delta is an object:
     * n_text counts only what _common_text would read) */
    int n_text, n_delta;
    int n_reasoning, n_role;
    const char *text;
    Py_ssize_t text_n;
} common_t;

typedef int (*member_fn)(cur_t *c, const char *k, Py_ssize_t kn, common_t *m, int depth);

static int scan_value(cur_t *c, int depth);

static void scan_ws(cur_t *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

/* a string at c->p: 0 and its bytes in [*s, *s + *n), or -1 (ask the parser) */
static int scan_string(cur_t *c, const char **s, Py_ssize_t *n) {
    if (c->p >= c->end || *c->p != '"') return -1;
    const char *b = ++c->p;
    while (c->p < c->end) {
        unsigned char ch = (unsigned char)*c->p;
        if (ch == '"') {
            if (s) {
                *s = b;
                *n = c->p - b;
            }
            c->p++;
            return 0;
        }
        if (ch == '\\' || ch >= 0x80 || ch < 0x20) return -1;
        c->p++;
    }
    return -1;
}

static int scan_number(cur_t *c) {
    const char *b = c->p;
    if (c->p < c->end && *c->p == '-') c->p++;
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return -1;
    if (*c->p == '0')
        c->p++;
    else
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') c->p++;
    if (c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E' ||
                          (*c->p >= '0' && *c->p <= '9')))
        return -1; /* a fraction, an exponent, a leading zero: the parser's */
    return c->p - b <= 16 ? 0 : -1;
}

static int scan_literal(cur_t *c, const char *w, Py_ssize_t n) {
    if (c->end - c->p < n || memcmp(c->p, w, n) != 0) return -1;
    c->p += n;
    return 0;
}

static int scan_object(cur_t *c, int depth, member_fn f, common_t *m) {
    if (depth > SCAN_DEPTH) return -1;
    c->p++; /* '{' */
    scan_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return 0;
    }
    for (;;) {
        const char *k;
        Py_ssize_t kn;
        if (scan_string(c, &k, &kn) < 0) return -1;
        scan_ws(c);
        if (c->p >= c->end || *c->p != ':') return -1;
        c->p++;
        scan_ws(c);
        if ((f ? f(c, k, kn, m, depth) : scan_value(c, depth)) < 0) return -1;
        scan_ws(c);
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            scan_ws(c);
            continue;
        }
        if (c->p < c->end && *c->p == '}') {
            c->p++;
            return 0;
        }
        return -1;
    }
}

/* an array; its first element through `first` when given */
static int scan_array(cur_t *c, int depth, int (*first)(cur_t *, common_t *, int),
                      common_t *m) {
    if (depth > SCAN_DEPTH) return -1;
    c->p++; /* '[' */
    scan_ws(c);
    if (c->p < c->end && *c->p == ']') {
        c->p++;
        return 0;
    }
    for (int i = 0;; i++) {
        if ((i == 0 && first ? first(c, m, depth) : scan_value(c, depth)) < 0) return -1;
        scan_ws(c);
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            scan_ws(c);
            continue;
        }
        if (c->p < c->end && *c->p == ']') {
            c->p++;
            return 0;
        }
        return -1;
    }
}

static int scan_value(cur_t *c, int depth) {
    if (c->p >= c->end) return -1;
    switch (*c->p) {
    case '{':
        return scan_object(c, depth + 1, NULL, NULL);
    case '[':
        return scan_array(c, depth + 1, NULL, NULL);
    case '"':
        return scan_string(c, NULL, NULL);
    case 't':
        return scan_literal(c, "true", 4);
    case 'f':
        return scan_literal(c, "false", 5);
    case 'n':
        return scan_literal(c, "null", 4);
    default:
        return scan_number(c);
    }
}

#define KEY_IS(k, kn, lit) ((kn) == (Py_ssize_t)sizeof(lit) - 1 && !memcmp((k), lit, (kn)))

/* a string value into (*s, *n), or any other value (*s stays NULL) */
static int scan_string_or_value(cur_t *c, int depth, const char **s, Py_ssize_t *n) {
    *s = NULL;
    if (c->p < c->end && *c->p == '"') return scan_string(c, s, n);
    return scan_value(c, depth);
}

static int delta_member(cur_t *c, const char *k, Py_ssize_t kn, common_t *m, int depth) {
    if (KEY_IS(k, kn, "content")) {
        m->n_text++;
        return scan_string_or_value(c, depth, &m->text, &m->text_n);
    }
    if (KEY_IS(k, kn, "reasoning_content") || KEY_IS(k, kn, "reasoning")) m->n_reasoning++;
    if (KEY_IS(k, kn, "role")) m->n_role++;
    return scan_value(c, depth);
}

static int choice_member(cur_t *c, const char *k, Py_ssize_t kn, common_t *m, int depth) {
    if (KEY_IS(k, kn, "finish_reason")) {
        m->n_finish++;
        m->finish_null = c->p < c->end && *c->p == 'n';
        m->finish = NULL;
        return scan_string_or_value(c, depth, &m->finish, &m->finish_n);
    }
    if (!m->chat && KEY_IS(k, kn, "text")) {
        m->n_text++;
        return scan_string_or_value(c, depth, &m->text, &m->text_n);
    }
    if (m->chat && KEY_IS(k, kn, "delta")) {
        m->n_delta++;
        if (c->p < c->end && *c->p == '{') return scan_object(c, depth + 1, delta_member, m);
        return scan_value(c, depth);
    }
    return scan_value(c, depth);
}

static int first_choice(cur_t *c, common_t *m, int depth) {
    if (c->p < c->end && *c->p == '{') return scan_object(c, depth + 1, choice_member, m);
    return scan_value(c, depth);
}

static int message_member(cur_t *c, const char *k, Py_ssize_t kn, common_t *m, int depth) {
    if (KEY_IS(k, kn, "choices")) {
        m->n_choices++;
        if (c->p < c->end && *c->p == '[') return scan_array(c, depth + 1, first_choice, m);
        return scan_value(c, depth);
    }
    if (KEY_IS(k, kn, "usage")) {
        m->n_usage++;
        m->usage_null = c->p < c->end && *c->p == 'n';
    }
    return scan_value(c, depth);
}

/* 1: the message (a JSON text) is the common token message, its text in m->text (ASCII);
 * 0: ask the parser */
static int scan_common(const char *d, Py_ssize_t n, int chat, common_t *m) {
    memset(m, 0, sizeof *m);
    m->chat = chat;
    cur_t c = {d, d + n};
    scan_ws(&c);
    if (c.p >= c.end || *c.p != '{' || scan_object(&c, 1, message_member, m) < 0) return 0;
    scan_ws(&c);
    if (c.p != c.end) return 0;
    if (m->n_choices != 1 || m->n_usage > 1 ||
        (m->n_usage && !m->usage_null) || m->n_finish > 1 || m->n_text != 1 || !m->text)
        return 0;
    if (m->n_finish && !m->finish_null) { /* a response's last token, or a failure */
        if (!m->finish) return 0;          /* a finish_reason that is no string */
        PyObject *f = PyUnicode_DecodeASCII(m->finish, m->finish_n, NULL);
        int failed = f ? PySet_Contains(g_failed_finish, f) : -1;
        Py_XDECREF(f);
        if (failed != 0) { /* sse.FAILED_FINISH; an exception: the parser's path says it */
            PyErr_Clear();
            return 0;
        }
    }
    if (chat && (m->n_delta != 1 || m->n_reasoning || m->n_role > 1)) return 0;
    return 1;
}

/* _fastread.counts() -> (scanned, parsed): the messages of whole token chunks read so far
 * by the scan and by the parser, in this process (for tests and benches) */
static PyObject *counts(PyObject *self, PyObject *unused) {
    return Py_BuildValue("(nn)", g_scanned, g_parsed);
}

/* _fastread.scan(body, chat) -> (text, has_role) or None: the scan alone, for tests */
static PyObject *scan(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "scan(body: bytes, chat)");
        return NULL;
    }
    int chat = PyObject_IsTrue(args[1]);
    if (chat < 0) return NULL;
    common_t m;
    if (!scan_common(PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]), chat, &m))
        Py_RETURN_NONE;
    return Py_BuildValue("(NO)", PyUnicode_DecodeASCII(m.text, m.text_n, NULL),
                         m.n_role ? Py_True : Py_False);
}

/* The chunk at d (n bytes from there to the read's end) when it is whole and holds one
 * common token message: its length, size line and CRLFs included, once taken into the
 * record; 0: it is not (the Python path takes it from here); -1: an exception */
static Py_ssize_t token(const char *d, Py_ssize_t n, double ts, int chat, acc_t *a) {
    Py_ssize_t i = 0;
    unsigned long long hex = 0; /* 16 digits fit */
    while (i < n && i < SIZE_DIGITS && hexval(d[i]) >= 0) hex = hex * 16 + hexval(d[i++]);
    /* fasthttp._whole_chunks: eol > 0, a plain hex size, size and end + 2 <= n */
    if (i == 0 || i + 1 >= n || d[i] != '\r' || d[i + 1] != '\n' || hex == 0 ||
        hex > (unsigned long long)n || i + 2 + (Py_ssize_t)hex + 2 > n)
        return 0;
    Py_ssize_t whole = i + 2 + (Py_ssize_t)hex + 2;
    Py_ssize_t size = (Py_ssize_t)hex;
    const char *b = d + i + 2;
    /* feed: data[:7] == b"data: {", the first LF from 7 at len - 2, ending in LF, no CR */
    if (size < 9 || memcmp(b, "data: {", 7) != 0 || b[size - 2] != '\n' ||
        b[size - 1] != '\n' || memchr(b + 7, '\n', size - 9) || memchr(b, '\r', size))
        return 0;
    common_t m;
    if (scan_common(b + 6, size - 8, chat, &m)) { /* the common message, without the parser */
        g_scanned++;
        if (chat && m.text_n == 0) {
            /* feed: a chat stream's opener (role, no text) before the first token is no token */
            if (!a->open && acc_open(a) < 0) return -1;
            if (!a->got_first && m.n_role) return whole;
        }
        PyObject *text = PyUnicode_DecodeASCII(m.text, m.text_n, NULL);
        if (!text) return -1;
        int r = take(a, ts, text);
        Py_DECREF(text);
        return r < 0 ? -1 : whole;
    }
    g_parsed++;
    PyObject *body = PyBytes_FromStringAndSize(b + 6, size - 8);
    if (!body) return -1;
    PyObject *obj = PyObject_CallOneArg(g_loads, body);
    Py_DECREF(body);
    if (!obj) { /* not JSON: the whole way says why, from the same bytes */
        PyErr_Clear();
        return 0;
    }
    PyObject *delta = NULL;
    PyObject *text = common_text(obj, chat, &delta);
    if (!text) {
        Py_DECREF(obj);
        return PyErr_Occurred() ? -1 : 0;
    }
    if (chat && PyUnicode_GET_LENGTH(text) == 0) {
        /* feed: a chat stream's opener (role, no text) before the first token is no token */
        if (!a->open && acc_open(a) < 0) {
            Py_DECREF(obj);
            return -1;
        }
        int role = a->got_first ? 0 : PyDict_Contains(delta, k_role);
        if (role < 0) {
            Py_DECREF(obj);
            return -1;
        }
        if (role) {
            Py_DECREF(obj);
            return whole;
        }
    }
    Py_INCREF(text);
    Py_DECREF(obj);
    int r = take(a, ts, text);
    Py_DECREF(text);
    return r < 0 ? -1 : whole;
}

/* The read's leading whole chunks of one common token message each (one when the loop kept
 * up; several when it read late and the kernel merged a stream's tokens), taken in order as
 * _whole_chunks takes them: the bytes they span, or -1 with an exception */
static Py_ssize_t tokens(const char *d, Py_ssize_t n, double ts, int chat, PyObject *state,
                         PyObject *record) {
    acc_t a = {0, 0, 0.0, 0, NULL, NULL, state, record};
    Py_ssize_t pos = 0;
    while (pos < n) {
        Py_ssize_t whole = token(d + pos, n - pos, ts, chat, &a);
        if (whole < 0) {
            take_end(&a, 0);
            return -1;
        }
        if (!whole) break;
        pos += whole;
    }
    return take_end(&a, 1) < 0 ? -1 : pos;
}

/* The clocks' offset (rxtime.ReadClock.off, .off_until), read from the clock once per call
 * and written back when read again (every OFFSET_S, by rxtime.clock_offset_ns, as arrival) */
typedef struct {
    PyObject *clock; /* borrowed */
    int loaded;
    long long off;
    double until;
} offset_t;

static int offset_at(offset_t *o, double now, long long *off) {
    if (!o->loaded) {
        PyObject *until = sget(o->clock, &s_clk_until);
        if (!until) return -1;
        o->until = PyFloat_AsDouble(until);
        Py_DECREF(until);
        if (o->until == -1.0 && PyErr_Occurred()) return -1;
        PyObject *v = sget(o->clock, &s_clk_off);
        if (!v) return -1;
        o->off = PyLong_AsLongLong(v);
        Py_DECREF(v);
        if (o->off == -1 && PyErr_Occurred()) return -1;
        o->loaded = 1;
    }
    if (now > o->until) {
        PyObject *v = PyObject_CallNoArgs(g_clock_offset_ns);
        if (!v) return -1;
        long long x = PyLong_AsLongLong(v);
        PyObject *nu = x == -1 && PyErr_Occurred() ? NULL : PyFloat_FromDouble(now + g_offset_s);
        int r = nu ? sset(o->clock, &s_clk_off, v) : -1;
        if (!r) r = sset(o->clock, &s_clk_until, nu);
        Py_DECREF(v);
        Py_XDECREF(nu);
        if (r) return -1;
        o->off = x;
        o->until = now + g_offset_s;
    }
    *off = o->off;
    return 0;
}

/* One recvmsg into buf with the kernel's receive stamp: the bytes read (0: the peer closed);
 * -1: the call failed, errno says why (no exception set); -2: an exception. *ts is the
 * arrival on perf_counter's clock (*now where there is no believable stamp). */
static ssize_t read_stamped(int fd, void *buf, size_t len, offset_t *o, double *ts,
                            double *now, int *stamped) {
    char ctrl[CMSG_SPACE(sizeof(struct timespec))];
    struct iovec iov = {buf, len};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl;
    msg.msg_controllen = sizeof ctrl;
    ssize_t n = recvmsg(fd, &msg, 0);
    if (n < 0) return -1;
    /* perf_counter: CLOCK_MONOTONIC, seconds as CPython makes them (ns / 1e9) */
    *now = (double)clock_ns(CLOCK_MONOTONIC) / 1e9;
    *ts = *now;
    *stamped = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_TIMESTAMPNS ||
            c->cmsg_len < CMSG_LEN(sizeof(struct timespec)))
            continue;
        struct timespec t;
        memcpy(&t, CMSG_DATA(c), sizeof t);
        long long off;
        if (offset_at(o, *now, &off) < 0) return -2;
        /* integer nanoseconds, then seconds: a float of epoch seconds keeps only ~0.24 us */
        double v = (double)((long long)t.tv_sec * 1000000000LL + t.tv_nsec - off) * 1e-9;
        if (v > *now - g_max_believed_s) {
            *ts = v < *now ? v : *now;
            *stamped = 1;
        }
        break; /* the only control message asked for */
    }
    return n;
}

/* A connection's read is the common one when fasthttp.Conn._readable would hand it to C:
 * conn.between, conn.ex set and not over (ex.outcome ""), nothing pending in its stream
 * (state.tail, state.cr). 1 (the new references in *f), 0: it is not, -1: an exception. */
typedef struct {
    PyObject *ex, *state, *record, *flight;
    int chat;
} conn_t;

static int truth(PyObject *obj, slot_t *s) {
    PyObject *v = sget(obj, s);
    if (!v) return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

static void conn_clear(conn_t *f) {
    Py_CLEAR(f->ex);
    Py_CLEAR(f->state);
    Py_CLEAR(f->record);
    Py_CLEAR(f->flight);
}

static int conn_common(PyObject *conn, conn_t *f) {
    memset(f, 0, sizeof *f);
    int r = truth(conn, &s_conn_between);
    if (r <= 0) return r;
    if (!(f->ex = sget(conn, &s_conn_ex))) return -1;
    if (f->ex == Py_None) goto slow;
    if ((r = truth(f->ex, &s_ex_outcome)) != 0) goto done;
    if (!(f->state = sget(f->ex, &s_ex_state))) goto err;
    if ((r = truth(f->state, &s_st_tail)) != 0 || (r = truth(f->state, &s_st_cr)) != 0) goto done;
    if ((f->chat = truth(f->state, &s_st_chat)) < 0) goto err;
    if (!(f->record = sget(f->ex, &s_ex_record))) goto err;
    if (!(f->flight = sget(conn, &s_conn_flight))) goto err;
    return 1;
done:
    if (r < 0) goto err;
slow:
    conn_clear(f);
    return 0;
err:
    conn_clear(f);
    return -1;
}

/* Appends a new tuple built by Py_BuildValue to the list: 0, or -1 with an exception */
static int hand(PyObject *list, PyObject *item) {
    if (!item) return -1;
    int r = PyList_Append(list, item);
    Py_DECREF(item);
    return r;
}

/* The exception set now, as (conn, exc, tag) in the list (the connection's request fails;
 * tag "client_error") or (conn, exc) (tag NULL: the read failed, connection_lost): 0, or -1
 * with an exception where even that could not be built */
static int hand_error(PyObject *list, PyObject *conn, const char *tag) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    if (!value) {
        PyErr_SetString(PyExc_SystemError, "_fastread: an error without an exception");
        return -1;
    }
    return hand(list, tag ? Py_BuildValue("(ONs)", conn, value, tag)
                          : Py_BuildValue("(ON)", conn, value));
}

#define DRAIN_EVENTS 1024

/* drain(epfd, conns, buf, clock, next_due, seen) -> (handed, delays, unstamped, due)
 * One epoll_wait (no wait) on the pool's epoll set, and each ready connection's common read
 * done here as Conn._readable would do it, without a Python call per read. */
static PyObject *drain(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "drain(epfd, conns: dict, buf, clock, next_due, seen: list | None)");
        return NULL;
    }
    long epfd = PyLong_AsLong(args[0]);
    if (epfd == -1 && PyErr_Occurred()) return NULL;
    PyObject *conns = args[1], *clock = args[3], *seen = args[5];
    double next_due = PyFloat_AsDouble(args[4]);
    if (next_due == -1.0 && PyErr_Occurred()) return NULL;
    int recording = truth(clock, &s_clk_recording);
    if (recording < 0) return NULL;
    struct epoll_event ev[DRAIN_EVENTS];
    int k = epoll_wait((int)epfd, ev, DRAIN_EVENTS, 0);
    if (k < 0) {
        if (errno != EINTR) return PyErr_SetFromErrno(PyExc_OSError);
        k = 0;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[2], &view, PyBUF_WRITABLE) < 0) return NULL;
    PyObject *handed = PyList_New(0);
    PyObject *delays = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)k * (Py_ssize_t)sizeof(double));
    if (!handed || !delays) goto fail;
    double *delay = (double *)PyBytes_AS_STRING(delays);
    Py_ssize_t nd = 0, unstamped = 0;
    int due = 0, reads = 0;
    offset_t o = {clock, 0, 0, 0.0};
    for (int i = 0; i < k; i++) {
        PyObject *key = PyLong_FromLong(ev[i].data.fd);
        if (!key) goto fail;
        PyObject *conn = PyDict_GetItemWithError(conns, key); /* borrowed */
        Py_DECREF(key);
        if (!conn) {
            if (PyErr_Occurred()) goto fail;
            continue; /* closed since: nothing to read for */
        }
        conn_t f;
        int common = conn_common(conn, &f);
        if (common < 0) { /* not a connection as fasthttp makes them: its request fails */
            if (hand_error(handed, conn, "client_error") < 0) goto fail;
            continue;
        }
        if (!common) { /* the Python path reads it (Conn._readable) */
            if (PyList_Append(handed, conn) < 0) goto fail;
            continue;
        }
        /* the dict is not changed before this returns (connections close in Python) */
        /* a paced request that has come due is sent first (Pacer.poke): back to Python, and
         * what is not read yet stays ready for the next call. The caller poked before this
         * call, so its first read goes on: every call reads, whatever the pacer says. */
        if (reads++ && (double)clock_ns(CLOCK_MONOTONIC) / 1e9 >= next_due) {
            conn_clear(&f);
            due = 1;
            break;
        }
        double ts, now;
        int stamped, r = 0;
        ssize_t n = read_stamped(ev[i].data.fd, view.buf, (size_t)view.len, &o, &ts, &now,
                                 &stamped);
        if (n == -1) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                conn_clear(&f);
                continue;
            }
            PyErr_SetFromErrno(PyExc_OSError); /* Conn.connection_lost(exc) */
            r = hand_error(handed, conn, NULL);
        } else if (n == -2) {
            r = -1;
        } else if (n == 0) { /* the peer closed: no bytes, no stamp, not a read */
            r = hand(handed, Py_BuildValue("(OO)", conn, Py_None));
        } else {
            Py_ssize_t taken = tokens(view.buf, n, ts, f.chat, f.state, f.record);
            if (taken < 0) { /* as Conn._readable: the request fails, client_error */
                r = -1;
            } else {
                if (seen != Py_None) /* tests: each read C did, its bytes, stamp, taken */
                    r = hand(seen, Py_BuildValue("(y#ddn)", (char *)view.buf, (Py_ssize_t)n,
                                                 ts, now, taken));
                if (recording) {
                    delay[nd++] = stamped ? now - ts : 0.0;
                    unstamped += !stamped;
                }
                if (r == 0 && taken == n && f.flight != Py_None) {
                    /* the request's idle deadline sees the read (Flight.last) */
                    PyObject *t = PyFloat_FromDouble(now);
                    r = t ? sset(f.flight, &s_fl_last, t) : -1;
                    Py_XDECREF(t);
                } else if (r == 0 && taken < n) {
                    /* the rest of the read, from a chunk boundary: Conn._handle */
                    r = hand(handed, Py_BuildValue("(Oy#dd)", conn, (char *)view.buf + taken,
                                                   (Py_ssize_t)(n - taken), ts, now));
                }
            }
        }
        conn_clear(&f);
        /* what failed once the read was done (its bytes are gone): the request fails, as
         * when Conn._readable's C call raised; the wave goes on */
        if (r < 0 && hand_error(handed, conn, "client_error") < 0) goto fail;
    }
    PyBuffer_Release(&view);
    if (_PyBytes_Resize(&delays, nd * (Py_ssize_t)sizeof(double)) < 0) {
        Py_DECREF(handed);
        return NULL;
    }
    return Py_BuildValue("(NNnO)", handed, delays, unstamped, due ? Py_True : Py_False);
fail:
    PyBuffer_Release(&view);
    Py_XDECREF(handed);
    Py_XDECREF(delays);
    return NULL;
}

static PyObject *take_tokens(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "take_tokens(data, ts, state, record, chat)");
        return NULL;
    }
    double ts = PyFloat_AsDouble(args[1]);
    if (ts == -1.0 && PyErr_Occurred()) return NULL;
    int chat = PyObject_IsTrue(args[4]);
    if (chat < 0) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t taken = tokens(view.buf, view.len, ts, chat, args[2], args[3]);
    PyBuffer_Release(&view);
    return taken < 0 ? NULL : PyLong_FromSsize_t(taken);
}

static PyMethodDef methods[] = {
    {"drain", (PyCFunction)(void (*)(void))drain, METH_FASTCALL,
     "drain(epfd, conns, buf, clock, next_due, seen) -> (handed, delays, unstamped, due)"},
    {"take_tokens", (PyCFunction)(void (*)(void))take_tokens, METH_FASTCALL,
     "take_tokens(data, ts, state, record, chat) -> taken"},
    {"counts", (PyCFunction)counts, METH_NOARGS,
     "counts() -> (scanned, parsed): token messages read by the scan and by the parser"},
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL,
     "scan(body, chat) -> (text, has_role) or None (ask the parser)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastread",
                                    "The raw client's common read in C.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastread(void) {
    PyObject *sse = PyImport_ImportModule("proctor.workloads.loadgen.sse");
    if (!sse) return NULL;
    g_loads = PyObject_GetAttrString(sse, "loads"); /* the parser the Python path uses */
    g_failed_finish = PyObject_GetAttrString(sse, "FAILED_FINISH");
    Py_DECREF(sse);
    if (!g_loads || !g_failed_finish) return NULL;
    PyObject *rxtime = PyImport_ImportModule("proctor.workloads.loadgen.rxtime");
    if (!rxtime) return NULL;
    g_clock_offset_ns = PyObject_GetAttrString(rxtime, "clock_offset_ns");
    PyObject *offset_s = PyObject_GetAttrString(rxtime, "OFFSET_S");
    PyObject *believed = PyObject_GetAttrString(rxtime, "MAX_BELIEVED_S");
    Py_DECREF(rxtime);
    g_offset_s = offset_s ? PyFloat_AsDouble(offset_s) : -1.0;
    g_max_believed_s = believed ? PyFloat_AsDouble(believed) : -1.0;
    Py_XDECREF(offset_s);
    Py_XDECREF(believed);
    if (!g_clock_offset_ns || PyErr_Occurred()) return NULL;
#define INTERN(var, s) \
    if (!(var = PyUnicode_InternFromString(s))) return NULL
    INTERN(k_choices, "choices");
    INTERN(k_usage, "usage");
    INTERN(k_finish, "finish_reason");
    INTERN(k_text, "text");
    INTERN(k_delta, "delta");
    INTERN(k_content, "content");
    INTERN(k_reasoning_content, "reasoning_content");
    INTERN(k_reasoning, "reasoning");
    INTERN(k_role, "role");
    INTERN(a_got_first, "got_first");
    INTERN(a_last, "last");
    INTERN(a_st, "st");
    INTERN(a_itl, "itl");
    INTERN(a_chunks, "chunks");
    INTERN(a_pieces, "pieces");
    INTERN(a_ttft, "ttft");
    INTERN(a_off, "off");
    INTERN(a_off_until, "off_until");
    INTERN(a_recording, "recording");
    INTERN(a_between, "between");
    INTERN(a_ex, "ex");
    INTERN(a_outcome, "outcome");
    INTERN(a_state, "state");
    INTERN(a_tail, "tail");
    INTERN(a_cr, "cr");
    INTERN(a_chat, "chat");
    INTERN(a_record, "record");
    INTERN(a_flight, "flight");
    return PyModule_Create(&module);
}
