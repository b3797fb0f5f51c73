/* A native scan of a run of trace events (a JSON array of event objects) into columns.
 *
 * It is the fast path of ``ddpprof.trace.scanned``; the Python decoder (``decode_events`` and
 * ``columns``) stays the reference. The scan accepts only a strict, common subset of JSON and
 * of trace events, and returns None for anything else, so that the caller decodes that run the
 * Python way, which also names any problem. Outside the subset: a string with a backslash, a
 * control character or a byte above 0x7F; a known field of an unexpected type (a ``name`` that
 * is not a string, a ``pid`` that is a float, ``args`` that are not an object, an id that is
 * not an integer); a known field given twice; an integer of more than 18 digits; an exponent
 * in ``ts`` or ``dur``; nesting deeper than MAX_DEPTH; an element that is not an object.
 * Inside it, every value reads exactly as msgspec reads it into ``decode_events.Event``.
 *
 * scan(buffer) -> None | (count, columns, ph, cat, name, ids)
 *   count:   the number of events (elements of the array);
 *   columns: bytes per column, in COLUMN order (see ``scanned.py``);
 *   ph, cat, name: the distinct strings of that field, as bytes, in order of first
 *            appearance (an event holds its string's index; -1 for a ph or cat absent or null);
 *   ids:     the distinct values of pid and tid, likewise: an integer's text, or a string's
 *            with its opening quote (``"main``).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ABSENT INT64_MIN
#define MAX_DEPTH 64
#define MAX_INT_DIGITS 18
#define BAIL (-1)       /* outside the subset: no exception set */
#define FAIL (-2)       /* out of memory: an exception set */

enum { F_TS_FLOAT = 1, F_COLLECTIVE = 2 };

#include "_scan_intern.h"

/* ---- the columns ---- */

#define INT32_COLUMNS(X) X(ph) X(cat) X(name) X(pid) X(tid)
#define INT64_COLUMNS(X) X(stream) X(correlation) X(external_id) X(old_external_id) X(start) \
    X(end)
#define DOUBLE_COLUMNS(X) X(ts) X(dur)

typedef struct {
#define DECLARE_INT32(c) int32_t *c;
#define DECLARE_INT64(c) int64_t *c;
#define DECLARE_DOUBLE(c) double *c;
    INT32_COLUMNS(DECLARE_INT32) INT64_COLUMNS(DECLARE_INT64) DOUBLE_COLUMNS(DECLARE_DOUBLE)
    uint8_t *flags;
    Py_ssize_t count, capacity;
} Columns;

static int columns_reserve(Columns *c, Py_ssize_t capacity) {
#define GROW(column) { \
        void *grown = realloc(c->column, sizeof(*c->column) * (size_t)capacity); \
        if (!grown) return FAIL; \
        c->column = grown; \
    }
    INT32_COLUMNS(GROW) INT64_COLUMNS(GROW) DOUBLE_COLUMNS(GROW) GROW(flags)
    c->capacity = capacity;
    return 0;
}

static void columns_free(Columns *c) {
#define FREE(column) free(c->column);
    INT32_COLUMNS(FREE) INT64_COLUMNS(FREE) DOUBLE_COLUMNS(FREE) FREE(flags)
}

static PyObject *columns_tuple(Columns *c) {
    PyObject *items[32];
    Py_ssize_t n = 0;
#define AS_BYTES(column) items[n++] = PyBytes_FromStringAndSize( \
    (const char *)c->column, (Py_ssize_t)sizeof(*c->column) * c->count);
    INT32_COLUMNS(AS_BYTES) INT64_COLUMNS(AS_BYTES) DOUBLE_COLUMNS(AS_BYTES) AS_BYTES(flags)
    PyObject *tuple = PyTuple_New(n);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!items[i] || !tuple) { Py_XDECREF(items[i]); continue; }
        PyTuple_SET_ITEM(tuple, i, items[i]);
    }
    for (Py_ssize_t i = 0; i < n; i++) if (!items[i]) { Py_CLEAR(tuple); break; }
    return tuple;
}

/* ---- the scanner ---- */

typedef struct {
    const unsigned char *at, *end, *base;
    Table ph, cat, name, ids;
    Columns columns;
} Scan;

/* Bytes allowed inside a string of the subset: printable ASCII but '"' and '\\'. */
static uint8_t PLAIN[256];

static inline void blanks(Scan *s) {
    while (s->at < s->end && (*s->at == ' ' || *s->at == '\n' || *s->at == '\r'
                              || *s->at == '\t')) s->at++;
}

static inline int expect(Scan *s, unsigned char c) {
    blanks(s);
    if (s->at >= s->end || *s->at != c) return BAIL;
    s->at++;
    return 0;
}

/* A string (at its opening quote): its bytes, without the quotes. */
static inline int string(Scan *s, const char **text, Py_ssize_t *size) {
    const unsigned char *q = ++s->at;
    while (q < s->end && PLAIN[*q]) q++;
    if (q >= s->end || *q != '"') return BAIL;
    *text = (const char *)s->at, *size = q - s->at;
    s->at = q + 1;
    return 0;
}

typedef struct {
    int integer;            /* no fraction, no exponent */
    int negative, exponent;
    uint64_t mantissa;      /* every digit, while there are at most 19 */
    int digits, fraction;   /* digits in all, and after the point */
    const unsigned char *first, *last;
} Number;

/* A number by JSON's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
#define DIGIT(c) ((unsigned)((c) - '0') < 10u)

static inline int number(Scan *s, Number *n) {
    const unsigned char *q = s->at, *end = s->end;
    uint64_t mantissa = 0;
    int digits = 0, fraction = 0;
    n->first = q, n->negative = 0, n->exponent = 0, n->integer = 1;
    if (q < end && *q == '-') n->negative = 1, q++;
    if (q >= end || !DIGIT(*q)) return BAIL;
    if (*q == '0') {
        q++, digits = 1;
    } else {
        for (; q < end && DIGIT(*q); q++, digits++)
            if (digits < 19) mantissa = mantissa * 10 + (uint64_t)(*q - '0');
    }
    if (q < end && *q == '.') {
        q++, n->integer = 0;
        if (q >= end || !DIGIT(*q)) return BAIL;
        for (; q < end && DIGIT(*q); q++, digits++, fraction++)
            if (digits < 19) mantissa = mantissa * 10 + (uint64_t)(*q - '0');
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        q++, n->integer = 0, n->exponent = 1;
        if (q < end && (*q == '+' || *q == '-')) q++;
        if (q >= end || !DIGIT(*q)) return BAIL;
        while (q < end && DIGIT(*q)) q++;
    }
    n->mantissa = mantissa, n->digits = digits, n->fraction = fraction;
    n->last = s->at = q;
    return 0;
}

/* A number skipped: JSON's grammar checked, nothing kept. */
static inline int skip_number(Scan *s) {
    const unsigned char *q = s->at, *end = s->end;
    if (q < end && *q == '-') q++;
    if (q >= end || !DIGIT(*q)) return BAIL;
    if (*q++ != '0') while (q < end && DIGIT(*q)) q++;
    if (q < end && *q == '.') {
        if (++q >= end || !DIGIT(*q)) return BAIL;
        while (q < end && DIGIT(*q)) q++;
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        if (++q < end && (*q == '+' || *q == '-')) q++;
        if (q >= end || !DIGIT(*q)) return BAIL;
        while (q < end && DIGIT(*q)) q++;
    }
    s->at = q;
    return 0;
}

static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A number's value as a double, correctly rounded: m / 10^k where both are exact doubles
 * (m <= 2^53, k <= 22) is one correctly rounded division; else strtod. */
static int number_value(const Number *n, double *value) {
    if (n->exponent) return BAIL;
    if (n->digits <= 19 && n->mantissa <= (1ull << 53) && n->fraction <= 22) {
        double m = (double)n->mantissa;
        *value = n->fraction ? m / POW10[n->fraction] : m;
    } else {
        char text[64];
        Py_ssize_t size = n->last - n->first;
        if (size >= (Py_ssize_t)sizeof(text)) return BAIL;
        memcpy(text, n->first, (size_t)size);
        text[size] = 0;
        char *stop;
        *value = strtod(text, &stop);
        if (stop != text + size) return BAIL;
        return 0;
    }
    if (n->negative) *value = -*value;
    return 0;
}

static inline int integer_value(const Number *n, int64_t *value) {
    if (!n->integer || n->digits > MAX_INT_DIGITS) return BAIL;
    *value = n->negative ? -(int64_t)n->mantissa : (int64_t)n->mantissa;
    return 0;
}

static inline int literal(Scan *s, const char *word, Py_ssize_t size) {
    if (s->end - s->at < size || memcmp(s->at, word, (size_t)size) != 0) return BAIL;
    s->at += size;
    return 0;
}

/* Objects, member by member: ``object_opens`` at the '{' (1: the object was empty, and is
 * passed); then for each member ``object_key`` (its key and colon) and its value; then
 * ``object_next``: 0 where another member follows, 1 where the object ended (passed). */
static inline int object_opens(Scan *s) {
    s->at++;
    blanks(s);
    if (s->at < s->end && *s->at == '}') { s->at++; return 1; }
    return 0;
}

static inline int object_key(Scan *s, const char **key, Py_ssize_t *size) {
    blanks(s);
    if (s->at >= s->end || *s->at != '"' || string(s, key, size) < 0) return BAIL;
    return expect(s, ':');
}

static inline int object_next(Scan *s) {
    blanks(s);
    if (s->at >= s->end) return BAIL;
    if (*s->at == '}') { s->at++; return 1; }
    return *s->at++ == ',' ? 0 : BAIL;
}

static int skip_value(Scan *s, int depth);

static int skip_object(Scan *s, int depth) {
    const char *key;
    Py_ssize_t size;
    int next = object_opens(s);
    while (next == 0) {
        if (object_key(s, &key, &size) < 0 || skip_value(s, depth + 1) < 0) return BAIL;
        next = object_next(s);
    }
    return next < 0 ? BAIL : 0;
}

static int skip_array(Scan *s, int depth) {
    s->at++;
    blanks(s);
    if (s->at < s->end && *s->at == ']') { s->at++; return 0; }
    for (;;) {
        if (skip_value(s, depth + 1) < 0) return BAIL;
        blanks(s);
        if (s->at >= s->end) return BAIL;
        if (*s->at == ']') { s->at++; return 0; }
        if (*s->at++ != ',') return BAIL;
    }
}

static int skip_value(Scan *s, int depth) {
    const char *text;
    Py_ssize_t size;
    if (depth > MAX_DEPTH) return BAIL;
    blanks(s);
    if (s->at >= s->end) return BAIL;
    switch (*s->at) {
    case '"': return string(s, &text, &size);
    case '{': return skip_object(s, depth);
    case '[': return skip_array(s, depth);
    case 't': return literal(s, "true", 4);
    case 'f': return literal(s, "false", 5);
    case 'n': return literal(s, "null", 4);
    default: return skip_number(s);
    }
}

#define KEY_IS(word) (size == (Py_ssize_t)sizeof(word) - 1 && memcmp(key, word, size) == 0)

/* A text field (ph, cat, name): its code in ``table``; null reads as -1 where allowed. */
static int text_field(Scan *s, Table *table, int nullable, int32_t *code) {
    const char *text;
    Py_ssize_t size;
    blanks(s);
    if (s->at < s->end && *s->at == '"') {
        if (string(s, &text, &size) < 0) return BAIL;
        *code = intern(table, text, size);
        return *code < 0 ? FAIL : 0;
    }
    if (nullable && literal(s, "null", 4) == 0) { *code = -1; return 0; }
    return BAIL;
}

/* pid or tid (``int | str``): its code in the ids table, which holds an integer's text and a
 * string's text with its opening quote (so never a number's). */
static int id_field(Scan *s, int32_t *code) {
    const char *text;
    Py_ssize_t size;
    Number n;
    blanks(s);
    const char *first = (const char *)s->at;
    if (s->at < s->end && *s->at == '"') {
        if (string(s, &text, &size) < 0) return BAIL;
        *code = intern(&s->ids, first, size + 1);
    } else {
        if (number(s, &n) < 0 || !n.integer || n.digits > MAX_INT_DIGITS) return BAIL;
        if (n.negative && n.mantissa == 0) return BAIL;   /* -0: 0 written another way */
        *code = intern(&s->ids, first, n.last - n.first);
    }
    return *code < 0 ? FAIL : 0;
}

/* An id argument (``int | float | str | None``): integers only, here. */
static int int_argument(Scan *s, int64_t *value) {
    Number n;
    blanks(s);
    if (number(s, &n) < 0) return BAIL;
    return integer_value(&n, value);
}

static int args_field(Scan *s, Py_ssize_t i) {
    Columns *c = &s->columns;
    const char *key;
    Py_ssize_t size;
    unsigned seen = 0, bit;
    blanks(s);
    if (s->at >= s->end || *s->at != '{') return BAIL;
    int next = object_opens(s);
    while (next == 0) {
        if (object_key(s, &key, &size) < 0) return BAIL;
        int done;
        if (KEY_IS("External id")) bit = 1, done = int_argument(s, &c->external_id[i]);
        else if (KEY_IS("stream")) bit = 2, done = int_argument(s, &c->stream[i]);
        else if (KEY_IS("correlation")) bit = 4, done = int_argument(s, &c->correlation[i]);
        else if (KEY_IS("external id")) bit = 8, done = int_argument(s, &c->old_external_id[i]);
        else {
            bit = 0;
            if (KEY_IS("Collective name")) c->flags[i] |= F_COLLECTIVE;
            done = skip_value(s, 2);
        }
        if (done < 0 || (seen & bit)) return BAIL;
        seen |= bit;
        next = object_next(s);
    }
    return next < 0 ? BAIL : 0;
}

static int time_field(Scan *s, double *value, int *is_float) {
    Number n;
    blanks(s);
    if (literal(s, "null", 4) == 0) { *value = Py_NAN; return 0; }
    if (number(s, &n) < 0) return BAIL;
    if (n.integer) {
        int64_t whole;
        if (integer_value(&n, &whole) < 0) return BAIL;
        *value = (double)whole;
    } else if (number_value(&n, value) < 0) {
        return BAIL;
    }
    *is_float = !n.integer;
    return 0;
}

static int event(Scan *s) {
    Columns *c = &s->columns;
    if (c->count == c->capacity && columns_reserve(c, c->capacity * 2) < 0) return FAIL;
    Py_ssize_t i = c->count++;
    const char *key;
    Py_ssize_t size;
    unsigned seen = 0, bit;
    int ts_float = 0, dur_float = 0;
    c->start[i] = s->at - s->base;
    c->ph[i] = c->cat[i] = -1;
    c->stream[i] = c->correlation[i] = c->external_id[i] = c->old_external_id[i] = ABSENT;
    c->ts[i] = c->dur[i] = Py_NAN;
    c->flags[i] = 0;
    int next = object_opens(s);
    while (next == 0) {
        if (object_key(s, &key, &size) < 0) return BAIL;
        int done;
        if (KEY_IS("ph")) bit = 1, done = text_field(s, &s->ph, 1, &c->ph[i]);
        else if (KEY_IS("cat")) bit = 2, done = text_field(s, &s->cat, 1, &c->cat[i]);
        else if (KEY_IS("name")) bit = 4, done = text_field(s, &s->name, 0, &c->name[i]);
        else if (KEY_IS("pid")) bit = 8, done = id_field(s, &c->pid[i]);
        else if (KEY_IS("tid")) bit = 16, done = id_field(s, &c->tid[i]);
        else if (KEY_IS("ts")) bit = 32, done = time_field(s, &c->ts[i], &ts_float);
        else if (KEY_IS("dur")) bit = 64, done = time_field(s, &c->dur[i], &dur_float);
        else if (KEY_IS("args")) bit = 128, done = args_field(s, i);
        else bit = 0, done = skip_value(s, 1);
        if (done < 0) return done;
        if (seen & bit) return BAIL;
        seen |= bit;
        next = object_next(s);
    }
    if (next < 0) return BAIL;
    /* the defaults of absent fields: name "", pid and tid 0 */
    if (!(seen & 4) && (c->name[i] = intern(&s->name, "", 0)) < 0) return FAIL;
    if (!(seen & 8) && (c->pid[i] = intern(&s->ids, "0", 1)) < 0) return FAIL;
    if (!(seen & 16) && (c->tid[i] = intern(&s->ids, "0", 1)) < 0) return FAIL;
    c->end[i] = s->at - s->base;
    if (ts_float) c->flags[i] |= F_TS_FLOAT;
    return 0;
}

static int events(Scan *s) {
    if (expect(s, '[') < 0) return BAIL;
    blanks(s);
    if (s->at < s->end && *s->at == ']') {
        s->at++;
    } else {
        for (;;) {
            blanks(s);
            if (s->at >= s->end || *s->at != '{') return BAIL;
            int done = event(s);
            if (done < 0) return done;
            blanks(s);
            if (s->at >= s->end) return BAIL;
            if (*s->at == ']') { s->at++; break; }
            if (*s->at++ != ',') return BAIL;
        }
    }
    blanks(s);
    return s->at == s->end ? 0 : BAIL;
}

static PyObject *scan(PyObject *module, PyObject *argument) {
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(argument, &view, PyBUF_SIMPLE) < 0) return NULL;
    Scan s = {0};
    s.base = s.at = view.buf, s.end = s.at + view.len;
    PyObject *result = NULL;
    int done = FAIL;
    if (table_init(&s.ph) == 0 && table_init(&s.cat) == 0 && table_init(&s.name) == 0
            && table_init(&s.ids) == 0 && columns_reserve(&s.columns, 1024) == 0) {
        Py_BEGIN_ALLOW_THREADS
        done = events(&s);
        Py_END_ALLOW_THREADS
    }
    if (done == 0) {
        result = Py_BuildValue("(nNNNNN)", s.columns.count, columns_tuple(&s.columns),
                               table_list(&s.ph), table_list(&s.cat), table_list(&s.name),
                               table_list(&s.ids));
    } else if (done == BAIL) {
        result = Py_NewRef(Py_None);
    } else if (!PyErr_Occurred()) {
        PyErr_NoMemory();
    }
    table_free(&s.ph), table_free(&s.cat), table_free(&s.name), table_free(&s.ids);
    columns_free(&s.columns);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef METHODS[] = {
    {"scan", scan, METH_O, "Columns of a run of trace events, or None outside the subset."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, .m_name = "_scan", .m_size = -1, .m_methods = METHODS,
};

PyMODINIT_FUNC PyInit__scan(void) {
    for (int c = 0x20; c < 0x80; c++) PLAIN[c] = c != '"' && c != '\\';
    return PyModule_Create(&MODULE);
}
