/* A new grammar's analyses over its integer rules, in C: productivity and nullability, FOLLOW
 * sets as bytes, and the Earley recogniser's LR(0) item tables.
 *
 * Why: every compile runs them over every rule, and in Python each was a loop of tuple reads and
 * list appends at ~50-100 ns a step. Here they read the rule list in place (the tuples the IR
 * keeps) and return Python objects of the very shape the Python forms return, so callers take
 * either: a fresh schema's compile x0.97 per schema, x0.91 with load_bnf's rule lines read here
 * too (benchmarks/ab_masks.py --switch cfgc, 100 maskbench schemas; benchmarks/README.md).
 *
 * Rules are ``[(lhs, (s, ...)), ...]``: a symbol s >= 0 is nonterminal s, s < 0 is terminal -1 - s
 * (grammar_ir.GrammarIR). The Python twins are in analysis.py; tests/constrain/test_analysis.py
 * holds the two equal on the corpus grammars, schemas and random grammars.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The rules flattened once per call: rule i's symbols are sym[off[i] .. off[i + 1]). */
typedef struct {
    Py_ssize_t r;     /* rules */
    Py_ssize_t *off;  /* [r + 1] */
    int32_t *lhs;     /* [r] */
    int32_t *sym;     /* [off[r]] */
} Flat;

static void flat_free(Flat *f) {
    free(f->off);
    free(f->lhs);
    free(f->sym);
}

static int bad_rules(void) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "rules must be a list of (int, tuple of int)");
    return -1;
}

/* Reads ``rules``; every nonterminal must be below n (n < 0: unchecked) and every terminal below m. */
static int flatten(PyObject *rules, Py_ssize_t n, Py_ssize_t m, Flat *f) {
    memset(f, 0, sizeof(*f));
    if (!PyList_Check(rules)) return bad_rules();
    Py_ssize_t r = PyList_GET_SIZE(rules), total = 0;
    for (Py_ssize_t i = 0; i < r; i++) {
        PyObject *rule = PyList_GET_ITEM(rules, i);
        if (!PyTuple_Check(rule) || PyTuple_GET_SIZE(rule) != 2 || !PyTuple_Check(PyTuple_GET_ITEM(rule, 1)))
            return bad_rules();
        total += PyTuple_GET_SIZE(PyTuple_GET_ITEM(rule, 1));
    }
    f->r = r;
    f->off = malloc(sizeof(Py_ssize_t) * (r + 1));
    f->lhs = malloc(sizeof(int32_t) * (r ? r : 1));
    f->sym = malloc(sizeof(int32_t) * (total ? total : 1));
    if (!f->off || !f->lhs || !f->sym) {
        flat_free(f);
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < r; i++) {
        PyObject *rule = PyList_GET_ITEM(rules, i), *rhs = PyTuple_GET_ITEM(rule, 1);
        long lhs = PyLong_AsLong(PyTuple_GET_ITEM(rule, 0));
        if ((lhs == -1 && PyErr_Occurred()) || lhs < 0 || (n >= 0 && lhs >= n)) goto bad;
        f->lhs[i] = (int32_t)lhs;
        f->off[i] = k;
        Py_ssize_t len = PyTuple_GET_SIZE(rhs);
        for (Py_ssize_t j = 0; j < len; j++) {
            long s = PyLong_AsLong(PyTuple_GET_ITEM(rhs, j));
            if (s == -1 && PyErr_Occurred()) goto bad;
            if ((s >= 0 && n >= 0 && s >= n) || (s < 0 && -1 - s >= m)) goto bad;
            f->sym[k++] = (int32_t)s;
        }
    }
    f->off[r] = k;
    return 0;
bad:
    flat_free(f);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a rule names a symbol out of range");
    return -1;
}

/* grammar_ir._derives: per nonterminal, whether some rule for it has every symbol true (a
 * nonterminal: true itself; a terminal t: ok_t[t]). A worklist over rule occurrences: need[i]
 * counts rule i's nonterminal occurrences not yet known true (-1: a false terminal). */
static char *derives_flat(const Flat *f, Py_ssize_t n, const char *ok_t) {
    Py_ssize_t r = f->r;
    char *ok = calloc(n ? n : 1, 1);
    Py_ssize_t *need = malloc(sizeof(Py_ssize_t) * (r ? r : 1));
    Py_ssize_t *cnt = calloc(n + 1, sizeof(Py_ssize_t));
    Py_ssize_t *uses = malloc(sizeof(Py_ssize_t) * (f->off[r] ? f->off[r] : 1));
    int32_t *todo = malloc(sizeof(int32_t) * (r + n + 1));
    Py_ssize_t top = 0;
    if (!ok || !need || !cnt || !uses || !todo) goto fail;
    /* occurrences counted per nonterminal (up to a rule's first false terminal, as the Python) */
    for (Py_ssize_t i = 0; i < r; i++) {
        Py_ssize_t k = 0;
        for (Py_ssize_t j = f->off[i]; j < f->off[i + 1]; j++) {
            int32_t s = f->sym[j];
            if (s >= 0) {
                cnt[s + 1]++;
                k++;
            } else if (!(ok_t && ok_t[-1 - s])) {
                k = -1;
                break;
            }
        }
        need[i] = k;
    }
    for (Py_ssize_t x = 0; x < n; x++) cnt[x + 1] += cnt[x];
    {
        Py_ssize_t *fill = malloc(sizeof(Py_ssize_t) * (n ? n : 1));
        if (!fill) goto fail;
        memcpy(fill, cnt, sizeof(Py_ssize_t) * n);
        for (Py_ssize_t i = 0; i < r; i++) {
            for (Py_ssize_t j = f->off[i]; j < f->off[i + 1]; j++) {
                int32_t s = f->sym[j];
                if (s >= 0)
                    uses[fill[s]++] = i;
                else if (!(ok_t && ok_t[-1 - s]))
                    break;
            }
        }
        free(fill);
    }
    for (Py_ssize_t i = 0; i < r; i++)
        if (need[i] == 0) todo[top++] = f->lhs[i];
    while (top) {
        int32_t x = todo[--top];
        if (ok[x]) continue;
        ok[x] = 1;
        for (Py_ssize_t u = cnt[x]; u < cnt[x + 1]; u++) {
            Py_ssize_t i = uses[u];
            if (--need[i] == 0) todo[top++] = f->lhs[i];  /* reaches 0 once per rule: todo holds <= r */
        }
    }
    free(need);
    free(cnt);
    free(uses);
    free(todo);
    return ok;
fail:
    free(ok);
    free(need);
    free(cnt);
    free(uses);
    free(todo);
    PyErr_NoMemory();
    return NULL;
}

static PyObject *bool_list(const char *v, Py_ssize_t n) {
    PyObject *out = PyList_New(n);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = v[i] ? Py_True : Py_False;
        Py_INCREF(b);
        PyList_SET_ITEM(out, i, b);
    }
    return out;
}

/* derives(rules, n, ok_t: bytes | None) -> list[bool]   (ok_t None: every terminal false) */
static PyObject *py_derives(PyObject *self, PyObject *args) {
    PyObject *rules, *okobj;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OnO", &rules, &n, &okobj)) return NULL;
    const char *ok_t = NULL;
    Py_ssize_t m = PY_SSIZE_T_MAX;
    if (okobj != Py_None) {
        if (!PyBytes_Check(okobj)) return PyErr_Format(PyExc_TypeError, "ok_t must be bytes or None");
        ok_t = PyBytes_AS_STRING(okobj);
        m = PyBytes_GET_SIZE(okobj);
    }
    Flat f;
    if (n < 0 || flatten(rules, n, m, &f) < 0) return n < 0 ? PyErr_Format(PyExc_ValueError, "n < 0") : NULL;
    char *ok = derives_flat(&f, n, ok_t);
    flat_free(&f);
    if (!ok) return NULL;
    PyObject *out = bool_list(ok, n);
    free(ok);
    return out;
}

/* productive(rules, n, ok_t: bytes) -> (list[bool] per nonterminal, the rules kept): grammar_ir._productive's
 * fixpoint and filter (a rule is kept when its left side and every symbol are productive). */
static PyObject *py_productive(PyObject *self, PyObject *args) {
    PyObject *rules;
    Py_ssize_t n;
    const char *ok_t;
    Py_ssize_t m;
    if (!PyArg_ParseTuple(args, "Ony#", &rules, &n, &ok_t, &m)) return NULL;
    if (n < 0) return PyErr_Format(PyExc_ValueError, "n < 0");
    Flat f;
    if (flatten(rules, n, m, &f) < 0) return NULL;
    char *ok = derives_flat(&f, n, ok_t);
    if (!ok) {
        flat_free(&f);
        return NULL;
    }
    PyObject *kept = PyList_New(0), *prod = bool_list(ok, n), *out = NULL;
    if (!kept || !prod) goto done;
    for (Py_ssize_t i = 0; i < f.r; i++) {
        if (!ok[f.lhs[i]]) continue;
        int keep = 1;
        for (Py_ssize_t j = f.off[i]; j < f.off[i + 1] && keep; j++) {
            int32_t s = f.sym[j];
            keep = s >= 0 ? ok[s] : ok_t[-1 - s];
        }
        if (keep && PyList_Append(kept, PyList_GET_ITEM(rules, i)) < 0) goto done;
    }
    out = PyTuple_Pack(2, prod, kept);
done:
    Py_XDECREF(kept);
    Py_XDECREF(prod);
    free(ok);
    flat_free(&f);
    return out;
}

/* -- FOLLOW bytes: sets of bytes as 4 x 64 bits */
typedef struct {
    uint64_t w[4];
} Bits;

static inline int bits_or(Bits *dst, const Bits *src) { /* dst |= src; whether dst grew */
    int grew = 0;
    for (int i = 0; i < 4; i++) {
        uint64_t v = dst->w[i] | src->w[i];
        grew |= v != dst->w[i];
        dst->w[i] = v;
    }
    return grew;
}

/* An adjacency list as CSR, built from (from, to) pairs. */
typedef struct {
    Py_ssize_t *start; /* [n + 1] */
    int32_t *to;
} Adj;

static int adj_build(Adj *a, Py_ssize_t n, const int32_t *from, const int32_t *to, Py_ssize_t k) {
    a->start = calloc(n + 1, sizeof(Py_ssize_t));
    a->to = malloc(sizeof(int32_t) * (k ? k : 1));
    Py_ssize_t *fill = malloc(sizeof(Py_ssize_t) * (n ? n : 1));
    if (!a->start || !a->to || !fill) {
        free(fill);
        return -1;
    }
    for (Py_ssize_t i = 0; i < k; i++) a->start[from[i] + 1]++;
    for (Py_ssize_t x = 0; x < n; x++) a->start[x + 1] += a->start[x];
    memcpy(fill, a->start, sizeof(Py_ssize_t) * n);
    for (Py_ssize_t i = 0; i < k; i++) a->to[fill[from[i]]++] = to[i];
    free(fill);
    return 0;
}

/* grammar_ir._flow: close sets under sets[v] |= sets[u] for every edge u -> v, by a worklist. */
static int flow(Bits *sets, Py_ssize_t n, const Adj *a) {
    int32_t *todo = malloc(sizeof(int32_t) * (n ? n : 1));
    char *queued = calloc(n ? n : 1, 1);
    Py_ssize_t top = 0;
    if (!todo || !queued) {
        free(todo);
        free(queued);
        return -1;
    }
    for (Py_ssize_t u = 0; u < n; u++) {
        const Bits *s = &sets[u];
        if ((s->w[0] | s->w[1] | s->w[2] | s->w[3]) && a->start[u + 1] > a->start[u]) {
            todo[top++] = (int32_t)u;
            queued[u] = 1;
        }
    }
    while (top) {
        int32_t u = todo[--top];
        queued[u] = 0;
        for (Py_ssize_t e = a->start[u]; e < a->start[u + 1]; e++) {
            int32_t v = a->to[e];
            if (bits_or(&sets[v], &sets[u]) && !queued[v] && a->start[v + 1] > a->start[v]) {
                queued[v] = 1;
                todo[top++] = v;
            }
        }
    }
    free(todo);
    free(queued);
    return 0;
}

/* follow(rules, n, starts: bytes (32 per terminal, little-endian bits), nullable: bytes (n),
 *        ignore: bytes (a 0/1 flag per terminal)) -> bytes (32 per terminal):
 * grammar_ir.follow_bytes after its start bytes: FIRST of each nonterminal as bytes, then FOLLOW
 * of each terminal as the bytes that can start what comes after it; %ignore terminals can follow
 * anything and anything can follow them. */
static PyObject *py_follow(PyObject *self, PyObject *args) {
    PyObject *rules;
    Py_ssize_t n, sb_len, null_len, ign_len;
    const char *sb, *null, *ign;
    if (!PyArg_ParseTuple(args, "Ony#y#y#", &rules, &n, &sb, &sb_len, &null, &null_len, &ign, &ign_len)) return NULL;
    Py_ssize_t m = sb_len / 32;
    if (n < 0 || sb_len != 32 * m || null_len != n || ign_len != m)
        return PyErr_Format(PyExc_ValueError, "follow: inconsistent table sizes");
    Flat f;
    if (flatten(rules, n, m, &f) < 0) return NULL;
    Bits *st = malloc(sizeof(Bits) * (m ? m : 1));
    Bits *first = calloc(n ? n : 1, sizeof(Bits));
    Bits *fnt = calloc(n ? n : 1, sizeof(Bits));
    Bits *ft = calloc(m ? m : 1, sizeof(Bits));
    Py_ssize_t total = f.off[f.r];
    int32_t *ea = malloc(sizeof(int32_t) * (total ? total : 1)), *eb = malloc(sizeof(int32_t) * (total ? total : 1));
    int32_t *end_l = malloc(sizeof(int32_t) * (total ? total : 1)), *end_t = malloc(sizeof(int32_t) * (total ? total : 1));
    Adj into = {0}, down = {0};
    PyObject *out = NULL;
    if (!st || !first || !fnt || !ft || !ea || !eb || !end_l || !end_t) goto oom;
    for (Py_ssize_t t = 0; t < m; t++) {  /* (unaligned bytes in, aligned words here) */
        for (int i = 0; i < 4; i++) {
            uint64_t v = 0;
            for (int b = 7; b >= 0; b--) v = (v << 8) | (unsigned char)sb[32 * t + 8 * i + b];
            st[t].w[i] = v;
        }
    }
    const Bits *starts = st;
    /* FIRST: the first bytes of the terminals that can begin a nonterminal, and FIRST of each
     * nonterminal that can (edges x -> lhs) */
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < f.r; i++) {
        int32_t lhs = f.lhs[i];
        for (Py_ssize_t j = f.off[i]; j < f.off[i + 1]; j++) {
            int32_t x = f.sym[j];
            if (x < 0) {
                bits_or(&first[lhs], &starts[-1 - x]);
                break;
            }
            ea[k] = x;
            eb[k++] = lhs;
            if (!null[x]) break;
        }
    }
    if (adj_build(&into, n, ea, eb, k) < 0 || flow(first, n, &into) < 0) goto oom;
    /* FOLLOW: per rule from its end, the rest's FIRST (after) and whether the rest is nullable */
    k = 0;
    Py_ssize_t ne = 0;
    for (Py_ssize_t i = 0; i < f.r; i++) {
        int32_t lhs = f.lhs[i];
        Bits after = {{0, 0, 0, 0}};
        int open_end = 1;
        for (Py_ssize_t j = f.off[i + 1] - 1; j >= f.off[i]; j--) {
            int32_t x = f.sym[j];
            if (x < 0) {
                int32_t t = -1 - x;
                bits_or(&ft[t], &after);
                if (open_end) {
                    end_l[ne] = lhs;
                    end_t[ne++] = t;
                }
                after = starts[t];
                open_end = 0;
            } else {
                bits_or(&fnt[x], &after);
                if (open_end) {
                    ea[k] = lhs;
                    eb[k++] = x;
                }
                if (null[x])
                    bits_or(&after, &first[x]);
                else
                    after = first[x];
                open_end = open_end && null[x];
            }
        }
    }
    if (adj_build(&down, n, ea, eb, k) < 0 || flow(fnt, n, &down) < 0) goto oom;
    for (Py_ssize_t e = 0; e < ne; e++) bits_or(&ft[end_t[e]], &fnt[end_l[e]]);
    Bits ig = {{0, 0, 0, 0}}, every = {{0, 0, 0, 0}};
    for (Py_ssize_t t = 0; t < m; t++) {
        if (ign[t]) bits_or(&ig, &starts[t]);
        bits_or(&every, &starts[t]);
    }
    out = PyBytes_FromStringAndSize(NULL, 32 * m);
    if (!out) goto done;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t t = 0; t < m; t++) {
        Bits v = ft[t];
        if (ign[t])
            v = every;
        else
            bits_or(&v, &ig);
        for (int i = 0; i < 4; i++)
            for (int b = 0; b < 8; b++) o[32 * t + 8 * i + b] = (unsigned char)(v.w[i] >> (8 * b));
    }
    goto done;
oom:
    PyErr_NoMemory();
done:
    free(st);
    free(first);
    free(fnt);
    free(ft);
    free(ea);
    free(eb);
    free(end_l);
    free(end_t);
    free(into.start);
    free(into.to);
    free(down.start);
    free(down.to);
    flat_free(&f);
    return out;
}

/* items(rules, n, start) -> (next_sym, lhs, predict, accept_item, next_sym_c, lhs_c): earley.Earley's
 * LR(0) items numbered rule by rule (item i + 1 is item i with the dot one symbol on): next_sym
 * (None at a rule's end) and lhs per item as lists, predict per nonterminal (its rules' first
 * items), the item after the augmented rule's one symbol, and next_sym / lhs as int32 bytes
 * (None as INT32_MIN) for _statec. */
static PyObject *py_items(PyObject *self, PyObject *args) {
    PyObject *rules;
    Py_ssize_t n, start;
    if (!PyArg_ParseTuple(args, "Onn", &rules, &n, &start)) return NULL;
    if (n < 0) return PyErr_Format(PyExc_ValueError, "n < 0");
    Flat f;
    if (flatten(rules, n, PY_SSIZE_T_MAX, &f) < 0) return NULL;
    Py_ssize_t items = f.off[f.r] + f.r;
    PyObject *nxt = PyList_New(items), *lhs = PyList_New(items), *pred = PyList_New(n), *out = NULL;
    PyObject *nxt_c = PyBytes_FromStringAndSize(NULL, 4 * items), *lhs_c = PyBytes_FromStringAndSize(NULL, 4 * items);
    Py_ssize_t accept = -1;
    if (!nxt || !lhs || !pred || !nxt_c || !lhs_c) goto done;
    for (Py_ssize_t x = 0; x < n; x++) {
        PyObject *l = PyList_New(0);
        if (!l) goto done;
        PyList_SET_ITEM(pred, x, l);
    }
    int32_t *nc = (int32_t *)PyBytes_AS_STRING(nxt_c), *lc = (int32_t *)PyBytes_AS_STRING(lhs_c);
    Py_ssize_t it = 0;
    for (Py_ssize_t i = 0; i < f.r; i++) {
        int32_t l = f.lhs[i];
        if (l == start) accept = it + 1;
        PyObject *id = PyLong_FromSsize_t(it);
        if (!id) goto done;
        int bad = PyList_Append(PyList_GET_ITEM(pred, l), id);
        Py_DECREF(id);
        if (bad < 0) goto done;
        PyObject *lo = PyLong_FromLong(l);
        if (!lo) goto done;
        for (Py_ssize_t j = f.off[i]; j <= f.off[i + 1]; j++, it++) {
            PyObject *s;
            if (j < f.off[i + 1]) {
                s = PyLong_FromLong(f.sym[j]);
                if (!s) {
                    Py_DECREF(lo);
                    goto done;
                }
                nc[it] = f.sym[j];
            } else {
                s = Py_None;
                Py_INCREF(s);
                nc[it] = INT32_MIN;
            }
            PyList_SET_ITEM(nxt, it, s);
            Py_INCREF(lo);
            PyList_SET_ITEM(lhs, it, lo);
            lc[it] = l;
        }
        Py_DECREF(lo);
    }
    if (accept < 0) {
        PyErr_SetString(PyExc_ValueError, "items: no rule for the start symbol");
        goto done;
    }
    out = Py_BuildValue("OOOnOO", nxt, lhs, pred, accept, nxt_c, lhs_c);
done:
    Py_XDECREF(nxt);
    Py_XDECREF(lhs);
    Py_XDECREF(pred);
    Py_XDECREF(nxt_c);
    Py_XDECREF(lhs_c);
    flat_free(&f);
    return out;
}


/* -- load_bnf's rule lines
 *
 * bnf_parse(text) -> (names, is_term, is_origin, first_rule, origin, off, sym, term_lines) or None
 *
 * grammar_ir.load_bnf reads a schema's grammar line by line: a line that fullmatches
 * ``([a-z_][a-z0-9_]*): ([A-Za-z0-9_ |]*)`` is a rule (alternatives split on "|", symbols on
 * spaces), any other non-empty line is given back whole (``term_lines``) for the terminal regex.
 * Symbol names come back once each (``names``, in order of first appearance: a rule's left side,
 * then its symbols left to right, rule after rule), with whether each is a terminal name (an
 * upper-case first letter, or "_" then one), whether it is some rule's left side, and the rule in
 * which it first appears; the rules as int32 bytes: origin name per rule, symbol offsets
 * (rules + 1) and symbol names, so load_bnf numbers each name once (grammar_ir._build) and
 * ``remap`` makes the rule tuples. None (the caller reads the text in Python) when the text has
 * a line break other than "\n" (str.splitlines splits on those too: \r \v \f \x1c-\x1e \x85
 * \u2028 \u2029), so every line here is one of str.splitlines'.
 */
typedef struct {
    const char *p;
    Py_ssize_t len;
    int32_t idx;
} Slot;

typedef struct {
    Slot *slots;
    Py_ssize_t cap, n;
} Names;

static uint64_t span_hash(const char *p, Py_ssize_t len) {
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t i = 0; i < len; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
    return h;
}

static int names_grow(Names *t) {
    Py_ssize_t cap = t->cap ? 2 * t->cap : 256;
    Slot *s = calloc(cap, sizeof(Slot));
    if (!s) return -1;
    for (Py_ssize_t i = 0; i < t->cap; i++) {
        if (!t->slots[i].p) continue;
        uint64_t h = span_hash(t->slots[i].p, t->slots[i].len) & (cap - 1);
        while (s[h].p) h = (h + 1) & (cap - 1);
        s[h] = t->slots[i];
    }
    free(t->slots);
    t->slots = s;
    t->cap = cap;
    return 0;
}

/* The name's index; *fresh set when it is new (then it takes the next index). */
static int32_t names_get(Names *t, const char *p, Py_ssize_t len, int *fresh) {
    if (2 * (t->n + 1) > t->cap && names_grow(t) < 0) return -1;
    uint64_t h = span_hash(p, len) & (t->cap - 1);
    while (t->slots[h].p) {
        if (t->slots[h].len == len && memcmp(t->slots[h].p, p, len) == 0) {
            *fresh = 0;
            return t->slots[h].idx;
        }
        h = (h + 1) & (t->cap - 1);
    }
    t->slots[h].p = p;
    t->slots[h].len = len;
    t->slots[h].idx = (int32_t)t->n;
    *fresh = 1;
    return (int32_t)t->n++;
}

/* A growable int32 buffer. */
typedef struct {
    int32_t *v;
    Py_ssize_t n, cap;
} Ints;

static int ints_push(Ints *b, int32_t x) {
    if (b->n == b->cap) {
        Py_ssize_t cap = b->cap ? 2 * b->cap : 1024;
        int32_t *v = realloc(b->v, sizeof(int32_t) * cap);
        if (!v) return -1;
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n++] = x;
    return 0;
}

static inline int name_start(unsigned char c) { return (c >= 'a' && c <= 'z') || c == '_'; }
static inline int name_char(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }
static inline int body_char(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == ' ' || c == '|';
}
static inline int upper(unsigned char c) { return c >= 'A' && c <= 'Z'; }

/* The symbol occurrence p[0:len] (a name), as the Python reader classifies it. */
static int add_name(Names *t, Ints *meta_term, Ints *meta_first, const char *p, Py_ssize_t len, int32_t rule, int32_t *idx) {
    int fresh;
    int32_t i = names_get(t, p, len, &fresh);
    if (i < 0) return -1;
    if (fresh) {
        /* x[0].isupper() or x[0] == "_" and x[1:2].isupper(): a name here holds ASCII only */
        int term = upper((unsigned char)p[0]) || (p[0] == '_' && len > 1 && upper((unsigned char)p[1]));
        if (ints_push(meta_term, term) < 0 || ints_push(meta_first, rule) < 0) return -1;
    }
    *idx = i;
    return 0;
}

static PyObject *ints_bytes(const Ints *b) {
    return PyBytes_FromStringAndSize((const char *)b->v, sizeof(int32_t) * b->n);
}

static PyObject *py_bnf_parse(PyObject *self, PyObject *arg) {
    if (!PyUnicode_Check(arg)) return PyErr_Format(PyExc_TypeError, "bnf_parse: text must be str");
    Py_ssize_t size;
    const char *text = PyUnicode_AsUTF8AndSize(arg, &size);
    if (!text) return NULL;
    for (Py_ssize_t i = 0; i < size; i++) {  /* line breaks other than \n: the Python reader */
        unsigned char c = (unsigned char)text[i];
        if (c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) Py_RETURN_NONE;
        if (c == 0xC2 && i + 1 < size && (unsigned char)text[i + 1] == 0x85) Py_RETURN_NONE;
        if (c == 0xE2 && i + 2 < size && (unsigned char)text[i + 1] == 0x80 &&
            ((unsigned char)text[i + 2] == 0xA8 || (unsigned char)text[i + 2] == 0xA9))
            Py_RETURN_NONE;
    }
    Names t = {0};
    Ints is_term = {0}, first = {0}, origin = {0}, off = {0}, sym = {0};
    PyObject *terms = PyList_New(0), *out = NULL, *names = NULL, *is_origin = NULL;
    if (!terms) return NULL;
    int32_t rule = 0;
    const char *end = text + size;
    for (const char *line = text; line < end;) {
        const char *nl = memchr(line, '\n', end - line);
        const char *le = nl ? nl : end;
        Py_ssize_t len = le - line;
        if (len > 0) {
            /* a rule line? */
            Py_ssize_t k = 0;
            int is_rule = name_start((unsigned char)line[0]);
            if (is_rule) {
                k = 1;
                while (k < len && name_char((unsigned char)line[k])) k++;
                is_rule = k + 2 <= len && line[k] == ':' && line[k + 1] == ' ';
            }
            if (is_rule)
                for (Py_ssize_t j = k + 2; j < len && is_rule; j++) is_rule = body_char((unsigned char)line[j]);
            if (!is_rule) {
                PyObject *s = PyUnicode_DecodeUTF8(line, len, NULL);
                if (!s || PyList_Append(terms, s) < 0) {
                    Py_XDECREF(s);
                    goto fail;
                }
                Py_DECREF(s);
            } else {
                int32_t o;
                if (add_name(&t, &is_term, &first, line, k, rule, &o) < 0) goto oom;
                /* alternatives: one rule each, even an empty one */
                const char *a = line + k + 2;
                for (;;) {
                    const char *bar = memchr(a, '|', le - a);
                    const char *ae = bar ? bar : le;
                    if (ints_push(&origin, o) < 0 || ints_push(&off, (int32_t)sym.n) < 0) goto oom;
                    for (const char *q = a; q < ae;) {
                        while (q < ae && *q == ' ') q++;
                        const char *qe = q;
                        while (qe < ae && *qe != ' ') qe++;
                        if (qe > q) {
                            int32_t s;
                            if (add_name(&t, &is_term, &first, q, qe - q, rule, &s) < 0 || ints_push(&sym, s) < 0) goto oom;
                        }
                        q = qe;
                    }
                    rule++;
                    if (!bar) break;
                    a = bar + 1;
                }
            }
        }
        line = le + 1;
    }
    if (ints_push(&off, (int32_t)sym.n) < 0) goto oom;
    names = PyList_New(t.n);
    is_origin = PyBytes_FromStringAndSize(NULL, t.n);
    if (!names || !is_origin) goto fail;
    char *io = PyBytes_AS_STRING(is_origin);
    memset(io, 0, t.n);
    for (Py_ssize_t r = 0; r < origin.n; r++) io[origin.v[r]] = 1;
    for (Py_ssize_t h = 0; h < t.cap; h++) {
        if (!t.slots[h].p) continue;
        PyObject *s = PyUnicode_FromStringAndSize(t.slots[h].p, t.slots[h].len);
        if (!s) goto fail;
        PyList_SET_ITEM(names, t.slots[h].idx, s);
    }
    PyObject *term_b = PyBytes_FromStringAndSize(NULL, t.n);
    if (!term_b) goto fail;
    for (Py_ssize_t i = 0; i < t.n; i++) PyBytes_AS_STRING(term_b)[i] = (char)is_term.v[i];
    PyObject *first_b = ints_bytes(&first), *origin_b = ints_bytes(&origin), *off_b = ints_bytes(&off),
             *sym_b = ints_bytes(&sym);
    if (first_b && origin_b && off_b && sym_b)
        out = PyTuple_Pack(8, names, term_b, is_origin, first_b, origin_b, off_b, sym_b, terms);
    Py_DECREF(term_b);
    Py_XDECREF(first_b);
    Py_XDECREF(origin_b);
    Py_XDECREF(off_b);
    Py_XDECREF(sym_b);
    goto done;
oom:
    PyErr_NoMemory();
fail:
done:
    free(t.slots);
    free(is_term.v);
    free(first.v);
    free(origin.v);
    free(off.v);
    free(sym.v);
    Py_XDECREF(names);
    Py_XDECREF(is_origin);
    Py_DECREF(terms);
    return out;
}

/* remap(origin, off, sym, table) -> [(table[origin[r]], (table[sym[j]] ...)), ...]: bnf_parse's
 * rules over the symbols load_bnf gave each name (``table``: a list of int, one per name). */
static PyObject *py_remap(PyObject *self, PyObject *args) {
    const char *ob, *fb, *sb;
    Py_ssize_t ol, fl, sl;
    PyObject *table;
    if (!PyArg_ParseTuple(args, "y#y#y#O!", &ob, &ol, &fb, &fl, &sb, &sl, &PyList_Type, &table)) return NULL;
    Py_ssize_t r = ol / 4, nt = PyList_GET_SIZE(table);
    const int32_t *origin = (const int32_t *)ob, *off = (const int32_t *)fb, *sym = (const int32_t *)sb;
    if (ol % 4 || fl != 4 * (r + 1) || sl % 4 || (r && (off[0] != 0 || off[r] != sl / 4)))
        return PyErr_Format(PyExc_ValueError, "remap: inconsistent tables");
    PyObject *out = PyList_New(r);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < r; i++) {
        int32_t a = off[i], b = off[i + 1];
        if (b < a || origin[i] < 0 || origin[i] >= nt) goto bad;
        PyObject *rhs = PyTuple_New(b - a);
        if (!rhs) goto fail;
        for (int32_t j = a; j < b; j++) {
            if (sym[j] < 0 || sym[j] >= nt) {
                Py_DECREF(rhs);
                goto bad;
            }
            PyObject *x = PyList_GET_ITEM(table, sym[j]);
            Py_INCREF(x);
            PyTuple_SET_ITEM(rhs, j - a, x);
        }
        PyObject *lhs = PyList_GET_ITEM(table, origin[i]);
        PyObject *rule = PyTuple_Pack(2, lhs, rhs);
        Py_DECREF(rhs);
        if (!rule) goto fail;
        PyList_SET_ITEM(out, i, rule);
    }
    return out;
bad:
    PyErr_SetString(PyExc_ValueError, "remap: a name index out of range");
fail:
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"derives", py_derives, METH_VARARGS, "grammar_ir's worklist fixpoint (see the C source)."},
    {"productive", py_productive, METH_VARARGS, "productivity and the rules kept (see the C source)."},
    {"follow", py_follow, METH_VARARGS, "FOLLOW sets as bytes (see the C source)."},
    {"items", py_items, METH_VARARGS, "the Earley recogniser's LR(0) item tables (see the C source)."},
    {"bnf_parse", py_bnf_parse, METH_O, "load_bnf's rule lines (see the C source)."},
    {"remap", py_remap, METH_VARARGS, "bnf_parse's rules over numbered symbols (see the C source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cfgc", "A new grammar's analyses over its integer rules (see the C source).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__cfgc(void) { return PyModule_Create(&module); }
