/* Interning of byte strings that point into the scanned buffer, for ``_scan.c`` (included
 * once, after Python.h and the FAIL code): each distinct text gets a code, in order of first
 * appearance, by open addressing on a 64-bit hash (a hit is confirmed by comparing the bytes). */
#ifndef DDPPROF_SCAN_INTERN_H
#define DDPPROF_SCAN_INTERN_H

typedef struct { const char *at; Py_ssize_t size; } Text;
typedef struct { uint64_t hash; int32_t code; } Slot;
typedef struct {
    Slot *slots; Py_ssize_t mask;     /* open addressing; code -1: empty */
    Text *texts; Py_ssize_t count, capacity;
    int32_t last;                     /* the last code given: fields repeat from event to event */
} Table;

static uint64_t hash_bytes(const char *at, Py_ssize_t size) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)size;
    while (size >= 8) {
        uint64_t chunk;
        memcpy(&chunk, at, 8);
        h = (h ^ chunk) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        at += 8, size -= 8;
    }
    uint64_t tail = 0;
    memcpy(&tail, at, (size_t)size);
    h = (h ^ tail) * 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 29);
}

static int table_init(Table *t) {
    t->mask = 255, t->count = 0, t->capacity = 64, t->last = -1;
    t->slots = malloc(sizeof(Slot) * 256);
    t->texts = malloc(sizeof(Text) * 64);
    if (!t->slots || !t->texts) return FAIL;
    for (Py_ssize_t i = 0; i <= t->mask; i++) t->slots[i].code = -1;
    return 0;
}

static void table_free(Table *t) { free(t->slots), free(t->texts); }

static int table_grow(Table *t) {
    Py_ssize_t mask = t->mask * 2 + 1;
    Slot *slots = malloc(sizeof(Slot) * (size_t)(mask + 1));
    if (!slots) return FAIL;
    for (Py_ssize_t i = 0; i <= mask; i++) slots[i].code = -1;
    for (Py_ssize_t i = 0; i <= t->mask; i++) {
        if (t->slots[i].code < 0) continue;
        Py_ssize_t j = (Py_ssize_t)(t->slots[i].hash & (uint64_t)mask);
        while (slots[j].code >= 0) j = (j + 1) & mask;
        slots[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = slots, t->mask = mask;
    return 0;
}

/* The code of text [at, at + size), added in order of first appearance. */
static int32_t intern(Table *t, const char *at, Py_ssize_t size) {
    if (t->last >= 0 && t->texts[t->last].size == size
            && memcmp(t->texts[t->last].at, at, (size_t)size) == 0) return t->last;
    uint64_t h = hash_bytes(at, size);
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)t->mask);
    for (;;) {
        Slot *slot = &t->slots[j];
        if (slot->code < 0) break;
        if (slot->hash == h) {
            Text *seen = &t->texts[slot->code];
            if (seen->size == size && memcmp(seen->at, at, (size_t)size) == 0)
                return t->last = slot->code;
        }
        j = (j + 1) & t->mask;
    }
    if (t->count == t->capacity) {
        Text *texts = realloc(t->texts, sizeof(Text) * (size_t)(t->capacity * 2));
        if (!texts) return FAIL;
        t->texts = texts, t->capacity *= 2;
    }
    int32_t code = (int32_t)t->count++;
    t->texts[code] = (Text){at, size};
    t->slots[j] = (Slot){h, code};
    if (t->count * 2 > t->mask && table_grow(t) < 0) return FAIL;
    return t->last = code;
}

static PyObject *table_list(Table *t) {
    PyObject *list = PyList_New(t->count);
    for (Py_ssize_t i = 0; list && i < t->count; i++) {
        PyObject *item = PyBytes_FromStringAndSize(t->texts[i].at, t->texts[i].size);
        if (!item) { Py_CLEAR(list); break; }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

#endif
