/* Subset construction and DFA minimisation in C: dfa_minimise.subset_construction and
 * dfa_minimise.minimal, same tables, state for state.
 *
 * Why C: every terminal of a new grammar is determinised and minimised before its first mask, and
 * the numpy version pays ~10 us of array overhead per call on DFAs of 10-30 states: minimal() was
 * 407 ms and subset_construction 93 ms of the 1,389 ms that load_bnf spent on 137 maskbench schemas
 * (a JSON string's 18-state DFA took 0.56 ms to minimise), a third of a fresh schema's compile.
 * Over the 1,654 DFAs / 698 NFAs of 400 schemas and the corpus grammars: 84 vs 1,004 ms and 49 vs
 * 264 ms here.
 *
 * subset_construction: the Python sweep over edge endpoints, state by state breadth-first, each
 * state's successor subsets numbered in byte order of first appearance.
 *
 * depth_classes: the states alike up to a depth (Moore's refinement for that many rounds, by
 * worklist: ``refine_rounds``), for the vocabulary walks' keys (vocab/dfa_shapes.py);
 * column_classes: a table's alike byte columns kept once (the DFA content digest there);
 * bfs_shape: a state's sub-automaton as a walk key (its canonical numbering, alike columns once).
 *
 * minimal: the algorithm is the Python one, so the output is identical
 * (tests/constrain/test_dfa_kernel.py):
 *   - acyclic DFAs: bottom-up classes in reverse topological order (Revuz, "Minimisation of acyclic
 *     deterministic automata in linear time", TCS 1992); states that cannot reach acceptance die;
 *   - otherwise: trim (drop states that cannot reach acceptance, keeping the order of the others),
 *     then Moore's partition refinement, at most MAX_ROUNDS rounds (past that the trimmed DFA is
 *     returned unminimised, as the Python version does);
 *   - classes are numbered by their first state, so the start state stays 0.
 * Signatures are compared exactly (interned in a hash table), never by hash alone.
 *
 * No numpy C API: the tables come in through the buffer protocol (int32 [n, 256], bool [n]) and go
 * back as bytearrays (writable), which the Python side wraps with np.frombuffer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROUNDS 200

/* FNV-1a over int32 values (both hash tables here: Moore/Revuz signatures and subsets). */
static uint64_t hash_ints(const int32_t *x, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        h ^= (uint32_t)x[i];
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 31);
}

/* Two new bytearrays for a result: k rows of 256 int32 transitions and k final flags; -1 (with
 * the Python error set) when out of memory. */
static int new_tables(Py_ssize_t k, PyObject **tb, PyObject **fb) {
    *tb = PyByteArray_FromStringAndSize(NULL, k * 256 * 4);
    *fb = PyByteArray_FromStringAndSize(NULL, k);
    if (*tb && *fb) return 0;
    Py_XDECREF(*tb);
    Py_XDECREF(*fb);
    return -1;
}

typedef struct {
    int32_t *slot; /* state whose signature sits there, -1: empty */
    size_t mask;
    const int32_t *sig; /* [n, width] */
    Py_ssize_t width;
} table;

static int table_init(table *h, Py_ssize_t n, const int32_t *sig, Py_ssize_t width) {
    size_t cap = 16;
    while (cap < (size_t)(2 * n + 1)) cap <<= 1;
    h->slot = (int32_t *)malloc(cap * sizeof(int32_t));
    if (!h->slot) return -1;
    memset(h->slot, 0xff, cap * sizeof(int32_t));
    h->mask = cap - 1;
    h->sig = sig;
    h->width = width;
    return 0;
}

static void table_clear(table *h) { memset(h->slot, 0xff, (h->mask + 1) * sizeof(int32_t)); }

/* The state holding ``u``'s signature first (``u`` itself when it is new). */
static int32_t table_intern(table *h, int32_t u) {
    const int32_t *s = h->sig + (size_t)u * h->width;
    size_t i = (size_t)hash_ints(s, h->width) & h->mask;
    for (;;) {
        int32_t v = h->slot[i];
        if (v < 0) {
            h->slot[i] = u;
            return u;
        }
        if (!memcmp(h->sig + (size_t)v * h->width, s, (size_t)h->width * sizeof(int32_t))) return v;
        i = (i + 1) & h->mask;
    }
}

/* Byte columns that move every state alike, one representative byte each (ascending): the bytes'
 * partition refined row by row (a class keeps its id for the first target met in a row, other
 * targets open new classes), so each row is read once in order. (The column-by-column form it
 * replaces read the table with a 1 KB stride, k columns per byte: ~2 ms of depth_classes' ~4 ms
 * on a 128-character string's 1,666-state DFA.) ``cls`` (may be NULL): each byte's class,
 * numbered by representative. ``rows`` (may be NULL): the table's rows to read, n of them (row u
 * of t otherwise). */
static int byte_classes_map(const int32_t *t, Py_ssize_t n, const int32_t *rows, int *reps, int *cls_out) {
    int cls[256], nxt[256], head[256], sid[256], snext[256], seen[256];
    int32_t sval[256];
    int k = 1;
    for (int b = 0; b < 256; b++) cls[b] = 0;
    for (Py_ssize_t u = 0; u < n && k < 256; u++) {
        const int32_t *row = t + (rows ? (Py_ssize_t)rows[u] : u) * 256;
        for (int c = 0; c < k; c++) head[c] = -1;
        int ns = 0, kn = k;
        for (int b = 0; b < 256; b++) {
            int c = cls[b], s = head[c];
            int32_t v = row[b];
            while (s >= 0 && sval[s] != v) s = snext[s];
            if (s < 0) { /* each byte opens at most one split: ns < 256 */
                s = ns++;
                sval[s] = v;
                sid[s] = head[c] < 0 ? c : kn++;
                snext[s] = head[c];
                head[c] = s;
            }
            nxt[b] = sid[s];
        }
        memcpy(cls, nxt, sizeof cls);
        k = kn;
    }
    int m = 0;
    for (int c = 0; c < k; c++) seen[c] = -1;
    for (int b = 0; b < 256; b++) {
        if (seen[cls[b]] < 0) {
            seen[cls[b]] = m;
            reps[m++] = b;
        }
        if (cls_out) cls_out[b] = seen[cls[b]];
    }
    return m;
}

static int byte_classes(const int32_t *t, Py_ssize_t n, int *reps) { return byte_classes_map(t, n, NULL, reps, NULL); }

/* The columns ``reps[0:nc]`` of t [n, 256] as one [n, nc] table (malloc'd; NULL: no memory). */
static int32_t *gather_columns(const int32_t *t, Py_ssize_t n, const int *reps, int nc) {
    int32_t *ct = (int32_t *)malloc((size_t)(n > 0 ? n : 1) * nc * sizeof(int32_t));
    if (!ct) return NULL;
    for (Py_ssize_t u = 0; u < n; u++)
        for (int c = 0; c < nc; c++) ct[u * nc + c] = t[u * 256 + reps[c]];
    return ct;
}

static PyObject *result(const int32_t *t, const uint8_t *f, Py_ssize_t n, const int32_t *cls, Py_ssize_t k) {
    /* rows of the first state of each class (classes numbered by first state), successors mapped */
    PyObject *tb, *fb;
    if (new_tables(k, &tb, &fb) < 0) return NULL;
    int32_t *out = (int32_t *)PyByteArray_AS_STRING(tb);
    uint8_t *fo = (uint8_t *)PyByteArray_AS_STRING(fb);
    Py_ssize_t next = 0;
    for (Py_ssize_t u = 0; u < n && next < k; u++) {
        if (cls[u] != next) continue; /* not a class's first state (or dead: -1) */
        const int32_t *row = t + u * 256;
        int32_t *o = out + next * 256;
        for (int b = 0; b < 256; b++) {
            int32_t v = row[b];
            o[b] = v >= 0 ? cls[v] : -1;
        }
        fo[next] = f[u];
        next++;
    }
    return Py_BuildValue("(NNn)", tb, fb, k);
}

/* Classes numbered by first state: ``cls`` (ids in any order, -1 dead) renumbered in place. */
static Py_ssize_t by_first_state(int32_t *cls, Py_ssize_t n, Py_ssize_t k) {
    int32_t *renum = (int32_t *)malloc((size_t)(k > 0 ? k : 1) * sizeof(int32_t));
    if (!renum) return -1;
    for (Py_ssize_t c = 0; c < k; c++) renum[c] = -1;
    Py_ssize_t next = 0;
    for (Py_ssize_t u = 0; u < n; u++) {
        if (cls[u] < 0) continue;
        if (renum[cls[u]] < 0) renum[cls[u]] = (int32_t)next++;
        cls[u] = renum[cls[u]];
    }
    free(renum);
    return next;
}

/* Moore's partition refinement of tables t [m, 256] (final flags f) over the byte columns
 * reps[0:nc], from the partition by finality, for at most ``rounds`` rounds or until a round
 * splits nothing (*converged). cls [m]: each state's class, numbered by first state (every round
 * numbers its classes in order of first appearance). Returns the number of classes, -1 when out
 * of memory. After r rounds, two states share a class exactly when they keep alive, and accept
 * after, the same byte strings of at most r bytes; once converged, the full equivalence. */
static Py_ssize_t refine(const int32_t *t, const uint8_t *f, Py_ssize_t m, const int *reps, int nc, Py_ssize_t rounds,
                         int32_t *cls, int *converged) {
    Py_ssize_t kc = 1;
    for (Py_ssize_t u = 0; u < m; u++) { /* by finality, numbered by first state: state 0's is 0 */
        cls[u] = (f[u] != 0) != (f[0] != 0);
        if (cls[u]) kc = 2;
    }
    *converged = m <= 1;
    if (*converged) return kc;
    Py_ssize_t width = 1 + nc;
    int32_t *sig = (int32_t *)malloc((size_t)m * width * sizeof(int32_t));
    int32_t *nxt = (int32_t *)malloc((size_t)m * sizeof(int32_t));
    int32_t *id = (int32_t *)malloc((size_t)m * sizeof(int32_t));
    table h = {0};
    if (!sig || !nxt || !id || table_init(&h, m, sig, width) < 0) {
        free(sig);
        free(nxt);
        free(id);
        return -1;
    }
    /* the class columns side by side: a round reads [m, nc] in order, not nc cache lines a row */
    int32_t *ct = gather_columns(t, m, reps, nc);
    if (!ct) {
        free(sig);
        free(nxt);
        free(id);
        free(h.slot);
        return -1;
    }
    for (Py_ssize_t round = 0; round < rounds && !*converged; round++) {
        table_clear(&h);
        Py_ssize_t k2 = 0;
        for (Py_ssize_t u = 0; u < m; u++) {
            int32_t *s = sig + (size_t)u * width;
            const int32_t *row = ct + u * nc;
            s[0] = cls[u];
            for (int c = 0; c < nc; c++) {
                int32_t v = row[c];
                s[1 + c] = v >= 0 ? cls[v] : -1;
            }
            int32_t r = table_intern(&h, (int32_t)u);
            if (r == u) id[u] = (int32_t)k2++;
            nxt[u] = id[r];
        }
        memcpy(cls, nxt, (size_t)m * sizeof(int32_t));
        *converged = k2 == kc;
        kc = k2;
    }
    free(ct);
    free(sig);
    free(nxt);
    free(id);
    free(h.slot);
    return kc;
}

/* Revuz's bottom-up minimisation; returns 1 done, 0 cyclic (nothing done), -1 no memory. */
static int acyclic(const int32_t *t, const uint8_t *f, Py_ssize_t n, const int *reps, int nc, int32_t *cls,
                   Py_ssize_t *k_out) {
    int32_t *indeg = (int32_t *)calloc((size_t)n, sizeof(int32_t));
    int32_t *topo = (int32_t *)malloc((size_t)n * sizeof(int32_t));
    int32_t *sig = NULL;
    table h = {0};
    int rc = -1;
    if (!indeg || !topo) goto done;
    for (Py_ssize_t u = 0; u < n; u++)
        for (int c = 0; c < nc; c++) {
            int32_t v = t[u * 256 + reps[c]];
            if (v >= 0) indeg[v]++;
        }
    Py_ssize_t m = 0;
    for (Py_ssize_t u = 0; u < n; u++)
        if (!indeg[u]) topo[m++] = (int32_t)u;
    for (Py_ssize_t i = 0; i < m; i++) {
        const int32_t *row = t + (Py_ssize_t)topo[i] * 256;
        for (int c = 0; c < nc; c++) {
            int32_t v = row[reps[c]];
            if (v >= 0 && --indeg[v] == 0) topo[m++] = v;
        }
    }
    if (m < n) {
        rc = 0;
        goto done;
    }
    Py_ssize_t width = 1 + nc;
    sig = (int32_t *)malloc((size_t)n * width * sizeof(int32_t));
    if (!sig || table_init(&h, n, sig, width) < 0) goto done;
    Py_ssize_t k = 0;
    int32_t *id = indeg; /* reused: class id of each interned state */
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        int32_t u = topo[i];
        int32_t *s = sig + (size_t)u * width;
        int alive = f[u] != 0;
        s[0] = f[u];
        for (int c = 0; c < nc; c++) {
            int32_t v = t[(Py_ssize_t)u * 256 + reps[c]];
            s[1 + c] = v >= 0 ? cls[v] : -1;
            alive |= s[1 + c] >= 0;
        }
        if (!alive) {
            cls[u] = -1;
            continue;
        }
        int32_t r = table_intern(&h, u);
        if (r == u) id[u] = (int32_t)k++;
        cls[u] = id[r];
    }
    *k_out = k;
    rc = 1;
done:
    free(indeg);
    free(topo);
    free(sig);
    free(h.slot);
    return rc;
}

static PyObject *minimal(PyObject *self, PyObject *args) {
    Py_buffer tb, fb;
    if (!PyArg_ParseTuple(args, "y*y*", &tb, &fb)) return NULL;
    PyObject *res = NULL;
    int32_t *cls = NULL, *keep = NULL, *tt = NULL, *queue = NULL;
    uint8_t *live = NULL, *ft = NULL;
    int32_t *radj_head = NULL, *radj_next = NULL, *radj_src = NULL;
    Py_ssize_t n = fb.len;
    const int32_t *t = (const int32_t *)tb.buf;
    const uint8_t *f = (const uint8_t *)fb.buf;
    if (tb.len != n * 256 * 4 || n < 1) {
        PyErr_SetString(PyExc_ValueError, "minimal: trans must be int32 [n, 256] and final bool [n], n >= 1");
        goto out;
    }
    int reps[256];
    int nc = byte_classes(t, n, reps);
    cls = (int32_t *)malloc((size_t)n * sizeof(int32_t));
    if (!cls) goto nomem;
    Py_ssize_t k = 0;
    int a = acyclic(t, f, n, reps, nc, cls, &k);
    if (a < 0) goto nomem;
    if (a == 1) {
        if (cls[0] < 0) {
            res = Py_None;
            Py_INCREF(res);
            goto out;
        }
        k = by_first_state(cls, n, k);
        if (k < 0) goto nomem;
        res = result(t, f, n, cls, k);
        goto out;
    }
    /* trim: states that reach acceptance, by a backward search over the class columns */
    live = (uint8_t *)calloc((size_t)n, 1);
    queue = (int32_t *)malloc((size_t)n * sizeof(int32_t));
    radj_head = (int32_t *)malloc((size_t)n * sizeof(int32_t));
    radj_next = (int32_t *)malloc((size_t)n * nc * sizeof(int32_t));
    radj_src = (int32_t *)malloc((size_t)n * nc * sizeof(int32_t));
    if (!live || !queue || !radj_head || !radj_next || !radj_src) goto nomem;
    memset(radj_head, 0xff, (size_t)n * sizeof(int32_t));
    Py_ssize_t ne = 0;
    for (Py_ssize_t u = 0; u < n; u++)
        for (int c = 0; c < nc; c++) {
            int32_t v = t[u * 256 + reps[c]];
            if (v < 0) continue;
            radj_src[ne] = (int32_t)u;
            radj_next[ne] = radj_head[v];
            radj_head[v] = (int32_t)ne++;
        }
    Py_ssize_t qn = 0;
    for (Py_ssize_t u = 0; u < n; u++)
        if (f[u]) {
            live[u] = 1;
            queue[qn++] = (int32_t)u;
        }
    for (Py_ssize_t i = 0; i < qn; i++)
        for (int32_t e = radj_head[queue[i]]; e >= 0; e = radj_next[e]) {
            int32_t u = radj_src[e];
            if (!live[u]) {
                live[u] = 1;
                queue[qn++] = u;
            }
        }
    if (!live[0]) {
        res = Py_None;
        Py_INCREF(res);
        goto out;
    }
    keep = (int32_t *)malloc((size_t)n * sizeof(int32_t)); /* old -> new index, -1 dead */
    if (!keep) goto nomem;
    Py_ssize_t m = 0;
    for (Py_ssize_t u = 0; u < n; u++) keep[u] = live[u] ? (int32_t)m++ : -1;
    tt = (int32_t *)malloc((size_t)m * 256 * sizeof(int32_t));
    ft = (uint8_t *)malloc((size_t)m);
    if (!tt || !ft) goto nomem;
    for (Py_ssize_t u = 0; u < n; u++) {
        if (keep[u] < 0) continue;
        int32_t *o = tt + (Py_ssize_t)keep[u] * 256;
        const int32_t *row = t + u * 256;
        for (int b = 0; b < 256; b++) o[b] = row[b] >= 0 ? keep[row[b]] : -1;
        ft[keep[u]] = f[u];
    }
    /* Moore refinement on the trimmed DFA (its byte classes are a coarsening of the input's:
     * the representative columns still tell every class apart) */
    int converged;
    Py_ssize_t kc = refine(tt, ft, m, reps, nc, MAX_ROUNDS, cls, &converged);
    if (kc < 0) goto nomem;
    if (!converged || m <= 1) { /* the trimmed DFA as it is (the Python version's fallback) */
        for (Py_ssize_t u = 0; u < m; u++) cls[u] = (int32_t)u;
        kc = m;
    }
    res = result(tt, ft, m, cls, kc);
    goto out;
nomem:
    PyErr_NoMemory();
out:
    PyBuffer_Release(&tb);
    PyBuffer_Release(&fb);
    free(cls);
    free(keep);
    free(tt);
    free(ft);
    free(queue);
    free(live);
    free(radj_head);
    free(radj_next);
    free(radj_src);
    return res;
}


/* Moore's refinement for ``rounds`` rounds by worklist (Hopcroft's observation, in rounds): after
 * a full first round, a state can change class in round r only if a successor moved in round r-1
 * (a class that splits keeps its id for one part; the other parts' states "moved"). In a class
 * with members that are not such candidates, every candidate leaves (its moved successor's new id
 * tells it apart from each of them) and the candidates group by signature; in a class of only
 * candidates, the first group keeps the id. The classes after each round are Moore's, so the
 * result is ``refine``'s after renumbering. A length-bounded string's positions split one
 * position a round: ~40 states a round instead of all 1,666 (depth 48: ~4.0 -> 0.7 ms in all).
 * Returns the number of classes (``cls`` not yet numbered by first state), -1 no memory, -2 a
 * transition past the last state. */
static Py_ssize_t refine_rounds(const int32_t *t, const uint8_t *f, Py_ssize_t m, const int *reps, int nc,
                                Py_ssize_t rounds, int32_t *cls) {
    Py_ssize_t width = 1 + nc, k = 1, nmoved = 0, ncand = 0;
    int32_t *ct = gather_columns(t, m, reps, nc);
    int32_t *pstart = (int32_t *)calloc((size_t)m + 1, sizeof(int32_t));
    int32_t *pred = (int32_t *)malloc((size_t)m * nc * sizeof(int32_t) + 4);
    int32_t *size = (int32_t *)calloc((size_t)m + 1, sizeof(int32_t));
    int32_t *cand = (int32_t *)malloc((size_t)m * sizeof(int32_t));
    int32_t *stamp = (int32_t *)malloc((size_t)m * sizeof(int32_t));
    int32_t *moved = (int32_t *)malloc((size_t)m * sizeof(int32_t));
    int32_t *ncls = (int32_t *)malloc((size_t)m * sizeof(int32_t));
    int32_t *ccount = (int32_t *)calloc((size_t)m + 1, sizeof(int32_t));
    int32_t *gid = (int32_t *)malloc((size_t)m * sizeof(int32_t));
    uint8_t *claimed = (uint8_t *)calloc((size_t)m + 1, 1);
    int32_t *sig = (int32_t *)malloc((size_t)m * width * sizeof(int32_t));
    table h = {0};
    Py_ssize_t rc = -1;
    if (!ct || !pstart || !pred || !size || !cand || !stamp || !moved || !ncls || !ccount || !gid || !claimed ||
        !sig || table_init(&h, m, sig, width) < 0)
        goto done;
    /* predecessors over the class columns (CSR) */
    for (Py_ssize_t u = 0; u < m * nc; u++) {
        if (ct[u] >= m) { /* a transition past the last state: refused, never read out of bounds */
            rc = -2;
            goto done;
        }
        if (ct[u] >= 0) pstart[ct[u] + 1]++;
    }
    for (Py_ssize_t v = 0; v < m; v++) pstart[v + 1] += pstart[v];
    {
        int32_t *fill = ncls; /* scratch: next free slot per target */
        memcpy(fill, pstart, (size_t)m * sizeof(int32_t));
        for (Py_ssize_t u = 0; u < m; u++)
            for (int c = 0; c < nc; c++) {
                int32_t v = ct[u * nc + c];
                if (v >= 0) pred[fill[v]++] = (int32_t)u;
            }
    }
    /* round 0: by finality (state 0's class is 0) */
    for (Py_ssize_t u = 0; u < m; u++) {
        cls[u] = (f[u] != 0) != (f[0] != 0);
        if (cls[u]) k = 2;
        size[cls[u]]++;
        stamp[u] = -1;
    }
    /* Round 0 is not a round of signatures (members of a class may differ on dead bytes), so
     * round 1 takes every state as a candidate; later rounds only the moved states' predecessors. */
    for (Py_ssize_t round = 1; round <= rounds; round++) {
        ncand = 0;
        if (round == 1) {
            for (Py_ssize_t u = 0; u < m; u++) cand[ncand++] = (int32_t)u;
        } else {
            if (!nmoved) break; /* nothing split: converged */
            for (Py_ssize_t i = 0; i < nmoved; i++) {
                int32_t v = moved[i];
                for (int32_t j = pstart[v]; j < pstart[v + 1]; j++) {
                    int32_t u = pred[j];
                    if (stamp[u] != round) {
                        stamp[u] = (int32_t)round;
                        cand[ncand++] = u;
                    }
                }
            }
        }
        table_clear(&h);
        for (Py_ssize_t i = 0; i < ncand; i++) {
            int32_t u = cand[i];
            int32_t *sg = sig + (size_t)i * width;
            const int32_t *row = ct + (size_t)u * nc;
            sg[0] = cls[u];
            for (int c = 0; c < nc; c++) sg[1 + c] = row[c] >= 0 ? cls[row[c]] : -1;
            ccount[cls[u]]++;
        }
        /* groups in order of first appearance; a group keeps its class's id only where the class
         * has no other members and no earlier group took it */
        nmoved = 0;
        for (Py_ssize_t i = 0; i < ncand; i++) {
            int32_t r = table_intern(&h, (int32_t)i);
            int32_t c = sig[(size_t)i * width];
            if (r == i) {
                if (ccount[c] == size[c] && !claimed[c]) {
                    claimed[c] = 1;
                    gid[i] = c;
                } else {
                    gid[i] = (int32_t)k++;
                }
            }
            ncls[i] = gid[r];
        }
        for (Py_ssize_t i = 0; i < ncand; i++) {
            int32_t u = cand[i], c = cls[u];
            ccount[c] = 0;
            claimed[c] = 0;
            if (ncls[i] != c) { /* (signatures are all made: a class may change now) */
                size[c]--;
                size[ncls[i]]++;
                cls[u] = ncls[i];
                moved[nmoved++] = u;
            }
        }
    }
    rc = k;
done:
    free(ct);
    free(pstart);
    free(pred);
    free(size);
    free(cand);
    free(stamp);
    free(moved);
    free(ncls);
    free(ccount);
    free(gid);
    free(claimed);
    free(sig);
    free(h.slot);
    return rc;
}

/* depth_classes(trans, final, depth) -> bytearray (int32 per state): each state's class of
 * behaviour on byte strings of at most ``depth`` bytes (which keep the DFA alive, where it
 * accepts), numbered by first state: ``refine_rounds`` for ``depth`` rounds (fewer once nothing
 * splits) on the untrimmed tables. A vocabulary walk reads no token past its length, so a walk is the same
 * from every state of a class at the longest token's depth (vocab/dfa_shapes.py: a length-bounded
 * string's positions with that many characters left share one walk). */
static PyObject *depth_classes(PyObject *self, PyObject *args) {
    Py_buffer tb, fb;
    Py_ssize_t depth;
    if (!PyArg_ParseTuple(args, "y*y*n", &tb, &fb, &depth)) return NULL;
    PyObject *res = NULL;
    Py_ssize_t n = fb.len;
    if (tb.len != n * 256 * 4 || n < 1 || depth < 0) {
        PyErr_SetString(PyExc_ValueError, "depth_classes: trans must be int32 [n, 256] and final bool [n], n >= 1, depth >= 0");
        goto out;
    }
    res = PyByteArray_FromStringAndSize(NULL, n * 4);
    if (!res) goto out;
    int reps[256];
    int nc = byte_classes((const int32_t *)tb.buf, n, reps);
    int32_t *cls = (int32_t *)PyByteArray_AS_STRING(res);
    Py_ssize_t k = refine_rounds((const int32_t *)tb.buf, (const uint8_t *)fb.buf, n, reps, nc, depth, cls);
    if (k == -2) {
        Py_CLEAR(res);
        PyErr_SetString(PyExc_ValueError, "depth_classes: a transition past the last state");
    } else if (k < 0 || by_first_state(cls, n, k) < 0) {
        Py_CLEAR(res);
        PyErr_NoMemory();
    }
out:
    PyBuffer_Release(&tb);
    PyBuffer_Release(&fb);
    return res;
}


/* column_classes(trans) -> (bytes classmap [256], bytearray table [n, nc] int32): the table with
 * each class of alike byte columns (``byte_classes``) kept once, by its first byte; classmap[b]
 * is byte b's column. The pair is the table exactly (trans[u, b] = table[u, classmap[b]]), so a
 * digest of it is a digest of the DFA at ~1/13 of the bytes for a JSON string's 20 classes
 * (vocab/dfa_shapes.py). */
static PyObject *column_classes(PyObject *self, PyObject *args) {
    Py_buffer tb;
    if (!PyArg_ParseTuple(args, "y*", &tb)) return NULL;
    PyObject *res = NULL;
    Py_ssize_t n = tb.len / (256 * 4);
    if (tb.len != n * 256 * 4 || n < 1) {
        PyErr_SetString(PyExc_ValueError, "column_classes: trans must be int32 [n, 256], n >= 1");
        goto out;
    }
    int reps[256], map[256];
    int nc = byte_classes_map((const int32_t *)tb.buf, n, NULL, reps, map);
    int32_t *ct = gather_columns((const int32_t *)tb.buf, n, reps, nc);
    if (!ct) {
        PyErr_NoMemory();
        goto out;
    }
    char cm[256];
    for (int b = 0; b < 256; b++) cm[b] = (char)map[b]; /* nc <= 256: map[b] <= 255 */
    res = Py_BuildValue("(y#y#)", cm, (Py_ssize_t)256, (const char *)ct, n * nc * (Py_ssize_t)sizeof(int32_t));
    free(ct);
out:
    PyBuffer_Release(&tb);
    return res;
}

/* bfs_shape(trans, final, q, cap) -> bytes | None: vocab/dfa_shapes' compact canonical shape of
 * the sub-automaton reachable from q, or None past cap states. The states are numbered in
 * breadth-first order of first appearance (each state's targets by byte); the shape is
 * b"C" + n, nc (int32 little-endian) + the class map [256] + the [n, nc] int32 table (the
 * renumbered sub-table's alike byte columns once, classes numbered by first byte) + the n final
 * flags: the bytes dfa_shapes._shape_bytes builds with numpy. Why C: the numpy form (a [n, 256]
 * gather through a renumbering, then column_classes) took 0.25-0.6 ms for a ~250-state shape in a
 * document (o13020's ipv6 pattern, sp_120's hex strings, o10012's id), ~a third of ~1 ms masks;
 * warm, 0.16-0.32 ms with the C order against 0.05-0.11 ms here. The byte
 * classes are read off the original rows (the renumbering is one-to-one on reachable states and
 * keeps -1), so only nc columns are gathered. */
static PyObject *bfs_shape(PyObject *self, PyObject *args) {
    Py_buffer tb, fb;
    Py_ssize_t q, cap;
    if (!PyArg_ParseTuple(args, "y*y*nn", &tb, &fb, &q, &cap)) return NULL;
    PyObject *res = NULL;
    int32_t *order = NULL, *index = NULL;
    Py_ssize_t n = fb.len;
    if (tb.len != n * 256 * 4 || n < 1 || q < 0 || q >= n || cap < 1) {
        PyErr_SetString(PyExc_ValueError, "bfs_shape: trans must be int32 [n, 256] and final bool [n], 0 <= q < n, cap >= 1");
        goto out;
    }
    const int32_t *t = (const int32_t *)tb.buf;
    const uint8_t *f = (const uint8_t *)fb.buf;
    Py_ssize_t most = cap < n ? cap : n;
    order = (int32_t *)malloc((size_t)most * sizeof(int32_t));
    index = (int32_t *)malloc((size_t)n * sizeof(int32_t));
    if (!order || !index) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t u = 0; u < n; u++) index[u] = -1;
    Py_ssize_t m = 1;
    order[0] = (int32_t)q;
    index[q] = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        const int32_t *row = t + (Py_ssize_t)order[i] * 256;
        for (int b = 0; b < 256; b++) {
            int32_t v = row[b];
            if (v < 0) continue;
            if (v >= n) {
                PyErr_SetString(PyExc_ValueError, "bfs_shape: a transition past the last state");
                goto out;
            }
            if (index[v] >= 0) continue;
            if (m >= cap) {
                Py_INCREF(Py_None);
                res = Py_None;
                goto out;
            }
            index[v] = (int32_t)m;
            order[m++] = v;
        }
    }
    int reps[256], map[256];
    int nc = byte_classes_map(t, m, order, reps, map);
    res = PyBytes_FromStringAndSize(NULL, 1 + 8 + 256 + m * nc * 4 + m);
    if (!res) goto out;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(res);
    o[0] = 'C';
    for (int k = 0; k < 4; k++) {
        o[1 + k] = (uint8_t)(((uint32_t)m >> (8 * k)) & 0xff);
        o[5 + k] = (uint8_t)(((uint32_t)nc >> (8 * k)) & 0xff);
    }
    for (int b = 0; b < 256; b++) o[9 + b] = (uint8_t)map[b];
    uint8_t *table = o + 9 + 256; /* (offset 265: no int32 pointer there, each value memcpy'd) */
    uint8_t *fin = o + 9 + 256 + m * nc * 4;
    for (Py_ssize_t u = 0; u < m; u++) {
        const int32_t *row = t + (Py_ssize_t)order[u] * 256;
        for (int c = 0; c < nc; c++) {
            int32_t v = row[reps[c]];
            int32_t w = v < 0 ? -1 : index[v];
            memcpy(table + (u * nc + c) * 4, &w, 4);
        }
        fin[u] = f[order[u]] ? 1 : 0;
    }
out:
    free(order);
    free(index);
    PyBuffer_Release(&tb);
    PyBuffer_Release(&fb);
    return res;
}

/* ------------------------------------------------------------------ subset construction */

typedef struct {
    int32_t *a;
    Py_ssize_t n, cap;
} ivec;

static int ivec_reserve(ivec *v, Py_ssize_t more) {
    if (v->n + more <= v->cap) return 0;
    Py_ssize_t cap = v->cap ? v->cap : 1024;
    while (cap < v->n + more) cap *= 2;
    int32_t *a = (int32_t *)realloc(v->a, (size_t)cap * sizeof(int32_t));
    if (!a) return -1;
    v->a = a;
    v->cap = cap;
    return 0;
}

typedef struct {
    ivec pool;   /* the NFA nodes of every subset, back to back */
    ivec start;  /* subset i is pool[start[i] : start[i] + size[i]] */
    ivec size;
    int32_t *slot; /* hash table of subset ids, -1 empty */
    size_t mask;
} subsets;

static int subsets_grow(subsets *S) {
    size_t cap = (S->mask + 1) * 2;
    int32_t *slot = (int32_t *)malloc(cap * sizeof(int32_t));
    if (!slot) return -1;
    memset(slot, 0xff, cap * sizeof(int32_t));
    for (Py_ssize_t i = 0; i < S->start.n; i++) {
        size_t j = (size_t)hash_ints(S->pool.a + S->start.a[i], S->size.a[i]) & (cap - 1);
        while (slot[j] >= 0) j = (j + 1) & (cap - 1);
        slot[j] = (int32_t)i;
    }
    free(S->slot);
    S->slot = slot;
    S->mask = cap - 1;
    return 0;
}

/* The id of subset ``x`` (sorted, distinct), added if new; -1 no memory, -2 past ``limit``. */
static Py_ssize_t subsets_intern(subsets *S, const int32_t *x, Py_ssize_t n, Py_ssize_t limit) {
    size_t j = (size_t)hash_ints(x, n) & S->mask;
    for (;;) {
        int32_t v = S->slot[j];
        if (v < 0) break;
        if (S->size.a[v] == n && !memcmp(S->pool.a + S->start.a[v], x, (size_t)n * sizeof(int32_t))) return v;
        j = (j + 1) & S->mask;
    }
    Py_ssize_t id = S->start.n;
    if (id >= limit) return -2;
    if (ivec_reserve(&S->pool, n) < 0 || ivec_reserve(&S->start, 1) < 0 || ivec_reserve(&S->size, 1) < 0) return -1;
    S->start.a[S->start.n++] = (int32_t)S->pool.n;
    S->size.a[S->size.n++] = (int32_t)n;
    memcpy(S->pool.a + S->pool.n, x, (size_t)n * sizeof(int32_t));
    S->pool.n += n;
    S->slot[j] = (int32_t)id;
    if ((size_t)(S->start.n * 2) > S->mask) {
        if (subsets_grow(S) < 0) return -1;
    }
    return id;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

typedef struct {
    int32_t pos, dst, d;
} event;

static int cmp_event(const void *a, const void *b) {
    const event *x = (const event *)a, *y = (const event *)b;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* subset_construction(edges: list[list[(lo, hi, dst)]], finals: set[int], start: int, limit: int
 *                     [, work_limit: int])
 *   -> (trans bytearray [S, 256] int32, final bytearray [S], S), or None past ``limit`` subsets,
 *   or False past ``work_limit`` edge events (two per member edge of each subset: the work, which
 *   an NFA of optional items makes quadratic per subset; -1, the default: no limit).
 * Subsets are numbered breadth-first, each state's successors in byte order of first appearance:
 * dfa_minimise.subset_construction's numbering. */
static PyObject *subset_construction(PyObject *self, PyObject *args) {
    PyObject *edges, *finals;
    Py_ssize_t start, limit, work_limit = -1, work = 0;
    if (!PyArg_ParseTuple(args, "OOnn|n", &edges, &finals, &start, &limit, &work_limit)) return NULL;
    PyObject *res = NULL, *seq = NULL;
    Py_ssize_t nn;
    int32_t *eoff = NULL, *elo = NULL, *ehi = NULL, *edst = NULL, *count = NULL, *active = NULL, *cur = NULL;
    uint8_t *isfinal = NULL, *inlist = NULL;
    event *ev = NULL;
    ivec trans = {0}, fin = {0};
    subsets S = {0};
    seq = PySequence_Fast(edges, "edges must be a sequence");
    if (!seq) return NULL;
    nn = PySequence_Fast_GET_SIZE(seq);
    if (start < 0 || start >= nn) {
        PyErr_SetString(PyExc_ValueError, "subset_construction: start out of range");
        goto out;
    }
    /* the NFA's edges as flat arrays */
    eoff = (int32_t *)malloc((size_t)(nn + 1) * sizeof(int32_t));
    if (!eoff) goto nomem;
    Py_ssize_t ne = 0;
    for (Py_ssize_t i = 0; i < nn; i++) {
        Py_ssize_t k = PyObject_Length(PySequence_Fast_GET_ITEM(seq, i));
        if (k < 0) goto out;
        eoff[i] = (int32_t)ne;
        ne += k;
    }
    eoff[nn] = (int32_t)ne;
    elo = (int32_t *)malloc((size_t)(ne + 1) * sizeof(int32_t));
    ehi = (int32_t *)malloc((size_t)(ne + 1) * sizeof(int32_t));
    edst = (int32_t *)malloc((size_t)(ne + 1) * sizeof(int32_t));
    if (!elo || !ehi || !edst) goto nomem;
    for (Py_ssize_t i = 0; i < nn; i++) {
        PyObject *es = PySequence_Fast(PySequence_Fast_GET_ITEM(seq, i), "edges of a node must be a sequence");
        if (!es) goto out;
        for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(es); j++) {
            long lo, hi, dst;
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(es, j), "lll", &lo, &hi, &dst)) {
                Py_DECREF(es);
                goto out;
            }
            if (lo < 0 || hi > 255 || lo > hi || dst < 0 || dst >= nn) {
                Py_DECREF(es);
                PyErr_SetString(PyExc_ValueError, "subset_construction: an edge is not (lo <= hi in 0..255, node)");
                goto out;
            }
            Py_ssize_t e = eoff[i] + j;
            elo[e] = (int32_t)lo;
            ehi[e] = (int32_t)hi;
            edst[e] = (int32_t)dst;
        }
        Py_DECREF(es);
    }
    isfinal = (uint8_t *)calloc((size_t)nn, 1);
    if (!isfinal) goto nomem;
    {
        PyObject *it = PyObject_GetIter(finals), *x;
        if (!it) goto out;
        while ((x = PyIter_Next(it))) {
            Py_ssize_t v = PyLong_AsSsize_t(x);
            Py_DECREF(x);
            if (v == -1 && PyErr_Occurred()) break;
            if (v >= 0 && v < nn) isfinal[v] = 1;
        }
        Py_DECREF(it);
        if (PyErr_Occurred()) goto out;
    }
    count = (int32_t *)calloc((size_t)nn, sizeof(int32_t));
    active = (int32_t *)malloc((size_t)nn * sizeof(int32_t));
    cur = (int32_t *)malloc((size_t)nn * 2 * sizeof(int32_t));
    inlist = (uint8_t *)calloc((size_t)nn, 1);
    if (!count || !active || !cur || !inlist) goto nomem;
    S.slot = (int32_t *)malloc(64 * sizeof(int32_t));
    if (!S.slot) goto nomem;
    memset(S.slot, 0xff, 64 * sizeof(int32_t));
    S.mask = 63;
    {
        int32_t s0 = (int32_t)start;
        if (subsets_intern(&S, &s0, 1, limit) < 0) goto nomem;
    }
    Py_ssize_t evcap = 0;
    for (Py_ssize_t i = 0; i < S.start.n; i++) {
        /* copy the subset: interning may move the pool */
        Py_ssize_t m = S.size.a[i];
        memcpy(cur, S.pool.a + S.start.a[i], (size_t)m * sizeof(int32_t));
        int f = 0;
        Py_ssize_t nev = 0;
        for (Py_ssize_t a = 0; a < m; a++) {
            f |= isfinal[cur[a]];
            nev += 2 * (eoff[cur[a] + 1] - eoff[cur[a]]);
        }
        work += nev + m;
        if (work_limit >= 0 && work > work_limit) {
            res = Py_False;
            Py_INCREF(res);
            goto out;
        }
        if (nev > evcap) {
            free(ev);
            evcap = nev * 2;
            ev = (event *)malloc((size_t)evcap * sizeof(event));
            if (!ev) goto nomem;
        }
        Py_ssize_t k = 0;
        for (Py_ssize_t a = 0; a < m; a++)
            for (int32_t e = eoff[cur[a]]; e < eoff[cur[a] + 1]; e++) {
                ev[k++] = (event){elo[e], edst[e], 1};
                ev[k++] = (event){ehi[e] + 1, edst[e], -1};
            }
        qsort(ev, (size_t)k, sizeof(event), cmp_event);
        if (ivec_reserve(&trans, 256) < 0 || ivec_reserve(&fin, 1) < 0) goto nomem;
        int32_t *row = trans.a + trans.n;
        trans.n += 256;
        fin.a[fin.n++] = f;
        Py_ssize_t na = 0, pos = 0, x = 0;
        int32_t *buf = cur + m; /* scratch after the subset (cur holds 2 * nn ints) */
        while (pos < 256) {
            /* apply the events at pos, then fill [pos, next event) with the active subset */
            while (x < k && ev[x].pos == pos) {
                int32_t d = ev[x].dst;
                count[d] += ev[x].d;
                if (count[d] > 0 && !inlist[d]) {
                    inlist[d] = 1;
                    active[na++] = d;
                }
                x++;
            }
            Py_ssize_t end = x < k && ev[x].pos < 256 ? ev[x].pos : 256;
            Py_ssize_t w = 0;
            for (Py_ssize_t a = 0; a < na; a++) {
                if (count[active[a]] > 0)
                    active[w++] = active[a];
                else
                    inlist[active[a]] = 0;
            }
            na = w;
            int32_t target = -1;
            if (na) {
                memcpy(buf, active, (size_t)na * sizeof(int32_t));
                qsort(buf, (size_t)na, sizeof(int32_t), cmp_i32);
                Py_ssize_t id = subsets_intern(&S, buf, na, limit);
                if (id == -1) goto nomem;
                if (id == -2) {
                    res = Py_None;
                    Py_INCREF(res);
                    goto out;
                }
                target = (int32_t)id;
            }
            for (Py_ssize_t b = pos; b < end; b++) row[b] = target;
            pos = end;
        }
        for (Py_ssize_t a = 0; a < na; a++) { /* (edges that end at byte 255 were never closed) */
            count[active[a]] = 0;
            inlist[active[a]] = 0;
        }
    }
    {
        Py_ssize_t n = fin.n;
        PyObject *tb, *fb;
        if (new_tables(n, &tb, &fb) < 0) goto out;
        memcpy(PyByteArray_AS_STRING(tb), trans.a, (size_t)n * 256 * 4);
        uint8_t *fo = (uint8_t *)PyByteArray_AS_STRING(fb);
        for (Py_ssize_t i = 0; i < n; i++) fo[i] = (uint8_t)fin.a[i];
        res = Py_BuildValue("(NNn)", tb, fb, n);
    }
    goto out;
nomem:
    PyErr_NoMemory();
out:
    Py_XDECREF(seq);
    free(eoff);
    free(elo);
    free(ehi);
    free(edst);
    free(count);
    free(active);
    free(cur);
    free(isfinal);
    free(inlist);
    free(ev);
    free(trans.a);
    free(fin.a);
    free(S.pool.a);
    free(S.start.a);
    free(S.size.a);
    free(S.slot);
    return res;
}


/* ------------------------------------------------------------------ minus words */

/* minus_words(a_trans, a_final, a_live, kid_lo, kid_byte, kid_node, end)
 *     -> (trans bytearray [k, 256] int32, final bytearray [k], origin bytes int64 [k], inner) | None
 * byte_dfa._minus_words, state for state: L(a) minus the words of a trie (node 0 the root; node i's
 * children kid_byte/kid_node[kid_lo[i]:kid_lo[i+1]] in the trie's insertion order, int32; end: one
 * byte per node). The product of a with the trie is a tree (one product state per trie node
 * reached, numbered breadth-first by children in order), then a's own states entered from it;
 * states that cannot reach acceptance are dropped. None: nothing is left.
 * Why C: a schema object's "other keys" regex is cut by its declared keys before the first mask
 * at a key position: ~0.65 ms a cut in Python on bench_fresh's slowest masks (cProfile). */
static PyObject *minus_words(PyObject *self, PyObject *args) {
    Py_buffer tb, fb, lb, klo_b, kb_b, kn_b, eb;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*:minus_words", &tb, &fb, &lb, &klo_b, &kb_b, &kn_b, &eb)) return NULL;
    const int32_t *at = (const int32_t *)tb.buf, *klo = (const int32_t *)klo_b.buf, *kbyte = (const int32_t *)kb_b.buf,
                  *knode = (const int32_t *)kn_b.buf;
    const uint8_t *afin = (const uint8_t *)fb.buf, *alive = (const uint8_t *)lb.buf, *end = (const uint8_t *)eb.buf;
    Py_ssize_t n = fb.len, nodes = eb.len, nk = kb_b.len / 4;
    PyObject *res = NULL;
    int32_t *pq = NULL, *pnode = NULL, *plo = NULL, *pj = NULL, *pb = NULL, *remap = NULL, *agenda = NULL;
    uint8_t *live = NULL, *seen = NULL, *pfin = NULL;
    if (tb.len != n * 1024 || lb.len != n || klo_b.len != 4 * (nodes + 1) || kn_b.len != kb_b.len || nodes < 1 || n < 1) {
        PyErr_SetString(PyExc_ValueError, "minus_words: tables of the wrong size");
        goto done;
    }
    /* the trie well formed (kid runs in order, within the arrays) and a's targets in range: the
     * loops below index by them */
    if (klo[0] != 0 || klo[nodes] != nk) {
        PyErr_SetString(PyExc_ValueError, "minus_words: a malformed trie");
        goto done;
    }
    for (Py_ssize_t i = 0; i < nodes; i++)
        if (klo[i] > klo[i + 1]) {
            PyErr_SetString(PyExc_ValueError, "minus_words: a malformed trie");
            goto done;
        }
    for (Py_ssize_t i = 0; i < n * 256; i++)
        if (at[i] >= n || at[i] < -1) {
            PyErr_SetString(PyExc_ValueError, "minus_words: a transition out of range");
            goto done;
        }
    /* product states: at most one per trie node */
    pq = malloc(nodes * sizeof(int32_t));
    pnode = malloc(nodes * sizeof(int32_t));
    plo = malloc((nodes + 1) * sizeof(int32_t));  /* product kids of state k: pj/pb[plo[k]:plo[k+1]] */
    pj = malloc((nk + 1) * sizeof(int32_t));
    pb = malloc((nk + 1) * sizeof(int32_t));
    seen = calloc(n, 1);
    agenda = malloc(n * sizeof(int32_t));
    if (!pq || !pnode || !plo || !pj || !pb || !seen || !agenda) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t p = 1, npk = 0, top = 0;
    pq[0] = 0;
    pnode[0] = 0;
    for (Py_ssize_t k = 0; k < p; k++) {
        int32_t qa = pq[k], node = pnode[k];
        const int32_t *row = at + (Py_ssize_t)qa * 256;
        uint8_t child[256] = {0};
        plo[k] = (int32_t)npk;
        for (int32_t c = klo[node]; c < klo[node + 1]; c++) {
            int32_t b = kbyte[c];
            if (b < 0 || b > 255 || knode[c] <= 0 || knode[c] >= nodes) {
                PyErr_SetString(PyExc_ValueError, "minus_words: a malformed trie");
                goto done;
            }
            child[b] = 1;
            int32_t q2 = row[b];
            if (q2 >= 0) {
                if (p >= nodes || npk >= nk) {  /* a node reached twice: not a tree */
                    PyErr_SetString(PyExc_ValueError, "minus_words: a malformed trie");
                    goto done;
                }
                pq[p] = q2;
                pnode[p] = knode[c];
                pj[npk] = (int32_t)p;
                pb[npk] = b;
                npk++;
                p++;
            }
        }
        for (int b = 0; b < 256; b++) {  /* a's states entered on a byte the trie does not take */
            int32_t q2 = row[b];
            if (q2 >= 0 && !child[b] && !seen[q2]) {
                seen[q2] = 1;
                agenda[top++] = q2;
            }
        }
    }
    plo[p] = (int32_t)npk;
    while (top) {  /* closed under a's transitions */
        const int32_t *row = at + (Py_ssize_t)agenda[--top] * 256;
        for (int b = 0; b < 256; b++)
            if (row[b] >= 0 && !seen[row[b]]) {
                seen[row[b]] = 1;
                agenda[top++] = row[b];
            }
    }
    live = calloc(p, 1);
    pfin = calloc(p, 1);
    if (!live || !pfin) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = p - 1; k >= 0; k--) {  /* children are numbered after their parent */
        int32_t qa = pq[k], node = pnode[k];
        pfin[k] = afin[qa] && !end[node];
        int l = pfin[k];
        const int32_t *row = at + (Py_ssize_t)qa * 256;
        if (!l) {
            uint8_t child[256] = {0};
            for (int32_t c = klo[node]; c < klo[node + 1]; c++) child[kbyte[c]] = 1;
            for (int b = 0; b < 256 && !l; b++)
                if (row[b] >= 0 && !child[b] && alive[row[b]]) l = 1;
        }
        for (int32_t c = plo[k]; c < plo[k + 1] && !l; c++)
            if (live[pj[c]]) l = 1;
        live[k] = (uint8_t)l;
    }
    if (!live[0]) {
        res = Py_None;
        Py_INCREF(res);
        goto done;
    }
    remap = malloc((p + n) * sizeof(int32_t));
    if (!remap) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t kept = 0, inner = 0;
    for (Py_ssize_t k = 0; k < p; k++) remap[k] = live[k] ? (int32_t)kept++ : -1;
    inner = kept;
    for (Py_ssize_t q = 0; q < n; q++) remap[p + q] = seen[q] && alive[q] ? (int32_t)kept++ : -1;
    PyObject *tr = PyByteArray_FromStringAndSize(NULL, kept * 1024), *fi = PyByteArray_FromStringAndSize(NULL, kept),
             *og = PyBytes_FromStringAndSize(NULL, kept * 8);
    if (!tr || !fi || !og) {
        Py_XDECREF(tr);
        Py_XDECREF(fi);
        Py_XDECREF(og);
        goto done;
    }
    int32_t *T = (int32_t *)PyByteArray_AS_STRING(tr);
    uint8_t *F = (uint8_t *)PyByteArray_AS_STRING(fi);
    int64_t *O = (int64_t *)PyBytes_AS_STRING(og);
    for (Py_ssize_t k = 0; k < p + n; k++) {
        int32_t r = remap[k];
        if (r < 0) continue;
        int32_t qa = k < p ? pq[k] : (int32_t)(k - p);
        const int32_t *row = at + (Py_ssize_t)qa * 256;
        int32_t *out = T + (Py_ssize_t)r * 256;
        for (int b = 0; b < 256; b++) out[b] = row[b] >= 0 ? remap[p + row[b]] : -1;
        if (k < p) {
            for (int32_t c = klo[pnode[k]]; c < klo[pnode[k] + 1]; c++) out[kbyte[c]] = -1;  /* the trie's bytes */
            for (int32_t c = plo[k]; c < plo[k + 1]; c++) out[pb[c]] = remap[pj[c]];
        }
        F[r] = k < p ? pfin[k] : afin[qa];
        O[r] = qa;
    }
    res = Py_BuildValue("(NNNn)", tr, fi, og, inner);
done:
    free(pq);
    free(pnode);
    free(plo);
    free(pj);
    free(pb);
    free(remap);
    free(agenda);
    free(live);
    free(seen);
    free(pfin);
    PyBuffer_Release(&tb);
    PyBuffer_Release(&fb);
    PyBuffer_Release(&lb);
    PyBuffer_Release(&klo_b);
    PyBuffer_Release(&kb_b);
    PyBuffer_Release(&kn_b);
    PyBuffer_Release(&eb);
    return res;
}


/* ------------------------------------------------------------------ empty moves */

/* epsilon_free(edges: list[list[(lo, hi, dst)]], eps: list[list[int]], start, end)
 *     -> (list[list[(lo, hi, j)]], set[int] finals)
 * regex_compile.epsilon_free in C: the NFA without empty moves, states renumbered from ``start`` = 0
 * in order of first appearance; a state's edges are the byte edges of its closure (in the closure's
 * depth-first order); it is final when its closure holds ``end``. The determinised DFA does not
 * depend on that numbering (subsets are numbered breadth-first by byte).
 * Why C: the Python loop was ~0.6 of the Thompson construction's time over the 1,614 terminal
 * regexes of bench_fresh's schemas (cProfile, a schema enum or key complement: thousands of states). */
static PyObject *epsilon_free(PyObject *self, PyObject *args) {
    PyObject *edges, *eps, *res = NULL, *eseq = NULL, *pseq = NULL, *out = NULL, *finals = NULL;
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "OOnn", &edges, &eps, &start, &end)) return NULL;
    int32_t *num = NULL, *order = NULL, *mark = NULL, *stack = NULL, *cl = NULL;
    eseq = PySequence_Fast(edges, "edges must be a sequence");
    if (!eseq) goto out;
    pseq = PySequence_Fast(eps, "eps must be a sequence");
    if (!pseq) goto out;
    Py_ssize_t nn = PySequence_Fast_GET_SIZE(eseq);
    if (PySequence_Fast_GET_SIZE(pseq) != nn || start < 0 || start >= nn) {
        PyErr_SetString(PyExc_ValueError, "epsilon_free: edges and eps differ in length, or start out of range");
        goto out;
    }
    num = (int32_t *)malloc((size_t)nn * sizeof(int32_t));
    order = (int32_t *)malloc((size_t)nn * sizeof(int32_t));
    mark = (int32_t *)malloc((size_t)nn * sizeof(int32_t));
    stack = (int32_t *)malloc((size_t)nn * sizeof(int32_t));
    cl = (int32_t *)malloc((size_t)nn * sizeof(int32_t));
    out = PyList_New(0);
    finals = PySet_New(NULL);
    if (!num || !order || !mark || !stack || !cl) {
        PyErr_NoMemory();
        goto out;
    }
    if (!out || !finals) goto out;
    for (Py_ssize_t i = 0; i < nn; i++) num[i] = mark[i] = -1;
    Py_ssize_t no = 0;
    num[start] = 0;
    order[no++] = (int32_t)start;
    for (Py_ssize_t oi = 0; oi < no; oi++) {
        int32_t q = order[oi];
        /* the closure of q over empty moves: each node once (mark[] == oi) */
        Py_ssize_t nc = 0, sp = 0;
        int is_final = 0;
        mark[q] = (int32_t)oi;
        stack[sp++] = q;
        while (sp) {
            int32_t u = stack[--sp];
            cl[nc++] = u;
            is_final |= u == end;
            PyObject *nx = PySequence_Fast_GET_ITEM(pseq, u);
            if (!PyList_Check(nx)) {
                PyErr_SetString(PyExc_TypeError, "epsilon_free: eps must hold lists");
                goto out;
            }
            for (Py_ssize_t j = 0; j < PyList_GET_SIZE(nx); j++) {
                Py_ssize_t t = PyLong_AsSsize_t(PyList_GET_ITEM(nx, j));
                if (t < 0 || t >= nn) {
                    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "epsilon_free: an empty move leaves the NFA");
                    goto out;
                }
                if (mark[t] != (int32_t)oi) {
                    mark[t] = (int32_t)oi;
                    stack[sp++] = (int32_t)t;
                }
            }
        }
        PyObject *row = PyList_New(0);
        if (!row) goto out;
        if (PyList_Append(out, row) < 0) {
            Py_DECREF(row);
            goto out;
        }
        Py_DECREF(row);  /* (out holds it) */
        if (is_final) {
            PyObject *v = PyLong_FromSsize_t(oi);
            if (!v || PySet_Add(finals, v) < 0) {
                Py_XDECREF(v);
                goto out;
            }
            Py_DECREF(v);
        }
        for (Py_ssize_t c = 0; c < nc; c++) {
            PyObject *es = PySequence_Fast_GET_ITEM(eseq, cl[c]);
            if (!PyList_Check(es)) {
                PyErr_SetString(PyExc_TypeError, "epsilon_free: edges must hold lists");
                goto out;
            }
            for (Py_ssize_t j = 0; j < PyList_GET_SIZE(es); j++) {
                PyObject *e = PyList_GET_ITEM(es, j);
                if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 3) {
                    PyErr_SetString(PyExc_TypeError, "epsilon_free: an edge is not (lo, hi, dst)");
                    goto out;
                }
                Py_ssize_t t = PyLong_AsSsize_t(PyTuple_GET_ITEM(e, 2));
                if (t < 0 || t >= nn) {
                    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "epsilon_free: an edge leaves the NFA");
                    goto out;
                }
                if (num[t] < 0) {
                    num[t] = (int32_t)no;
                    order[no++] = (int32_t)t;
                }
                PyObject *j2 = PyLong_FromLong(num[t]);
                if (!j2) goto out;
                PyObject *ne = PyTuple_Pack(3, PyTuple_GET_ITEM(e, 0), PyTuple_GET_ITEM(e, 1), j2);
                Py_DECREF(j2);
                if (!ne || PyList_Append(row, ne) < 0) {
                    Py_XDECREF(ne);
                    goto out;
                }
                Py_DECREF(ne);
            }
        }
    }
    res = Py_BuildValue("(OO)", out, finals);
out:
    Py_XDECREF(eseq);
    Py_XDECREF(pseq);
    Py_XDECREF(out);
    Py_XDECREF(finals);
    free(num);
    free(order);
    free(mark);
    free(stack);
    free(cl);
    return res;
}

static PyMethodDef methods[] = {
    {"epsilon_free", epsilon_free, METH_VARARGS,
     "epsilon_free(edges, eps, start, end) -> (edges without empty moves, finals) (regex_compile.epsilon_free in C)."},
    {"minus_words", minus_words, METH_VARARGS,
     "minus_words(a_trans, a_final, a_live, kid_lo, kid_byte, kid_node, end) -> (trans, final, origin, inner) | None "
     "(byte_dfa._minus_words in C)."},
    {"depth_classes", depth_classes, METH_VARARGS,
     "depth_classes(trans: int32 [n,256] buffer, final: bool [n] buffer, depth) -> bytearray of int32 classes "
     "(states alike on every byte string of at most depth bytes, numbered by first state)."},
    {"column_classes", column_classes, METH_VARARGS,
     "column_classes(trans: int32 [n,256] buffer) -> (classmap bytes [256], table bytes [n, nc] int32): alike byte "
     "columns kept once, by first byte."},
    {"bfs_shape", bfs_shape, METH_VARARGS,
     "bfs_shape(trans: int32 [n,256] buffer, final: bool [n] buffer, q, cap) -> bytes | None: the compact canonical "
     "shape of the sub-automaton reachable from q (vocab/dfa_shapes), None past cap states."},
    {"minimal", minimal, METH_VARARGS,
     "minimal(trans: int32 [n,256] buffer, final: bool [n] buffer) -> (trans bytearray, final bytearray, k) | None "
     "(None: the start state cannot reach acceptance)."},
    {"subset_construction", subset_construction, METH_VARARGS,
     "subset_construction(edges, finals, start, limit) -> (trans bytearray, final bytearray, n) | None "
     "(None: past ``limit`` subsets)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_dfac", NULL, -1, methods};

PyMODINIT_FUNC PyInit__dfac(void) { return PyModule_Create(&module); }
