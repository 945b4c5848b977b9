/* Earley chart states as one object that Python's cyclic garbage collector does not track.
 *
 * Why: a chart state was a tuple (frozenset of scan tuples (t, q, E), accepting), 2 + k objects
 * the collector tracks, and the memos keep them (the step memo's keys hold them too, so those key
 * tuples stay tracked as well). A process serving new schemas one after another promoted ~4,000
 * such objects a schema into the oldest generation, and each ~110k promoted objects trigger a full
 * collection, which in a process holding torch and transformers walks ~440k objects (300-500 ms
 * on a 2-core VM): ~half of those promotions were chart states, their scans and the step memo's
 * keys (benchmarks/bench_gc.py; README of benchmarks/).
 *
 * A State holds its scans in one C array, sorted by (t, q, address of E) so that equal sets of
 * scans make equal states, and a strong reference to each E (an item set, ``earley.ESet``). The
 * type has no Py_TPFLAGS_HAVE_GC, so it is never tracked, and a tuple or dict key that holds only
 * States and ints is untracked by the collector as well. That is safe because no cycle can pass
 * through a State: item sets never refer to chart states (their ``starts`` are frozensets of scan
 * tuples), and a State refers only to item sets; the collector sees each E's reference from a State
 * as one from outside, which it is.
 *
 * The Python face is the tuple's: ``state[0]`` its scans (a view, iterable over (t, q, E) tuples,
 * ``len`` the number of scans) and ``state[1]`` whether it accepts, so the engine's code reads
 * either form; ``earley.chart_state`` makes one or the other (the pure-Python
 * form where this module is not built; tests/constrain/test_chart_state.py: equal masks).
 *
 * Below the type: the chart's inner loops over States (``step``, ``close``, ``walk``, ``take_rests``),
 * each declining or equal to the Python code it stands for in earley.py / scannerless.py.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t t, q;
    PyObject *e;
} Scan;

typedef struct {
    PyObject_VAR_HEAD
    Py_hash_t hash;
    int acc;
    Scan scans[1];
} StateObject;

static PyTypeObject StateType;
static PyTypeObject StateIterType;

static int scan_cmp(const void *pa, const void *pb) {
    const Scan *a = (const Scan *)pa, *b = (const Scan *)pb;
    if (a->t != b->t) return a->t < b->t ? -1 : 1;
    if (a->q != b->q) return a->q < b->q ? -1 : 1;
    if (a->e != b->e) return (uintptr_t)a->e < (uintptr_t)b->e ? -1 : 1;
    return 0;
}

/* xxHash-style mix over the scans (as CPython's tuple hash does over its items). */
static Py_hash_t state_hash_of(const Scan *s, Py_ssize_t n, int acc) {
    const uint64_t P1 = 11400714785074694791ULL, P2 = 14029467366897019727ULL, P5 = 2870177450012600261ULL;
    uint64_t h = P5 + (uint64_t)acc;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t lane = ((uint64_t)(uint32_t)s[i].t << 32 | (uint32_t)s[i].q) ^ ((uint64_t)(uintptr_t)s[i].e >> 4) * P2;
        h += lane * P2;
        h = (h << 31) | (h >> 33);
        h *= P1;
    }
    h += (uint64_t)n ^ (P5 ^ 3527539UL);
    Py_hash_t r = (Py_hash_t)h;
    return r == -1 ? 1546275796 : r;
}

/* A State of the n scans in buf (each holding a reference to its E, which moves into the State or
 * is released; duplicates allowed) and acc; buf is freed in every case. */
static PyObject *state_from_buf(PyTypeObject *type, Scan *buf, Py_ssize_t n, int acc) {
    qsort(buf, (size_t)n, sizeof(Scan), scan_cmp);
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (m == 0 || scan_cmp(&buf[m - 1], &buf[i]) != 0)
            buf[m++] = buf[i];
        else
            Py_DECREF(buf[i].e);  /* a duplicate scan */
    }
    StateObject *self = PyObject_NewVar(StateObject, type, m ? m : 1);
    if (!self) {
        for (Py_ssize_t i = 0; i < m; i++) Py_DECREF(buf[i].e);
        free(buf);
        return NULL;
    }
    Py_SET_SIZE(self, m);
    memset(self->scans, 0, (size_t)(m ? m : 1) * sizeof(Scan));
    memcpy(self->scans, buf, (size_t)m * sizeof(Scan));  /* the references move with the scans */
    free(buf);
    self->acc = acc;
    self->hash = state_hash_of(self->scans, m, acc);
    return (PyObject *)self;
}

/* Append the scans of an iterable of (t, q, E) tuples to buf (each holding a reference to its E),
 * growing it; -1 on error (the scans appended so far stay in buf for the caller to release). */
static int push_scans(PyObject *scans, Scan **buf, Py_ssize_t *n, Py_ssize_t *cap) {
    PyObject *it = PyObject_GetIter(scans);
    if (!it) return -1;
    PyObject *item;
    while ((item = PyIter_Next(it)) != NULL) {
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
            Py_DECREF(item);
            Py_DECREF(it);
            PyErr_SetString(PyExc_TypeError, "a scan is a (t, q, E) tuple");
            return -1;
        }
        long t = PyLong_AsLong(PyTuple_GET_ITEM(item, 0)), q = PyLong_AsLong(PyTuple_GET_ITEM(item, 1));
        if ((t == -1 || q == -1) && PyErr_Occurred()) {
            Py_DECREF(item);
            Py_DECREF(it);
            return -1;
        }
        if (t < INT32_MIN || t > INT32_MAX || q < INT32_MIN || q > INT32_MAX) {
            Py_DECREF(item);
            Py_DECREF(it);
            PyErr_SetString(PyExc_OverflowError, "a scan id or DFA state beyond 32 bits");
            return -1;
        }
        if (*n == *cap) {
            Scan *b2 = (Scan *)realloc(*buf, 2 * (size_t)*cap * sizeof(Scan));
            if (!b2) {
                Py_DECREF(item);
                Py_DECREF(it);
                PyErr_NoMemory();
                return -1;
            }
            *buf = b2;
            *cap *= 2;
        }
        (*buf)[*n].t = (int32_t)t;
        (*buf)[*n].q = (int32_t)q;
        (*buf)[*n].e = PyTuple_GET_ITEM(item, 2);
        Py_INCREF((*buf)[*n].e);
        (*n)++;
        Py_DECREF(item);
    }
    Py_DECREF(it);
    return PyErr_Occurred() ? -1 : 0;
}

/* State(scans, acc): scans an iterable of (t, q, E) tuples (duplicates allowed). */
static PyObject *state_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *scans, *accobj;
    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "State takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OO:State", &scans, &accobj)) return NULL;
    int acc = PyObject_IsTrue(accobj);
    if (acc < 0) return NULL;
    Py_ssize_t cap = 16, n = 0;
    Scan *buf = (Scan *)malloc(cap * sizeof(Scan));
    if (!buf) return PyErr_NoMemory();
    if (push_scans(scans, &buf, &n, &cap) < 0) {
        for (Py_ssize_t i = 0; i < n; i++) Py_DECREF(buf[i].e);
        free(buf);
        return NULL;
    }
    return state_from_buf(type, buf, n, acc);
}

static void state_dealloc(StateObject *self) {
    for (Py_ssize_t i = 0; i < Py_SIZE(self); i++) Py_DECREF(self->scans[i].e);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_hash_t state_hash(StateObject *self) { return self->hash; }

static PyObject *state_richcompare(PyObject *a, PyObject *b, int op) {
    if ((op != Py_EQ && op != Py_NE) || !PyObject_TypeCheck(b, &StateType) || !PyObject_TypeCheck(a, &StateType))
        Py_RETURN_NOTIMPLEMENTED;
    StateObject *x = (StateObject *)a, *y = (StateObject *)b;
    int eq = x == y || (Py_SIZE(x) == Py_SIZE(y) && x->acc == y->acc && x->hash == y->hash &&
                        memcmp(x->scans, y->scans, (size_t)Py_SIZE(x) * sizeof(Scan)) == 0);
    if (op == Py_NE) eq = !eq;
    if (eq) Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

typedef struct {
    PyObject_HEAD
    StateObject *state;
} ScansObject;

static PyTypeObject ScansType;

/* A State reads as the tuple (scans, accepting) did: len 2, state[0] the scans (a view: iterable
 * over (t, q, E) tuples, len the number of scans), state[1] whether it accepts, and
 * ``scans, acc = state`` unpacks (through the sequence protocol: items 0, 1, then IndexError). */
static Py_ssize_t state_len(StateObject *self) { return 2; }

static PyObject *state_item(StateObject *self, Py_ssize_t i) {
    if (i == 0) {
        ScansObject *v = PyObject_New(ScansObject, &ScansType);
        if (!v) return NULL;
        Py_INCREF(self);
        v->state = self;
        return (PyObject *)v;
    }
    if (i == 1) return PyBool_FromLong(self->acc);
    PyErr_SetString(PyExc_IndexError, "a chart state is (scans, accepting): index 0 or 1");
    return NULL;
}

static PyObject *state_subscript(StateObject *self, PyObject *key) {
    Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
    if (i == -1 && PyErr_Occurred()) return NULL;
    return state_item(self, i < 0 ? i + 2 : i);
}

static PyObject *state_tuple_of(StateObject *self, Py_ssize_t i) {
    Scan *s = &self->scans[i];
    PyObject *t = PyLong_FromLong(s->t), *q = PyLong_FromLong(s->q);
    if (!t || !q) {
        Py_XDECREF(t);
        Py_XDECREF(q);
        return NULL;
    }
    PyObject *tup = PyTuple_New(3);
    if (!tup) {
        Py_DECREF(t);
        Py_DECREF(q);
        return NULL;
    }
    Py_INCREF(s->e);
    PyTuple_SET_ITEM(tup, 0, t);
    PyTuple_SET_ITEM(tup, 1, q);
    PyTuple_SET_ITEM(tup, 2, s->e);
    return tup;
}

typedef struct {
    PyObject_HEAD
    StateObject *state;
    Py_ssize_t i;
} StateIterObject;

static PyObject *scans_iter(ScansObject *v) {
    StateIterObject *it = PyObject_New(StateIterObject, &StateIterType);
    if (!it) return NULL;
    Py_INCREF(v->state);
    it->state = v->state;
    it->i = 0;
    return (PyObject *)it;
}

static Py_ssize_t scans_len(ScansObject *v) { return Py_SIZE(v->state); }

static void scans_dealloc(ScansObject *v) {
    Py_DECREF(v->state);
    PyObject_Free(v);
}

static void stateiter_dealloc(StateIterObject *it) {
    Py_DECREF(it->state);
    PyObject_Free(it);
}

static PyObject *stateiter_next(StateIterObject *it) {
    if (it->i >= Py_SIZE(it->state)) return NULL;
    return state_tuple_of(it->state, it->i++);
}

static PyObject *state_accepting(StateObject *self, void *closure) { return PyBool_FromLong(self->acc); }

static PyObject *state_reduce(StateObject *self, PyObject *unused) {
    PyObject *scans = PyTuple_New(Py_SIZE(self));
    if (!scans) return NULL;
    for (Py_ssize_t i = 0; i < Py_SIZE(self); i++) {
        PyObject *tup = state_tuple_of(self, i);
        if (!tup) {
            Py_DECREF(scans);
            return NULL;
        }
        PyTuple_SET_ITEM(scans, i, tup);
    }
    return Py_BuildValue("(O(NO))", (PyObject *)Py_TYPE(self), scans, self->acc ? Py_True : Py_False);
}

static PyObject *state_self(PyObject *self, PyObject *unused) {
    Py_INCREF(self);
    return self;
}

static PyObject *state_repr(StateObject *self) {
    return PyUnicode_FromFormat("State(%zd scans, accepting=%s)", Py_SIZE(self), self->acc ? "True" : "False");
}

static PySequenceMethods state_as_sequence = {
    .sq_length = (lenfunc)state_len,
    .sq_item = (ssizeargfunc)state_item,
};

static PyMappingMethods state_as_mapping = {
    .mp_length = (lenfunc)state_len,
    .mp_subscript = (binaryfunc)state_subscript,
};

static PyGetSetDef state_getset[] = {
    {"accepting", (getter)state_accepting, NULL, "whether the text so far is a sentence", NULL},
    {NULL},
};

static PyMethodDef state_methods[] = {
    {"__reduce__", (PyCFunction)state_reduce, METH_NOARGS, NULL},
    {"__copy__", (PyCFunction)state_self, METH_NOARGS, "immutable: itself"},
    {"__deepcopy__", (PyCFunction)state_self, METH_O, "immutable: itself (its item sets are the engine's)"},
    {NULL},
};

static PyTypeObject StateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "trellis.constrain.earley._statec.State",
    .tp_basicsize = offsetof(StateObject, scans),
    .tp_itemsize = sizeof(Scan),
    .tp_dealloc = (destructor)state_dealloc,
    .tp_repr = (reprfunc)state_repr,
    .tp_as_sequence = &state_as_sequence,
    .tp_as_mapping = &state_as_mapping,
    .tp_hash = (hashfunc)state_hash,
    .tp_flags = Py_TPFLAGS_DEFAULT, /* no Py_TPFLAGS_HAVE_GC: never tracked (module comment) */
    .tp_doc = "An Earley chart state: its scans (t, q, E) and whether it accepts (see the module comment).",
    .tp_richcompare = state_richcompare,
    .tp_methods = state_methods,
    .tp_getset = state_getset,
    .tp_new = state_new,
    .tp_free = PyObject_Free,
};

static PySequenceMethods scans_as_sequence = {
    .sq_length = (lenfunc)scans_len,
};

static PyTypeObject ScansType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "trellis.constrain.earley._statec.Scans",
    .tp_basicsize = sizeof(ScansObject),
    .tp_dealloc = (destructor)scans_dealloc,
    .tp_as_sequence = &scans_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A chart state's scans (t, q, E), in a canonical order.",
    .tp_iter = (getiterfunc)scans_iter,
};

static PyTypeObject StateIterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "trellis.constrain.earley._statec.StateIterator",
    .tp_basicsize = sizeof(StateIterObject),
    .tp_dealloc = (destructor)stateiter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)stateiter_next,
};


/* -- Earley.step's scan loop (earley.Earley.step; the Python body is the reference and the
 * fallback). Why: stepping a chart state over one byte is the innermost operation of every mask
 * that resolves a token split at a terminal's end (``_take``, ``_chart_walk``) and of every
 * advance; in Python it was ~3-6 us a step (a tuple and a set entry per scan, the output set,
 * then the State built from it), ~8% of the fresh masks of bench_fresh's schemas (cProfile).
 *
 * step(state, b, trans, final, has_out, guard, ignore, term[, after_many]) -> State | None | False
 *   trans/final/has_out/guard/ignore/term: Earley's per-scan-id lists (int32 array tables, bytes,
 *   bytes, FollowGuard or None, bool, terminal id); after_many: Earley._after_many (the boundary
 *   after several terminals complete at one byte, by the frozenset of their (terminal, start set)
 *   pairs). The state after byte b (None: no scan takes it), where the boundary the completing
 *   scans make is already memoised (one scan that is not ignored: in its item set,
 *   ``ESet.after``; several: in after_many) and no completing scan has a follow guard; False
 *   otherwise (then Earley.step runs its Python body, which memoises the boundary, so the next
 *   such step is taken here). Why after_many: in grammars where terminals overlap under %ignore
 *   (lark.lark: a name, a comment and whitespace ending at one byte), two completions at one byte
 *   were ~70% of the steps declined to Python, and those masks ran 110-310 ms (lark.lark,
 *   random-walk documents of benchmarks/bench_fresh.py). */

static PyObject *str_after, *str_starts, *str_accepting;

/* Add E's `starts` and OR its `accepting` into *acc; -1 on error. */
static int push_set(PyObject *e, Scan **buf, Py_ssize_t *n, Py_ssize_t *cap, int *acc) {
    PyObject *starts = PyObject_GetAttr(e, str_starts);
    if (!starts) return -1;
    int r = push_scans(starts, buf, n, cap);
    Py_DECREF(starts);
    if (r < 0) return -1;
    PyObject *a = PyObject_GetAttr(e, str_accepting);
    if (!a) return -1;
    int ok = PyObject_IsTrue(a);
    Py_DECREF(a);
    if (ok < 0) return -1;
    *acc |= ok;
    return 0;
}

/* The scan tables ``step`` reads, per scan id (Earley's lists: trans, final, has_out, scan_guard,
 * scan_ignore, scan_term). */
typedef struct {
    PyObject *trans, *final, *has_out, *guard, *ignore, *term;
    PyObject *after_many; /* a dict, or NULL: several completions at one byte are declined */
    /* Earley._close_ctx (or NULL) and the Earley object (or NULL): with both, a boundary not
     * memoised yet is made in C (``after_core``, which may call back into Python: the walker
     * sets earley only once its counters are written back); without, such a step declines. */
    PyObject *ctx, *earley;
} Tables;

static PyObject *after_core(PyObject *e, PyObject *t, PyObject *earley, PyObject *ctx);
static PyObject *close_core(PyObject *kernel, PyObject *earley, PyObject *ctx);
static int kernel_add(PyObject *out, PyObject *e, PyObject *tkey);

/* The item set in after_many for the completions done[0:nd] (scan indices into st): the key is
 * the frozenset of (scan_term[t], e) pairs, as Earley._step builds it. A new reference; NULL
 * with no error set: not memoised; NULL with an error set: an error. */
static PyObject *after_many_get(const Scan *scans, const Py_ssize_t *done, Py_ssize_t nd, PyObject *term,
                                PyObject *after_many, PyObject **key_out) {
    PyObject *pairs = PyList_New(nd);
    if (!pairs) return NULL;
    for (Py_ssize_t k = 0; k < nd; k++) {
        const Scan *sc = &scans[done[k]];
        PyObject *pair = PyTuple_Pack(2, PyList_GET_ITEM(term, sc->t), sc->e);
        if (!pair) {
            Py_DECREF(pairs);
            return NULL;
        }
        PyList_SET_ITEM(pairs, k, pair);
    }
    PyObject *key = PyFrozenSet_New(pairs);
    Py_DECREF(pairs);
    if (!key) return NULL;
    PyObject *a = PyDict_GetItemWithError(after_many, key);
    Py_XINCREF(a);
    if (key_out && !a && !PyErr_Occurred())
        *key_out = key;  /* the caller's reference */
    else
        Py_DECREF(key);
    return a;
}

/* Earley._step's boundary after several completions (done[0:nd], with after_many's key) not
 * memoised yet: made in C as Python makes it (after_many bounded by MAX_SETS first). */
static PyObject *after_many_make(const Scan *scans, const Py_ssize_t *done, Py_ssize_t nd, PyObject *term,
                                 PyObject *key, const Tables *tb) {
    long max_sets = PyLong_AsLong(PyTuple_GET_ITEM(tb->ctx, 10));
    if (max_sets == -1 && PyErr_Occurred()) return NULL;
    if (PyDict_GET_SIZE(tb->after_many) > max_sets) PyDict_Clear(tb->after_many);
    PyObject *kernel = PyFrozenSet_New(NULL);
    for (Py_ssize_t k = 0; kernel && k < nd; k++)
        if (kernel_add(kernel, scans[done[k]].e, PyList_GET_ITEM(term, scans[done[k]].t)) < 0) Py_CLEAR(kernel);
    PyObject *a = kernel ? close_core(kernel, tb->earley, tb->ctx) : NULL;
    Py_XDECREF(kernel);
    if (a && PyDict_SetItem(tb->after_many, key, a) < 0) Py_CLEAR(a);
    return a;
}

/* Earley.step's scan loop from st over byte b (0-255): a new reference to the next State, Py_None
 * (no scan takes b) or Py_False (declined: Python's Earley._step decides); NULL on error. */
static PyObject *step_core(StateObject *st, int b, const Tables *tb) {
    PyObject *trans = tb->trans, *final = tb->final, *has_out = tb->has_out, *guard = tb->guard,
             *ignore = tb->ignore, *term = tb->term;
    Py_ssize_t n = 0, cap = Py_SIZE(st) + 8;
    Scan *buf = (Scan *)malloc((size_t)cap * sizeof(Scan));
    if (!buf) return PyErr_NoMemory();
    int acc = 0, fallback = 0;
    /* the scans (indices into st) that complete a terminal that is not ignored; a few at most */
    Py_ssize_t done_small[8], *done = done_small, nd = 0, done_cap = 8;
    Py_buffer view = {0};
    Py_ssize_t view_t = -1;  /* the scan id whose table `view` holds (scans are sorted by id) */
    for (Py_ssize_t i = 0; i < Py_SIZE(st) && !fallback; i++) {
        Py_ssize_t t = st->scans[i].t;
        int32_t q = st->scans[i].q;
        if (t < 0 || t >= PyList_GET_SIZE(trans) || t >= PyList_GET_SIZE(final) || t >= PyList_GET_SIZE(has_out) ||
            t >= PyList_GET_SIZE(guard) || t >= PyList_GET_SIZE(ignore) || t >= PyList_GET_SIZE(term)) {
            fallback = 1;
            break;
        }
        if (t != view_t) {
            if (view_t >= 0) PyBuffer_Release(&view);
            view_t = -1;
            if (PyObject_GetBuffer(PyList_GET_ITEM(trans, t), &view, PyBUF_SIMPLE) < 0) {
                PyErr_Clear();
                fallback = 1;  /* a table not loaded (None): Python says why */
                break;
            }
            view_t = t;
        }
        PyObject *fo = PyList_GET_ITEM(final, t), *ho = PyList_GET_ITEM(has_out, t);
        Py_ssize_t idx = ((Py_ssize_t)q << 8) | b;
        if (!PyBytes_Check(fo) || !PyBytes_Check(ho) || (idx + 1) * 4 > view.len) {
            fallback = 1;
            break;
        }
        int32_t q2 = ((const int32_t *)view.buf)[idx];
        if (q2 < 0) continue;
        if (q2 >= PyBytes_GET_SIZE(fo) || q2 >= PyBytes_GET_SIZE(ho)) {
            fallback = 1;
            break;
        }
        PyObject *e = st->scans[i].e;
        if (PyBytes_AS_STRING(ho)[q2]) {
            if (n == cap) {
                Scan *b2 = (Scan *)realloc(buf, 2 * (size_t)cap * sizeof(Scan));
                if (!b2) {
                    PyErr_NoMemory();
                    goto error;
                }
                buf = b2;
                cap *= 2;
            }
            buf[n].t = (int32_t)t;
            buf[n].q = q2;
            buf[n].e = e;
            Py_INCREF(e);
            n++;
        }
        if (PyBytes_AS_STRING(fo)[q2]) {
            if (PyList_GET_ITEM(guard, t) != Py_None) {
                fallback = 1;  /* its own boundary under a follow guard */
                break;
            }
            int ig = PyObject_IsTrue(PyList_GET_ITEM(ignore, t));
            if (ig < 0) goto error;
            if (ig) {  /* an ignored terminal: the same set again */
                if (push_set(e, &buf, &n, &cap, &acc) < 0) goto error;
            } else if (nd > 0 && tb->after_many == NULL) {
                fallback = 1;  /* two terminals complete here: one Earley set (Python's _after_many) */
                break;
            } else {
                if (nd == done_cap) {
                    Py_ssize_t *d2 = (Py_ssize_t *)malloc(2 * (size_t)done_cap * sizeof(Py_ssize_t));
                    if (!d2) {
                        PyErr_NoMemory();
                        goto error;
                    }
                    memcpy(d2, done, (size_t)nd * sizeof(Py_ssize_t));
                    if (done != done_small) free(done);
                    done = d2;
                    done_cap *= 2;
                }
                done[nd++] = i;
            }
        }
    }
    if (view_t >= 0) PyBuffer_Release(&view);
    view_t = -1;
    if (!fallback && nd > 0) {
        PyObject *a, *key = NULL;
        int make = tb->ctx != NULL && tb->earley != NULL;
        if (nd == 1) {
            PyObject *e0 = st->scans[done[0]].e, *t0 = PyList_GET_ITEM(term, st->scans[done[0]].t);
            PyObject *after = PyObject_GetAttr(e0, str_after);
            if (!after) goto error;
            a = PyDict_Check(after) ? PyDict_GetItemWithError(after, t0) : NULL;
            Py_XINCREF(a);
            Py_DECREF(after);
            if (!a && !PyErr_Occurred() && make) a = after_core(e0, t0, tb->earley, tb->ctx);
        } else {
            a = after_many_get(st->scans, done, nd, term, tb->after_many, make ? &key : NULL);
            if (key) {
                a = after_many_make(st->scans, done, nd, term, key, tb);
                Py_DECREF(key);
            }
        }
        if (a == NULL) {
            if (PyErr_Occurred()) goto error;
            fallback = 1;  /* the boundary is not memoised yet: Python makes it */
        } else {
            int r = push_set(a, &buf, &n, &cap, &acc);
            Py_DECREF(a);
            if (r < 0) goto error;
        }
    }
    if (done != done_small) free(done);
    done = done_small;
    if (fallback) {
        for (Py_ssize_t i = 0; i < n; i++) Py_DECREF(buf[i].e);
        free(buf);
        Py_RETURN_FALSE;
    }
    if (n == 0 && !acc) {
        free(buf);
        Py_RETURN_NONE;
    }
    return state_from_buf(&StateType, buf, n, acc);
error:
    if (view_t >= 0) PyBuffer_Release(&view);
    if (done != done_small) free(done);
    for (Py_ssize_t i = 0; i < n; i++) Py_DECREF(buf[i].e);
    free(buf);
    return NULL;
}

static int parse_tables(PyObject *trans, PyObject *final, PyObject *has_out, PyObject *guard, PyObject *ignore,
                        PyObject *term, PyObject *after_many, Tables *tb) {
    PyObject *all[6] = {trans, final, has_out, guard, ignore, term};
    for (int i = 0; i < 6; i++) {
        if (!PyList_Check(all[i])) {
            PyErr_SetString(PyExc_TypeError, "step: the scan tables are lists");
            return -1;
        }
    }
    tb->trans = trans, tb->final = final, tb->has_out = has_out, tb->guard = guard, tb->ignore = ignore, tb->term = term;
    tb->after_many = NULL;
    tb->ctx = tb->earley = NULL;
    if (after_many != NULL && after_many != Py_None) {
        if (!PyDict_Check(after_many)) {
            PyErr_SetString(PyExc_TypeError, "step: after_many is a dict");
            return -1;
        }
        tb->after_many = after_many;
    }
    return 0;
}

/* tb's ctx (Earley._close_ctx, or None); -1 on error. */
static int tables_ctx(Tables *tb, PyObject *ctx) {
    if (ctx == NULL || ctx == Py_None) return 0;
    if (!PyTuple_Check(ctx) || PyTuple_GET_SIZE(ctx) != 11 || !PyLong_Check(PyTuple_GET_ITEM(ctx, 10))) {
        PyErr_SetString(PyExc_TypeError, "step: ctx is Earley._close_ctx");
        return -1;
    }
    tb->ctx = ctx;
    return 0;
}

static PyObject *state_step(PyObject *module, PyObject *args) {
    StateObject *st;
    int b;
    PyObject *trans, *final, *has_out, *guard, *ignore, *term, *after_many = NULL, *ctx = NULL, *earley = NULL;
    Tables tb;
    if (!PyArg_ParseTuple(args, "O!iOOOOOO|OOO:step", &StateType, &st, &b, &trans, &final, &has_out, &guard, &ignore,
                          &term, &after_many, &ctx, &earley) ||
        parse_tables(trans, final, has_out, guard, ignore, term, after_many, &tb) < 0 || tables_ctx(&tb, ctx) < 0)
        return NULL;
    if (earley != NULL && earley != Py_None) tb.earley = earley;
    if (b < 0 || b > 255) {
        PyErr_SetString(PyExc_ValueError, "step: a byte is 0-255");
        return NULL;
    }
    return step_core(st, b, &tb);
}


/* -- Earley._close's agenda (earley.Earley._close; the Python loop is the reference and the
 * fallback). Why: the closure of a new item set (completer and predictor bookkeeping) was the
 * largest single function of bench_fresh's median schemas' fresh masks (~7% of them, cProfile),
 * a tuple and a set entry per item in the interpreter.
 *
 * close(kernel, next_sym, lhs, nullable, accept_item)
 *     -> (items, waiting, expects, predicted, accepting, future)
 *   kernel: the (item, origin set) pairs, every origin an ESet; next_sym / lhs: int32 per item
 *   (next_sym INT32_MIN where the item is complete); nullable: one byte per nonterminal. The
 *   items closed under completion (an origin's ``waiting`` and ``static.waiting``) and nullable
 *   symbols, as Python's loop makes them: ``items`` (a set), ``waiting`` and ``expects`` (dicts
 *   of lists of (item, origin), by nonterminal and by terminal), ``predicted`` (a frozenset of
 *   nonterminals), whether ``accept_item`` completed, and ``future``: the frozenset of the items
 *   still waiting for a symbol. */

static PyObject *str_waiting, *str_static;

/* items.add(pair) and agenda.append(pair) unless already in; steals nothing. -1 on error. */
static int close_push(PyObject *items, PyObject *agenda, long i, PyObject *o) {
    PyObject *io = PyLong_FromLong(i);
    if (!io) return -1;
    PyObject *it = PyTuple_Pack(2, io, o);
    Py_DECREF(io);
    if (!it) return -1;
    int in = PySet_Contains(items, it);
    int r = 0;
    if (in < 0) r = -1;
    else if (!in) r = (PySet_Add(items, it) < 0 || PyList_Append(agenda, it) < 0) ? -1 : 0;
    Py_DECREF(it);
    return r;
}

/* d.setdefault(key, []).append(it). -1 on error. */
static int close_file(PyObject *d, long key, PyObject *it) {
    PyObject *k = PyLong_FromLong(key);
    if (!k) return -1;
    PyObject *lst = PyDict_GetItemWithError(d, k);
    int r;
    if (lst) {
        r = PyList_Append(lst, it);
    } else if (PyErr_Occurred()) {
        r = -1;
    } else {
        lst = PyList_New(1);
        if (!lst) {
            Py_DECREF(k);
            return -1;
        }
        Py_INCREF(it);
        PyList_SET_ITEM(lst, 0, it);
        r = PyDict_SetItem(d, k, lst);
        Py_DECREF(lst);
    }
    Py_DECREF(k);
    return r;
}

/* close's agenda over the tables' buffers (ns_b, lhs_b, nul_b: next_sym, lhs, nullable): the
 * 6-tuple ``close`` returns, or NULL with an error set. */
static PyObject *agenda_core(PyObject *kernel, Py_buffer *ns_b, Py_buffer *lhs_b, Py_buffer *nul_b, long accept_item) {
    const int32_t *next_sym = (const int32_t *)ns_b->buf, *lhs = (const int32_t *)lhs_b->buf;
    const uint8_t *nullable = (const uint8_t *)nul_b->buf;
    Py_ssize_t n_items = ns_b->len / 4, n_nt = nul_b->len;
    PyObject *items = NULL, *agenda = NULL, *waiting = NULL, *expects = NULL, *predicted = NULL, *future = NULL,
             *result = NULL;
    int accepting = 0;
    if (lhs_b->len != ns_b->len) {
        PyErr_SetString(PyExc_ValueError, "close: next_sym and lhs differ in length");
        goto done;
    }
    items = PySet_New(kernel);
    agenda = items ? PySequence_List(items) : NULL;
    waiting = PyDict_New();
    expects = PyDict_New();
    predicted = PySet_New(NULL);
    if (!items || !agenda || !waiting || !expects || !predicted) goto done;
    while (PyList_GET_SIZE(agenda)) {
        Py_ssize_t last = PyList_GET_SIZE(agenda) - 1;
        PyObject *it = PyList_GET_ITEM(agenda, last);
        Py_INCREF(it);
        if (PyList_SetSlice(agenda, last, last + 1, NULL) < 0) {
            Py_DECREF(it);
            goto done;
        }
        long i = PyTuple_Check(it) && PyTuple_GET_SIZE(it) == 2 ? PyLong_AsLong(PyTuple_GET_ITEM(it, 0)) : -1;
        if (i < 0 || i >= n_items) {
            Py_DECREF(it);
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "close: an item is an (index, origin) pair");
            goto done;
        }
        PyObject *o = PyTuple_GET_ITEM(it, 1);
        int32_t s = next_sym[i];
        int err = 0;
        if (s == INT32_MIN) {  /* complete: advance what waits for its left-hand side in its origin */
            if (i == accept_item) accepting = 1;
            PyObject *key = PyLong_FromLong(lhs[i]);
            PyObject *ow = key ? PyObject_GetAttr(o, str_waiting) : NULL;
            PyObject *lst = ow ? PyDict_GetItemWithError(ow, key) : NULL;  /* [(j, o2)] */
            if (lst && !PyList_Check(lst)) {
                err = 1;
            } else if (lst) {
                for (Py_ssize_t k = 0; k < PyList_GET_SIZE(lst) && !err; k++) {
                    PyObject *w = PyList_GET_ITEM(lst, k);
                    if (!PyTuple_Check(w) || PyTuple_GET_SIZE(w) != 2) {
                        err = 1;
                        break;
                    }
                    long j = PyLong_AsLong(PyTuple_GET_ITEM(w, 0));
                    err = (j == -1 && PyErr_Occurred()) || close_push(items, agenda, j + 1, PyTuple_GET_ITEM(w, 1)) < 0;
                }
            } else if (PyErr_Occurred()) {
                err = 1;
            }
            PyObject *st = !err && ow ? PyObject_GetAttr(o, str_static) : NULL;
            PyObject *sw = st ? PyObject_GetAttr(st, str_waiting) : NULL;
            PyObject *tup = sw ? PyDict_GetItemWithError(sw, key) : NULL;  /* (j, ...) */
            if (tup && !PyTuple_Check(tup)) {
                err = 1;
            } else if (tup) {
                for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(tup) && !err; k++) {
                    long j = PyLong_AsLong(PyTuple_GET_ITEM(tup, k));
                    err = (j == -1 && PyErr_Occurred()) || close_push(items, agenda, j + 1, o) < 0;
                }
            } else if (PyErr_Occurred() || !sw) {
                err = 1;
            }
            Py_XDECREF(key);
            Py_XDECREF(ow);
            Py_XDECREF(st);
            Py_XDECREF(sw);
        } else if (s >= 0) {  /* waits for a nonterminal: predicted here (``_static``) */
            PyObject *k = PyLong_FromLong(s);
            err = !k || close_file(waiting, s, it) < 0 || PySet_Add(predicted, k) < 0;
            Py_XDECREF(k);
            if (!err && s < n_nt && nullable[s]) err = close_push(items, agenda, i + 1, o) < 0;
        } else {  /* expects a terminal */
            err = close_file(expects, -1 - (long)s, it) < 0;
        }
        Py_DECREF(it);
        if (err) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "close: an origin set without waiting/static");
            goto done;
        }
    }
    {
        PyObject *fl = PyList_New(0);
        if (!fl) goto done;
        PyObject *iter = PyObject_GetIter(items), *it;
        if (!iter) {
            Py_DECREF(fl);
            goto done;
        }
        while ((it = PyIter_Next(iter)) != NULL) {
            long i = PyLong_AsLong(PyTuple_GET_ITEM(it, 0));
            int r = (i >= 0 && i < n_items && next_sym[i] != INT32_MIN) ? PyList_Append(fl, it) : 0;
            Py_DECREF(it);
            if (r < 0) break;
        }
        Py_DECREF(iter);
        if (PyErr_Occurred()) {
            Py_DECREF(fl);
            goto done;
        }
        future = PyFrozenSet_New(fl);
        Py_DECREF(fl);
        if (!future) goto done;
    }
    {
        PyObject *pf = PyFrozenSet_New(predicted);
        if (!pf) goto done;
        result = Py_BuildValue("(OOONON)", items, waiting, expects, pf, PyBool_FromLong(accepting), future);
        future = NULL;  /* stolen by N */
    }
done:
    Py_XDECREF(items);
    Py_XDECREF(agenda);
    Py_XDECREF(waiting);
    Py_XDECREF(expects);
    Py_XDECREF(predicted);
    Py_XDECREF(future);
    return result;
}

static PyObject *items_close(PyObject *module, PyObject *args) {
    PyObject *kernel;
    Py_buffer ns_b, lhs_b, nul_b;
    long accept_item;
    if (!PyArg_ParseTuple(args, "Oy*y*y*l:close", &kernel, &ns_b, &lhs_b, &nul_b, &accept_item)) return NULL;
    PyObject *result = agenda_core(kernel, &ns_b, &lhs_b, &nul_b, accept_item);
    PyBuffer_Release(&ns_b);
    PyBuffer_Release(&lhs_b);
    PyBuffer_Release(&nul_b);
    return result;
}

/* -- Earley.after and Earley._close past their memos (earley.py; the Python methods are the
 * reference and the fallback). Why: a new item set's bookkeeping around the C agenda (its kernel,
 * the static part's lookup, the future's interning, the ESet's fields, its scans) was ~20% of
 * bench_fresh's 100 schema documents' fresh masks and ~18% of its grammars' (wall-clock timers:
 * ~32 us a set over 11,554 sets, the agenda ~8 us of it).
 *
 * next_kernel(pairs) -> Earley._next_kernel(pairs): pairs a list of (terminal, ESet).
 * close_kernel(kernel, earley, ctx) -> Earley._close(kernel) for a kernel whose items all have an
 *   origin set (any other kernel, and the set that passes MAX_SETS, go to earley._close).
 * after(e, t, earley, ctx) -> Earley.after(e, t).
 * ctx (Earley._close_ctx): (next_sym, lhs, nullable, accept_item, _predicted, _futures, _sets,
 *   _scan_ids, ESet, _NO_ROOTS, MAX_SETS). Memo misses of _static and _scan_ids_of, and the work
 *   charged (earley.charge, which may raise WorkExhausted), are Python calls, in Python's order. */
static PyObject *str_work, *str_work_limit, *str_steps_scans, *str_charge;
static PyObject *str_step_fn;
static PyObject *str_expects, *str_content, *str_kernel, *str_static_fn, *str_scan_ids_of, *str_close_fn, *str_made,
    *int_zero;

/* Add the item (i, o) to the new frozenset out: -1 on error. */
static int kernel_item(PyObject *out, long i, PyObject *o) {
    PyObject *io = PyLong_FromLong(i);
    PyObject *it = io ? PyTuple_Pack(2, io, o) : NULL;
    int r = it ? PySet_Add(out, it) : -1;
    Py_XDECREF(io);
    Py_XDECREF(it);
    return r;
}

/* Add to the new frozenset `out` the items of e waiting for terminal tkey, advanced: -1 on error. */
static int kernel_add(PyObject *out, PyObject *e, PyObject *tkey) {
    PyObject *ex = PyObject_GetAttr(e, str_expects);
    if (!ex) return -1;
    int err = !PyDict_Check(ex);
    PyObject *lst = err ? NULL : PyDict_GetItemWithError(ex, tkey);
    if (lst) {
        err = !PyList_Check(lst);
        for (Py_ssize_t k = 0; !err && k < PyList_GET_SIZE(lst); k++) {
            PyObject *w = PyList_GET_ITEM(lst, k);
            if (!PyTuple_Check(w) || PyTuple_GET_SIZE(w) != 2) {
                err = 1;
                break;
            }
            long i = PyLong_AsLong(PyTuple_GET_ITEM(w, 0));
            err = (i == -1 && PyErr_Occurred()) || kernel_item(out, i + 1, PyTuple_GET_ITEM(w, 1)) < 0;
        }
    } else if (PyErr_Occurred()) {
        err = 1;
    }
    Py_DECREF(ex);
    PyObject *st = err ? NULL : PyObject_GetAttr(e, str_static);
    PyObject *sx = st ? PyObject_GetAttr(st, str_expects) : NULL;
    PyObject *tup = sx && PyDict_Check(sx) ? PyDict_GetItemWithError(sx, tkey) : NULL;
    if (!err && (!sx || !PyDict_Check(sx) || (!tup && PyErr_Occurred()) || (tup && !PyTuple_Check(tup)))) err = 1;
    for (Py_ssize_t k = 0; !err && tup && k < PyTuple_GET_SIZE(tup); k++) {
        long i = PyLong_AsLong(PyTuple_GET_ITEM(tup, k));
        err = (i == -1 && PyErr_Occurred()) || kernel_item(out, i + 1, e) < 0;
    }
    Py_XDECREF(st);
    Py_XDECREF(sx);
    if (err && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "next_kernel: an ESet's expects are malformed");
    return err ? -1 : 0;
}

static PyObject *next_kernel(PyObject *module, PyObject *pairs) {
    PyObject *seq = PySequence_Fast(pairs, "next_kernel: pairs is a sequence");
    if (!seq) return NULL;
    PyObject *out = PyFrozenSet_New(NULL);
    for (Py_ssize_t k = 0; out && k < PySequence_Fast_GET_SIZE(seq); k++) {
        PyObject *p = PySequence_Fast_GET_ITEM(seq, k);
        if (!PyTuple_Check(p) || PyTuple_GET_SIZE(p) != 2) {
            PyErr_SetString(PyExc_TypeError, "next_kernel: pairs of (terminal, ESet)");
            Py_CLEAR(out);
        } else if (kernel_add(out, PyTuple_GET_ITEM(p, 1), PyTuple_GET_ITEM(p, 0)) < 0) {
            Py_CLEAR(out);
        }
    }
    Py_DECREF(seq);
    return out;
}

/* The ESet made for kernel (``_close`` past the memo and the MAX_SETS check): a new reference. */
static PyObject *close_new(PyObject *kernel, PyObject *earley, PyObject *ctx) {
    PyObject *predicted_memo = PyTuple_GET_ITEM(ctx, 4), *futures = PyTuple_GET_ITEM(ctx, 5),
             *sets = PyTuple_GET_ITEM(ctx, 6), *scan_ids = PyTuple_GET_ITEM(ctx, 7),
             *eset_type = PyTuple_GET_ITEM(ctx, 8), *no_roots = PyTuple_GET_ITEM(ctx, 9);
    long accept_item = PyLong_AsLong(PyTuple_GET_ITEM(ctx, 3));
    if (accept_item == -1 && PyErr_Occurred()) return NULL;
    Py_buffer ns_b, lhs_b, nul_b;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(ctx, 0), &ns_b, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(ctx, 1), &lhs_b, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&ns_b);
        return NULL;
    }
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(ctx, 2), &nul_b, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&ns_b);
        PyBuffer_Release(&lhs_b);
        return NULL;
    }
    PyObject *closed = agenda_core(kernel, &ns_b, &lhs_b, &nul_b, accept_item);
    PyBuffer_Release(&ns_b);
    PyBuffer_Release(&lhs_b);
    PyBuffer_Release(&nul_b);
    if (!closed) return NULL;
    /* (items, waiting, expects, predicted, accepting, pending) */
    PyObject *waiting = PyTuple_GET_ITEM(closed, 1), *expects = PyTuple_GET_ITEM(closed, 2),
             *predicted = PyTuple_GET_ITEM(closed, 3), *pending = PyTuple_GET_ITEM(closed, 5);
    int accepting = PyTuple_GET_ITEM(closed, 4) == Py_True;
    PyObject *static_ = NULL, *future = NULL, *e = NULL, *result = NULL, *expected = NULL, *ids = NULL, *tmp;
    PyObject *n = PyLong_FromSsize_t(PySet_GET_SIZE(PyTuple_GET_ITEM(closed, 0)));
    tmp = n ? PyObject_CallMethodObjArgs(earley, str_charge, n, NULL) : NULL;
    Py_XDECREF(n);
    if (!tmp) goto done;
    Py_DECREF(tmp);
    {
        PyObject *key = PyTuple_Pack(2, no_roots, predicted);
        if (!key) goto done;
        static_ = PyDict_GetItemWithError(predicted_memo, key);
        Py_XINCREF(static_);
        if (!static_ && !PyErr_Occurred()) static_ = PyObject_CallMethodObjArgs(earley, str_static_fn, no_roots, predicted, NULL);
        Py_DECREF(key);
        if (!static_) goto done;
    }
    tmp = PyObject_GetAttr(static_, str_accepting);
    if (!tmp) goto done;
    int sa = PyObject_IsTrue(tmp);
    Py_DECREF(tmp);
    if (sa < 0) goto done;
    accepting |= sa;
    tmp = PyObject_GetAttr(static_, str_content);
    if (!tmp) goto done;
    future = PyTuple_Pack(3, pending, tmp, accepting ? Py_True : Py_False);
    Py_DECREF(tmp);
    if (!future) goto done;
    {
        PyObject *same = PyDict_GetItemWithError(futures, future);
        if (same) {
            if (PyDict_SetItem(sets, kernel, same) < 0) goto done;
            Py_INCREF(same);
            result = same;
            goto done;
        }
        if (PyErr_Occurred()) goto done;
    }
    e = PyObject_CallNoArgs(eset_type);
    if (!e || PyObject_SetAttr(e, str_kernel, kernel) < 0 || PyObject_SetAttr(e, str_waiting, waiting) < 0 ||
        PyObject_SetAttr(e, str_expects, expects) < 0 || PyObject_SetAttr(e, str_static, static_) < 0 ||
        PyObject_SetAttr(e, str_accepting, accepting ? Py_True : Py_False) < 0)
        goto done;
    /* _scans: the expected terminals' scan ids (memoised), each started at state 0 of e */
    {
        PyObject *sx = PyObject_GetAttr(static_, str_expects);
        expected = sx && PyDict_Check(sx) ? PyFrozenSet_New(expects) : NULL;
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        int err = !expected;
        while (!err && PyDict_Next(sx, &pos, &k, &v)) err = PySet_Add(expected, k) < 0;
        Py_XDECREF(sx);
        if (err) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "close: static expects is a dict");
            goto done;
        }
    }
    ids = PyDict_GetItemWithError(scan_ids, expected);
    Py_XINCREF(ids);
    if (!ids) {
        if (PyErr_Occurred()) goto done;
        ids = PyObject_CallMethodObjArgs(earley, str_scan_ids_of, expected, NULL);
        if (!ids || PyDict_SetItem(scan_ids, expected, ids) < 0) goto done;
    }
    if (!PyTuple_Check(ids)) {
        PyErr_SetString(PyExc_TypeError, "close: scan ids are a tuple");
        goto done;
    }
    {
        PyObject *starts = PyFrozenSet_New(NULL);
        for (Py_ssize_t k = 0; starts && k < PyTuple_GET_SIZE(ids); k++) {
            PyObject *sc = PyTuple_Pack(3, PyTuple_GET_ITEM(ids, k), int_zero, e);
            if (!sc || PySet_Add(starts, sc) < 0) Py_CLEAR(starts);
            Py_XDECREF(sc);
        }
        int r = starts ? PyObject_SetAttr(e, str_starts, starts) : -1;
        Py_XDECREF(starts);
        if (r < 0 || PyDict_SetItem(sets, kernel, e) < 0 || PyDict_SetItem(futures, future, e) < 0) goto done;
    }
    Py_INCREF(e);
    result = e;
done:
    Py_DECREF(closed);
    Py_XDECREF(static_);
    Py_XDECREF(future);
    Py_XDECREF(e);
    Py_XDECREF(expected);
    Py_XDECREF(ids);
    return result;
}

/* Earley._close(kernel): a new reference. */
static PyObject *close_core(PyObject *kernel, PyObject *earley, PyObject *ctx) {
    if (!PyTuple_Check(ctx) || PyTuple_GET_SIZE(ctx) != 11 || !PyDict_Check(PyTuple_GET_ITEM(ctx, 4)) ||
        !PyDict_Check(PyTuple_GET_ITEM(ctx, 5)) || !PyDict_Check(PyTuple_GET_ITEM(ctx, 6)) ||
        !PyDict_Check(PyTuple_GET_ITEM(ctx, 7)) || !PyAnySet_Check(kernel)) {
        PyErr_SetString(PyExc_TypeError, "close_kernel: a frozenset kernel and Earley._close_ctx");
        return NULL;
    }
    PyObject *sets = PyTuple_GET_ITEM(ctx, 6);
    PyObject *hit = PyDict_GetItemWithError(sets, kernel);
    if (hit) {
        Py_INCREF(hit);
        return hit;
    }
    if (PyErr_Occurred()) return NULL;
    long max_sets = PyLong_AsLong(PyTuple_GET_ITEM(ctx, 10));
    PyObject *mo = PyObject_GetAttr(earley, str_made);
    long made = mo ? PyLong_AsLong(mo) : -1;
    Py_XDECREF(mo);
    if (made == -1 && PyErr_Occurred()) return NULL;
    /* past MAX_SETS (``_forget``), or the first set's kernel (its rootless item, the test
     * ``_close`` makes): Python */
    int python = made + 1 > max_sets;
    if (!python) {
        long accept_item = PyLong_AsLong(PyTuple_GET_ITEM(ctx, 3));
        PyObject *io = (accept_item == -1 && PyErr_Occurred()) ? NULL : PyLong_FromLong(accept_item - 1);
        PyObject *root = io ? PyTuple_Pack(2, io, Py_None) : NULL;
        python = root ? PySet_Contains(kernel, root) : -1;
        Py_XDECREF(io);
        Py_XDECREF(root);
        if (python < 0) return NULL;
    }
    if (python) return PyObject_CallMethodObjArgs(earley, str_close_fn, kernel, NULL);
    mo = PyLong_FromLong(made + 1);
    int r = mo ? PyObject_SetAttr(earley, str_made, mo) : -1;
    Py_XDECREF(mo);
    return r < 0 ? NULL : close_new(kernel, earley, ctx);
}

static PyObject *close_kernel(PyObject *module, PyObject *args) {
    PyObject *kernel, *earley, *ctx;
    if (!PyArg_ParseTuple(args, "OOO:close_kernel", &kernel, &earley, &ctx)) return NULL;
    return close_core(kernel, earley, ctx);
}

static PyObject *eset_after(PyObject *module, PyObject *args) {
    PyObject *e, *t, *earley, *ctx;
    if (!PyArg_ParseTuple(args, "OOOO:after", &e, &t, &earley, &ctx)) return NULL;
    return after_core(e, t, earley, ctx);
}

/* Earley.after(e, t): a new reference. */
static PyObject *after_core(PyObject *e, PyObject *t, PyObject *earley, PyObject *ctx) {
    PyObject *after = PyObject_GetAttr(e, str_after);
    if (!after) return NULL;
    PyObject *hit = PyDict_Check(after) ? PyDict_GetItemWithError(after, t) : NULL;
    if (hit || PyErr_Occurred() || !PyDict_Check(after)) {
        Py_XINCREF(hit);
        Py_DECREF(after);
        if (!hit && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "after: ESet.after is a dict");
        return hit;
    }
    PyObject *kernel = PyFrozenSet_New(NULL);
    if (kernel && kernel_add(kernel, e, t) < 0) Py_CLEAR(kernel);
    hit = kernel ? close_core(kernel, earley, ctx) : NULL;
    Py_XDECREF(kernel);
    if (hit && PyDict_SetItem(after, t, hit) < 0) Py_CLEAR(hit);
    Py_DECREF(after);
    return hit;
}


/* -- scannerless's chart walks: token suffixes stepped through the chart from one state, a byte
 * at a time through the step memo. Why: resolving the tokens split at a terminal's end (``",``
 * ``"}`` after a string) steps a few bytes per token through memo hits; the interpreter's loop
 * around each lookup was ~10% of the median schema's fresh masks (cProfile of bench_fresh's
 * median schemas: _take, Earley.walk).
 *
 * walk(state, data, steps, step[, earley, tables, cap]) -> the state after the bytes of data (None:
 *   they are not taken): Earley.walk's loop (the caller charges the walk's own units).
 * take_rests (below): the rests of a rest set stepped from state, together, grouped by chart
 *   state (``walk_grouped``); the units of those walks for the caller to charge (one per eight
 *   (state, byte) lookups and one per 64 rest-bytes moved). Why: a rest set is the leftovers of
 *   thousands of tokens after a terminal's end (lark.lark: whitespace, a name, a comment);
 *   scannerless._chart_walk grouped them by chart state with ~15 numpy calls per group and byte,
 *   the largest function of lark.lark's slowest masks. (A list-based ``take`` over token ids
 *   came first; once every chart walk went through take_rests it was left unused, and removed.)
 *
 * A byte is looked up in steps[(state, byte)]. On a miss, without earley: step(state, byte)
 * (Earley.step_miss, which steps and memoises). With earley (the Earley object), tables (its six
 * scan lists: trans, final, has_out, scan_guard, scan_ignore, scan_term) and cap
 * (STEP_CACHE_SCANS): the miss is Earley.step_miss in C: its work charged to earley.work against
 * earley.work_limit (earley.charge raises WorkExhausted past it), the memo cleared past 2^18
 * entries or cap scans (earley._steps_scans), the step taken by step_core and memoised; where
 * step_core declines, step(state, byte) is Earley.step_declined (the Python step, charged and
 * memoised there). Why: the Python step_miss around the C step was the largest single function
 * of bench_fresh's median schemas' fresh masks (~7% of their time, cProfile). The counters are
 * read from earley when a walk starts and written back before any Python call and at the end. */

typedef struct {
    PyObject *steps, *step, *earley; /* earley NULL: every miss is step(state, byte) */
    Tables tb;
    long long work, limit, scans, cap;
} Walker;

static int get_ll(PyObject *o, PyObject *name, long long *out) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (!v) return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int set_ll(PyObject *o, PyObject *name, long long x) {
    PyObject *v = PyLong_FromLongLong(x);
    if (!v) return -1;
    int r = PyObject_SetAttr(o, name, v);
    Py_DECREF(v);
    return r;
}

static int walker_load(Walker *w) {
    if (!w->earley) return 0;
    return (get_ll(w->earley, str_work, &w->work) < 0 || get_ll(w->earley, str_work_limit, &w->limit) < 0 ||
            get_ll(w->earley, str_steps_scans, &w->scans) < 0) ? -1 : 0;
}

static int walker_store(Walker *w) {
    if (!w->earley) return 0;
    return (set_ll(w->earley, str_work, w->work) < 0 || set_ll(w->earley, str_steps_scans, w->scans) < 0) ? -1 : 0;
}

/* nxt (a new reference) memoised under key as Earley.step_miss does (its bounds first); nxt, or
 * NULL on error. */
static PyObject *walker_memo(Walker *w, PyObject *key, PyObject *cur, PyObject *nxt) {
    if (PyDict_GET_SIZE(w->steps) > (1 << 18) || w->scans > w->cap) {  /* Earley.step_miss's bounds */
        PyDict_Clear(w->steps);
        w->scans = 0;
    }
    if (PyDict_SetItem(w->steps, key, nxt) < 0) {
        Py_DECREF(nxt);
        return NULL;
    }
    w->scans += Py_SIZE(cur) + (PyObject_TypeCheck(nxt, &StateType) ? Py_SIZE(nxt) : 0);
    return nxt;
}

/* The state after byte b from cur where the memo has no entry (key: (cur, b)); a new reference,
 * NULL on error. */
static PyObject *walker_miss(Walker *w, PyObject *cur, PyObject *b, PyObject *key) {
    if (!w->earley || !PyObject_TypeCheck(cur, &StateType)) {
        if (w->earley && walker_store(w) < 0) return NULL;
        PyObject *r = PyObject_CallFunctionObjArgs(w->step, cur, b, NULL);
        if (!r) return NULL;  /* its exception pending: no attribute lookup before it propagates (below) */
        if (w->earley && walker_load(w) < 0) {
            Py_DECREF(r);
            return NULL;
        }
        return r;
    }
    long long units = Py_SIZE(cur) + 1;
    if (w->work + units > w->limit) {  /* Earley.charge raises: let it, with the counters written */
        w->work += units;
        if (walker_store(w) < 0) return NULL;
        PyObject *zero = PyLong_FromLong(0);
        PyObject *r = zero ? PyObject_CallMethodObjArgs(w->earley, str_charge, zero, NULL) : NULL;
        Py_XDECREF(zero);
        if (!r) return NULL;
        Py_DECREF(r);  /* (it did not raise: the limit moved under us) */
        if (walker_load(w) < 0) return NULL;
        w->work -= units;
    }
    PyObject *nxt = step_core((StateObject *)cur, (int)PyLong_AsLong(b), &w->tb);
    if (!nxt) return NULL;
    if (nxt == Py_False && w->tb.ctx != NULL) {
        /* declined for a boundary not memoised yet: Earley.step_miss with the boundary made in C
         * (``after_core``, Python calls inside: the counters written first, read back after);
         * what step_core still declines (a follow guard, a table not loaded) is Earley._step. */
        Py_DECREF(nxt);
        if (walker_store(w) < 0) return NULL;
        PyObject *u = PyLong_FromLongLong(units);
        PyObject *r = u ? PyObject_CallMethodObjArgs(w->earley, str_charge, u, NULL) : NULL;
        Py_XDECREF(u);
        if (!r) return NULL;
        Py_DECREF(r);
        Tables full = w->tb;
        full.earley = w->earley;
        nxt = step_core((StateObject *)cur, (int)PyLong_AsLong(b), &full);
        if (nxt == Py_False) {
            Py_DECREF(nxt);
            nxt = PyObject_CallMethodObjArgs(w->earley, str_step_fn, cur, b, NULL);
        }
        if (!nxt) return NULL;  /* (as below: nothing may run with the exception pending) */
        if (walker_load(w) < 0) {
            Py_DECREF(nxt);
            return NULL;
        }
        return walker_memo(w, key, cur, nxt);
    }
    if (nxt == Py_False) {  /* declined: the Python step, charged and memoised there */
        Py_DECREF(nxt);
        if (walker_store(w) < 0) return NULL;
        PyObject *r = PyObject_CallFunctionObjArgs(w->step, cur, b, NULL);
        /* A raise in the Python step (WorkExhausted past the work bound) must propagate untouched:
         * an attribute lookup with an exception pending may clear it (CPython's type lookup
         * clears "its" error on a method-cache miss), and the walk then returned NULL with no
         * exception set (a SystemError, intermittently, on masks that reach the bound). */
        if (!r) return NULL;
        if (walker_load(w) < 0) {
            Py_DECREF(r);
            return NULL;
        }
        return r;
    }
    w->work += units;
    return walker_memo(w, key, cur, nxt);
}

/* The state after byte c from cur through the step memo (None: no scan takes it); a new
 * reference, NULL on error. */
static PyObject *step_byte(PyObject *cur, unsigned char c, Walker *w) {
    PyObject *b = PyLong_FromLong(c);  /* a small int: cached, no allocation */
    PyObject *key = b ? PyTuple_Pack(2, cur, b) : NULL;
    PyObject *nxt = key ? PyDict_GetItemWithError(w->steps, key) : NULL;
    if (nxt) {
        Py_INCREF(nxt);
    } else if (key && !PyErr_Occurred()) {
        nxt = walker_miss(w, cur, b, key);
    }
    Py_XDECREF(key);
    Py_XDECREF(b);
    return nxt;
}

/* The state after bytes p[0:m] from state through the step memo (None: a byte no scan takes); a
 * new reference, NULL on error. */
static PyObject *walk_bytes(PyObject *state, const unsigned char *p, Py_ssize_t m, Walker *w) {
    PyObject *cur = state;
    Py_INCREF(cur);
    for (Py_ssize_t i = 0; i < m && cur != Py_None; i++) {
        PyObject *nxt = step_byte(cur, p[i], w);
        Py_DECREF(cur);
        if (!nxt) return NULL;
        cur = nxt;
    }
    return cur;
}

/* One rest of take: its bytes and its position in the caller's lists. */
typedef struct {
    const unsigned char *p;
    Py_ssize_t m, k;
} Rest;

/* ok[r.k] = 1 for each rest of rs[0:n] whose bytes the chart takes whole from state. The rests
 * are stepped a byte at a time, all at once, grouped by chart state: at each depth the rests of a
 * group are bucketed by their next byte, each (state, byte) pair is one lookup in the step memo,
 * and the rests that reach equal states form one group at the next depth (scannerless's grouped
 * walk, in C). Prefixes alone are not enough to share: after a terminal that takes any byte (a
 * comment, a URL) every prefix reaches the same state, and walking them as a trie cost
 * robotstxt.lark's masks 44 -> 70-115 ms (bench_grammar_bounds). Byte d of rest r is
 * rs[r].p[d * stride]. *lookups: the (state, byte) pairs looked up; *moved: the rest-bytes moved.
 * 0, or -1 on error. */
static int walk_grouped(PyObject *state, const Rest *rs, Py_ssize_t n, Py_ssize_t stride, char *ok,
                        long long *lookups, long long *moved, Walker *w) {
    size_t szn = (size_t)(n ? n : 1);
    Py_ssize_t *cur = (Py_ssize_t *)malloc(szn * sizeof(Py_ssize_t)), *nxt = (Py_ssize_t *)malloc(szn * sizeof(Py_ssize_t)),
               *tmp = (Py_ssize_t *)malloc(szn * sizeof(Py_ssize_t));
    Py_ssize_t *ngrp = (Py_ssize_t *)malloc(szn * sizeof(Py_ssize_t));  /* group (next depth) of nxt[i] */
    Py_ssize_t *gstart = (Py_ssize_t *)malloc((szn + 1) * sizeof(Py_ssize_t));
    PyObject **gstate = (PyObject **)calloc(szn, sizeof(PyObject *)), **nstate = (PyObject **)calloc(szn, sizeof(PyObject *));
    PyObject *index = NULL;
    Py_ssize_t ng = 0, nn = 0, nng = 0;
    int rc = -1;
    if (!cur || !nxt || !tmp || !ngrp || !gstart || !gstate || !nstate) {
        PyErr_NoMemory();
        goto out;
    }
    Py_ssize_t live = 0;
    for (Py_ssize_t r = 0; r < n; r++) {
        if (rs[r].m == 0)
            ok[rs[r].k] = 1;
        else
            cur[live++] = r;
    }
    if (live) {
        Py_INCREF(state);
        gstate[0] = state;
        gstart[0] = 0;
        gstart[1] = live;
        ng = 1;
    }
    for (Py_ssize_t depth = 0; ng > 0; depth++) {
        index = PyDict_New();
        if (!index) goto out;
        nn = nng = 0;
        for (Py_ssize_t g = 0; g < ng; g++) {
            Py_ssize_t a = gstart[g], b = gstart[g + 1], len = b - a;
            /* the group's rests by their byte at depth: a counting sort, or an insertion sort for a few */
            if (len > 64) {
                Py_ssize_t cnt[257];
                memset(cnt, 0, sizeof(cnt));
                for (Py_ssize_t i = a; i < b; i++) cnt[rs[cur[i]].p[depth * stride] + 1]++;
                for (int c = 1; c < 257; c++) cnt[c] += cnt[c - 1];
                for (Py_ssize_t i = a; i < b; i++) tmp[cnt[rs[cur[i]].p[depth * stride]]++] = cur[i];
                memcpy(cur + a, tmp, (size_t)len * sizeof(Py_ssize_t));
            } else {
                for (Py_ssize_t i = a + 1; i < b; i++) {
                    Py_ssize_t x = cur[i];
                    unsigned char c = rs[x].p[depth * stride];
                    Py_ssize_t j = i - 1;
                    while (j >= a && rs[cur[j]].p[depth * stride] > c) {
                        cur[j + 1] = cur[j];
                        j--;
                    }
                    cur[j + 1] = x;
                }
            }
            *moved += len;
            for (Py_ssize_t i = a; i < b;) {
                unsigned char c = rs[cur[i]].p[depth * stride];
                Py_ssize_t e = i + 1;
                while (e < b && rs[cur[e]].p[depth * stride] == c) e++;
                PyObject *s2 = step_byte(gstate[g], c, w);
                (*lookups)++;
                if (!s2) goto out;
                if (s2 == Py_None) {
                    Py_DECREF(s2);
                    i = e;
                    continue;
                }
                Py_ssize_t id;
                PyObject *known = PyDict_GetItemWithError(index, s2);
                if (known) {
                    id = PyLong_AsSsize_t(known);
                    Py_DECREF(s2);
                } else {
                    if (PyErr_Occurred()) {
                        Py_DECREF(s2);
                        goto out;
                    }
                    id = nng;
                    PyObject *io = PyLong_FromSsize_t(id);
                    if (!io || PyDict_SetItem(index, s2, io) < 0) {
                        Py_XDECREF(io);
                        Py_DECREF(s2);
                        goto out;
                    }
                    Py_DECREF(io);
                    nstate[nng++] = s2;  /* the reference moves here */
                }
                for (; i < e; i++) {
                    Py_ssize_t x = cur[i];
                    if (rs[x].m == depth + 1) {
                        ok[rs[x].k] = 1;
                    } else {
                        nxt[nn] = x;
                        ngrp[nn++] = id;
                    }
                }
            }
        }
        Py_CLEAR(index);
        /* the next depth's groups: its rests by group (a counting sort over the group ids) */
        for (Py_ssize_t g = 0; g < ng; g++) Py_CLEAR(gstate[g]);
        for (Py_ssize_t g = 0; g <= nng; g++) gstart[g] = 0;
        for (Py_ssize_t i = 0; i < nn; i++) gstart[ngrp[i] + 1]++;
        for (Py_ssize_t g = 1; g <= nng; g++) gstart[g] += gstart[g - 1];
        {
            /* tmp as the running position of each group */
            for (Py_ssize_t g = 0; g < nng; g++) tmp[g] = gstart[g];
            for (Py_ssize_t i = 0; i < nn; i++) cur[tmp[ngrp[i]]++] = nxt[i];
        }
        /* groups with no rest left (all finished) are dropped as empty ranges */
        PyObject **sw = gstate;
        gstate = nstate;
        nstate = sw;
        ng = nng;
        nng = 0;
    }
    rc = 0;
out:
    Py_XDECREF(index);
    if (gstate)
        for (Py_ssize_t g = 0; g < ng; g++) Py_XDECREF(gstate[g]);
    if (nstate)
        for (Py_ssize_t g = 0; g < nng; g++) Py_XDECREF(nstate[g]);
    free(cur);
    free(nxt);
    free(tmp);
    free(ngrp);
    free(gstart);
    free(gstate);
    free(nstate);
    return rc;
}

/* The optional (earley, tables, cap) of walk and take into w; -1 on error. */
static int walker_init(Walker *w, PyObject *steps, PyObject *step, PyObject *earley, PyObject *tables, long long cap) {
    memset(w, 0, sizeof(*w));
    w->steps = steps, w->step = step, w->cap = cap;
    if (earley == NULL || earley == Py_None) return 0;
    if (!PyTuple_Check(tables) || PyTuple_GET_SIZE(tables) < 6 || PyTuple_GET_SIZE(tables) > 8) {
        PyErr_SetString(PyExc_TypeError, "the scan tables are a tuple of six lists (and after_many, ctx)");
        return -1;
    }
    if (parse_tables(PyTuple_GET_ITEM(tables, 0), PyTuple_GET_ITEM(tables, 1), PyTuple_GET_ITEM(tables, 2),
                     PyTuple_GET_ITEM(tables, 3), PyTuple_GET_ITEM(tables, 4), PyTuple_GET_ITEM(tables, 5),
                     PyTuple_GET_SIZE(tables) >= 7 ? PyTuple_GET_ITEM(tables, 6) : NULL, &w->tb) < 0 ||
        tables_ctx(&w->tb, PyTuple_GET_SIZE(tables) == 8 ? PyTuple_GET_ITEM(tables, 7) : NULL) < 0)
        return -1;
    w->earley = earley;
    return walker_load(w);
}

static PyObject *chart_walk(PyObject *module, PyObject *args) {
    PyObject *state, *steps, *step, *earley = NULL, *tables = NULL;
    long long cap = 0;
    Py_buffer data;
    Walker w;
    if (!PyArg_ParseTuple(args, "Oy*O!O|OOL:walk", &state, &data, &PyDict_Type, &steps, &step, &earley, &tables, &cap))
        return NULL;
    PyObject *r = NULL;
    if (walker_init(&w, steps, step, earley, tables, cap) == 0) {
        r = walk_bytes(state, (const unsigned char *)data.buf, data.len, &w);
        if (r && walker_store(&w) < 0) Py_CLEAR(r);
    }
    PyBuffer_Release(&data);
    return r;
}

/* take_rests(state, base, length, flat, stride, steps, step[, earley, tables, cap]) -> (taken, units)
 *   take over a rest set as scannerless holds it (rest_walk.RestSet): rest r's bytes are
 *   flat[base[r] + d * stride] for d < length[r] (base int64, length int32, flat the token matrix's
 *   bytes, column-major). taken: bytes of the int64 indices r taken, ascending. Why arrays, not
 *   lists: a chart walk of ~100k leftovers spent ~4 ms converting them to and from Python lists. */
static PyObject *chart_take_rests(PyObject *module, PyObject *args) {
    PyObject *state, *steps, *step, *earley = NULL, *tables = NULL;
    Py_buffer base_b, len_b, flat_b;
    long long stride, cap = 0;
    if (!PyArg_ParseTuple(args, "Oy*y*y*LO!O|OOL:take_rests", &state, &base_b, &len_b, &flat_b, &stride, &PyDict_Type,
                          &steps, &step, &earley, &tables, &cap))
        return NULL;
    PyObject *result = NULL;
    Rest *rs = NULL;
    char *ok = NULL;
    int64_t *out = NULL;
    Walker w;
    Py_ssize_t n = base_b.len / 8;
    if (len_b.len != 4 * n || base_b.len % 8 || stride <= 0) {
        PyErr_SetString(PyExc_ValueError, "take_rests: base (int64) and length (int32) differ in size");
        goto done;
    }
    if (walker_init(&w, steps, step, earley, tables, cap) < 0) goto done;
    rs = (Rest *)malloc((size_t)(n ? n : 1) * sizeof(Rest));
    ok = (char *)calloc((size_t)(n ? n : 1), 1);
    out = (int64_t *)malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!rs || !ok || !out) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *base = (const int64_t *)base_b.buf;
    const int32_t *length = (const int32_t *)len_b.buf;
    for (Py_ssize_t r = 0; r < n; r++) {
        if (base[r] < 0 || length[r] < 0 || (length[r] > 0 && base[r] + (long long)(length[r] - 1) * stride >= flat_b.len)) {
            PyErr_SetString(PyExc_IndexError, "take_rests: a rest outside the token matrix");
            goto done;
        }
        rs[r].p = (const unsigned char *)flat_b.buf + base[r];
        rs[r].m = length[r];
        rs[r].k = r;
    }
    long long lookups = 0, moved = 0;
    if (walk_grouped(state, rs, n, (Py_ssize_t)stride, ok, &lookups, &moved, &w) < 0) goto done;
    Py_ssize_t m = 0;
    for (Py_ssize_t r = 0; r < n; r++)
        if (ok[r]) out[m++] = r;
    if (walker_store(&w) == 0) {
        PyObject *taken = PyBytes_FromStringAndSize((const char *)out, m * (Py_ssize_t)sizeof(int64_t));
        if (taken) result = Py_BuildValue("(NL)", taken, (lookups >> 3) + (moved >> 6));
    }
done:
    free(rs);
    free(ok);
    free(out);
    PyBuffer_Release(&base_b);
    PyBuffer_Release(&len_b);
    PyBuffer_Release(&flat_b);
    return result;
}

static PyMethodDef module_methods[] = {
    {"step", state_step, METH_VARARGS, "Earley.step's scan loop over a State (see the C source)."},
    {"close", items_close, METH_VARARGS, "Earley._close's agenda over (item, origin) pairs (see the C source)."},
    {"next_kernel", next_kernel, METH_O, "Earley._next_kernel (see the C source)."},
    {"close_kernel", close_kernel, METH_VARARGS, "Earley._close past its memo (see the C source)."},
    {"after", eset_after, METH_VARARGS, "Earley.after (see the C source)."},
    {"walk", chart_walk, METH_VARARGS, "Earley.walk's loop: bytes through the step memo (see the C source)."},
    {"take_rests", chart_take_rests, METH_VARARGS, "take over a scannerless rest set's arrays (see the C source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_statec", "Earley chart states outside the cyclic collector (see the C source).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__statec(void) {
    if (PyType_Ready(&StateType) < 0 || PyType_Ready(&StateIterType) < 0 || PyType_Ready(&ScansType) < 0) return NULL;
    str_after = PyUnicode_InternFromString("after");
    str_starts = PyUnicode_InternFromString("starts");
    str_accepting = PyUnicode_InternFromString("accepting");
    str_waiting = PyUnicode_InternFromString("waiting");
    str_static = PyUnicode_InternFromString("static");
    str_work = PyUnicode_InternFromString("work");
    str_work_limit = PyUnicode_InternFromString("work_limit");
    str_steps_scans = PyUnicode_InternFromString("_steps_scans");
    str_charge = PyUnicode_InternFromString("charge");
    str_expects = PyUnicode_InternFromString("expects");
    str_content = PyUnicode_InternFromString("content");
    str_kernel = PyUnicode_InternFromString("kernel");
    str_static_fn = PyUnicode_InternFromString("_static");
    str_scan_ids_of = PyUnicode_InternFromString("_scan_ids_of");
    str_close_fn = PyUnicode_InternFromString("_close");
    str_made = PyUnicode_InternFromString("_made");
    int_zero = PyLong_FromLong(0);
    str_step_fn = PyUnicode_InternFromString("_step");
    if (!str_step_fn) return NULL;
    if (!str_expects || !str_content || !str_kernel || !str_static_fn || !str_scan_ids_of || !str_close_fn || !str_made ||
        !int_zero)
        return NULL;
    if (!str_after || !str_starts || !str_accepting || !str_waiting || !str_static || !str_work || !str_work_limit ||
        !str_steps_scans || !str_charge)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&StateType);
    if (PyModule_AddObject(m, "State", (PyObject *)&StateType) < 0) {
        Py_DECREF(&StateType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
