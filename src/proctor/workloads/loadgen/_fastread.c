/* The raw client's common read in C: a streamed token of a completions or chat response.
 *
 * At concurrency 1000 on one core the client's loop runs near the end of its core, and the
 * Python of each read was half its CPU (bench/NOTES.md, *The common read in C*). This does,
 * for one read, exactly what fasthttp.Conn._readable and sse.StreamState.feed's short path do
 * in Python: recvmsg with the kernel receive stamp (rxtime.ReadClock.arrival's arithmetic, the
 * clock offset read again every rxtime.OFFSET_S by rxtime.clock_offset_ns), and for each
 * whole HTTP chunk at the read's start holding one `data: {...}` message whose object is the
 * common token message (sse._common_text: a completions text or a chat delta's content; a
 * chat stream's role-only opener is taken as feed takes it, as no token), the record's
 * update (TTFT or one more ITL, the chunk count, the text). The rest of the read (a response's
 * usage and last chunk, a chunk the read cut, any other shape) is left to the Python path,
 * with its bytes in the buffer and its stamp: the record comes out the same either way
 * (tests/workloads/test_fastread.py).
 *
 * read_token(fd, buf, clock, state, record, chat) -> (n, ts, now, stamped, taken)
 *   n: bytes read into buf (0: the peer closed); ts: when they arrived (perf_counter
 *   seconds); now: when the read returned; stamped: ts is the kernel's; taken: how many of
 *   the n bytes, from the start, were whole token chunks now in the record (n: all of the
 *   read; the Python path takes buf[taken:n]). Raises OSError as socket.recvmsg_into does
 *   (BlockingIOError when nothing is there).
 *
 * take_tokens(data, ts, state, record, chat) -> taken
 *   the same for bytes already read, from a chunk boundary: a body whose first bytes came in
 *   the read that ended the response's head (a zero-ITL server answers whole, in one read).
 *
 * Linux only (SO_TIMESTAMPNS); elsewhere the module does not build and the Python path runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifndef __linux__
#error "the C read path needs Linux (SO_TIMESTAMPNS); the Python path runs elsewhere"
#endif

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define SIZE_DIGITS 16      /* as fasthttp's find(b"\r\n", 0, 18): at most 16 hex digits */

static PyObject *g_loads; /* orjson.loads, or json's where orjson is missing (sse.loads) */
static PyObject *g_failed_finish; /* sse.FAILED_FINISH */
static PyObject *g_clock_offset_ns; /* rxtime.clock_offset_ns, every rxtime.OFFSET_S */
static double g_offset_s, g_max_believed_s; /* rxtime.OFFSET_S, rxtime.MAX_BELIEVED_S */
static PyObject *k_choices, *k_usage, *k_finish, *k_text, *k_delta, *k_content,
    *k_reasoning_content, *k_reasoning, *k_role;
static PyObject *a_got_first, *a_last, *a_st, *a_itl, *a_chunks, *a_pieces, *a_ttft, *a_off,
    *a_off_until;

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
    PyObject *got = PyObject_GetAttr(a->state, a_got_first);
    if (!got) return -1;
    a->got_first = PyObject_IsTrue(got);
    Py_DECREF(got);
    if (a->got_first < 0) return -1;
    PyObject *last = PyObject_GetAttr(a->state, a_last);
    if (!last) return -1;
    a->last = PyFloat_AsDouble(last);
    Py_DECREF(last);
    if (a->last == -1.0 && PyErr_Occurred()) return -1;
    PyObject *chunks = PyObject_GetAttr(a->record, a_chunks);
    if (!chunks) return -1;
    a->chunks = PyLong_AsSsize_t(chunks);
    Py_DECREF(chunks);
    if (a->chunks == -1 && PyErr_Occurred()) return -1;
    if (!(a->itl = PyObject_GetAttr(a->record, a_itl))) return -1;
    if (!(a->pieces = PyObject_GetAttr(a->state, a_pieces))) return -1;
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
    if (!last || !chunks || PyObject_SetAttr(a->state, a_last, last) < 0 ||
        PyObject_SetAttr(a->record, a_chunks, chunks) < 0 ||
        PyObject_SetAttr(a->state, a_got_first, a->got_first ? Py_True : Py_False) < 0)
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
        PyObject *st = PyObject_GetAttr(a->state, a_st);
        if (!st) return -1;
        double s = PyFloat_AsDouble(st);
        Py_DECREF(st);
        if (s == -1.0 && PyErr_Occurred()) return -1;
        PyObject *ttft = PyFloat_FromDouble(ts - s);
        int r = ttft ? PyObject_SetAttr(a->record, a_ttft, ttft) : -1;
        Py_XDECREF(ttft);
        if (r < 0) return -1;
        a->got_first = 1;
    }
    a->last = ts;
    a->chunks += 1;
    return PyList_Append(a->pieces, text);
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

static PyObject *read_token(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "read_token(fd, buf, clock, state, record, chat)");
        return NULL;
    }
    int chat = PyObject_IsTrue(args[5]);
    if (chat < 0) return NULL;
    long fd = PyLong_AsLong(args[0]);
    if (fd == -1 && PyErr_Occurred()) return NULL;
    PyObject *clock = args[2], *state = args[3], *record = args[4];
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_WRITABLE) < 0) return NULL;
    char ctrl[CMSG_SPACE(sizeof(struct timespec))];
    struct iovec iov = {view.buf, (size_t)view.len};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl;
    msg.msg_controllen = sizeof ctrl;
    ssize_t n = recvmsg((int)fd, &msg, 0);
    if (n < 0) {
        PyBuffer_Release(&view);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    /* perf_counter: CLOCK_MONOTONIC, seconds as CPython makes them (ns / 1e9) */
    double now = (double)clock_ns(CLOCK_MONOTONIC) / 1e9;
    double ts = now;
    int stamped = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_TIMESTAMPNS ||
            c->cmsg_len < CMSG_LEN(sizeof(struct timespec)))
            continue;
        struct timespec t;
        memcpy(&t, CMSG_DATA(c), sizeof t);
        PyObject *until = PyObject_GetAttr(clock, a_off_until);
        if (!until) goto fail;
        double u = PyFloat_AsDouble(until);
        Py_DECREF(until);
        if (u == -1.0 && PyErr_Occurred()) goto fail;
        PyObject *o;
        if (now > u) { /* the clocks' offset, read again every OFFSET_S, as arrival does */
            o = PyObject_CallNoArgs(g_clock_offset_ns);
            PyObject *nu = o ? PyFloat_FromDouble(now + g_offset_s) : NULL;
            int r = nu ? PyObject_SetAttr(clock, a_off, o) : -1;
            if (!r) r = PyObject_SetAttr(clock, a_off_until, nu);
            Py_XDECREF(nu);
            if (r) {
                Py_XDECREF(o);
                goto fail;
            }
        } else {
            o = PyObject_GetAttr(clock, a_off);
            if (!o) goto fail;
        }
        long long off = PyLong_AsLongLong(o);
        Py_DECREF(o);
        if (off == -1 && PyErr_Occurred()) goto fail;
        /* integer nanoseconds, then seconds: a float of epoch seconds keeps only ~0.24 us */
        double v = (double)((long long)t.tv_sec * 1000000000LL + t.tv_nsec - off) * 1e-9;
        if (v > now - g_max_believed_s) {
            ts = v < now ? v : now;
            stamped = 1;
        }
        break; /* the only control message asked for */
    }
    Py_ssize_t taken = n > 0 ? tokens(view.buf, n, ts, chat, state, record) : 0;
    PyBuffer_Release(&view);
    if (taken < 0) return NULL;
    return Py_BuildValue("(nddOn)", (Py_ssize_t)n, ts, now, stamped ? Py_True : Py_False,
                         taken);
fail:
    PyBuffer_Release(&view);
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
    {"read_token", (PyCFunction)(void (*)(void))read_token, METH_FASTCALL,
     "read_token(fd, buf, clock, state, record, chat) -> (n, ts, now, stamped, taken)"},
    {"take_tokens", (PyCFunction)(void (*)(void))take_tokens, METH_FASTCALL,
     "take_tokens(data, ts, state, record, chat) -> taken"},
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
    return PyModule_Create(&module);
}
