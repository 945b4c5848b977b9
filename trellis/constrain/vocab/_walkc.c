/* Vocabulary walks through one byte DFA, in C: the inner loops of rest_walk.walk and
 * trie_walk.walk_vocabulary.
 *
 * Why C: a fresh mask was mostly these walks (62-74% of the mask time of json.lark, python_call.lark
 * and composition_csv.lark on Gemma 3's vocabulary, walks timed apart along one fresh document per
 * grammar; commit 62bdf8c), and numpy can only step every rest one byte column at a time, paying a
 * gather, a compare and a compaction per column over all rests still running. Here each rest is
 * walked on its own to its end or its death, and a trie walk prunes a dead subtree in one jump.
 *
 * Both functions return exactly what the numpy versions return, element for element and in the
 * same order (tests/constrain/test_walk_kernel.py checks it): leftover rest sets are ordered by the
 * crossings that made them, and walks over them are cached on disk by the key of the walk that made
 * them, so a process using either kernel must read the other's files right.
 *
 * No numpy C API: arrays come in through the buffer protocol and the crossings go back as bytes
 * (int64), which the Python side wraps with np.frombuffer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t *a;
    Py_ssize_t n, cap;
} vec;

static int vec_push(vec *v, int64_t x) {
    if (v->n == v->cap) {
        Py_ssize_t cap = v->cap ? 2 * v->cap : 1024;
        int64_t *a = (int64_t *)realloc(v->a, (size_t)cap * sizeof(int64_t));
        if (!a) return -1;
        v->a = a;
        v->cap = cap;
    }
    v->a[v->n++] = x;
    return 0;
}

/* base -> offset * stride + column without a 64-bit division per rest: offset is small (at most
 * the longest token), so a float estimate and one correction are exact. */
static inline const uint8_t *rest_bytes(const uint8_t *rows, int64_t width, int64_t stride, double inv, int64_t base) {
    if (base < stride) return rows + base * width;
    int64_t off = (int64_t)((double)base * inv);
    if (off * stride > base) off--;
    else if ((off + 1) * stride <= base) off++;
    return rows + (base - off * stride) * width + off;
}

static PyObject *as_bytes(const int64_t *a, Py_ssize_t n) {
    return PyBytes_FromStringAndSize((const char *)a, n * (Py_ssize_t)sizeof(int64_t));
}

/* Stable counting sort of the items 0..n-1 by key[i] in [0, nkeys), descending if desc. */
static int64_t *counting_order(const int64_t *key, Py_ssize_t n, int64_t nkeys, int desc) {
    int64_t *cnt = (int64_t *)calloc((size_t)nkeys + 1, sizeof(int64_t));
    int64_t *out = (int64_t *)malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!cnt || !out) {
        free(cnt);
        free(out);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) cnt[desc ? nkeys - 1 - key[i] : key[i]]++;
    int64_t s = 0;
    for (int64_t k = 0; k < nkeys; k++) {
        int64_t c = cnt[k];
        cnt[k] = s;
        s += c;
    }
    for (Py_ssize_t i = 0; i < n; i++) out[cnt[desc ? nkeys - 1 - key[i] : key[i]]++] = i;
    free(cnt);
    return out;
}

/* walk_rests(trans, final, q, rows, width, stride, base, length, lo, follow, inside)
 *   trans  int32 [S*256], -1 dead;  final  uint8 [S];  q  start state
 *   rows   uint8 [N*width]: token c's bytes at rows[c*width ...] (the token matrix, row-major)
 *   stride the token matrix' column count N: a rest's flat index base = offset*stride + c
 *   base   int64 [n], length int32 [n], lo int64 [257]: the rest set, bucketed by first byte
 *   follow uint8 [256] or None: only crossings whose next byte is allowed are reported
 *   inside uint8 [n], written: 1 where the DFA survives the whole rest (others left alone)
 * Returns (ci, cj) as int64 bytes: the crossings (rest ci[k] can end the terminal after cj[k]
 * bytes with bytes left) of rests that do not stay inside, by cj, then in the numpy walk's order
 * (the starting rests by length, longest first, stably). */
static PyObject *walk_rests(PyObject *self, PyObject *args) {
    Py_buffer trans_b, final_b, rows_b, base_b, len_b, lo_b, inside_b;
    PyObject *follow_o;
    long long q, width, stride;
    if (!PyArg_ParseTuple(args, "y*y*Ly*LLy*y*y*Ow*", &trans_b, &final_b, &q, &rows_b, &width, &stride,
                          &base_b, &len_b, &lo_b, &follow_o, &inside_b))
        return NULL;
    PyObject *result = NULL;
    Py_buffer follow_b;
    int have_follow = 0;
    int64_t *starting = NULL, *order = NULL, *lens = NULL, *jorder = NULL, *keys = NULL;
    vec cpos = {0}, cj = {0};
    if (follow_o != Py_None) {
        if (PyObject_GetBuffer(follow_o, &follow_b, PyBUF_SIMPLE) < 0) goto done;
        have_follow = 1;
    }
    {
        const int32_t *trans = (const int32_t *)trans_b.buf;
        const uint8_t *final = (const uint8_t *)final_b.buf;
        const uint8_t *rows = (const uint8_t *)rows_b.buf;
        const int64_t *base = (const int64_t *)base_b.buf;
        const int32_t *length = (const int32_t *)len_b.buf;
        const int64_t *lo = (const int64_t *)lo_b.buf;
        const uint8_t *follow = have_follow ? (const uint8_t *)follow_b.buf : NULL;
        uint8_t *inside = (uint8_t *)inside_b.buf;
        Py_ssize_t n = base_b.len / 8, states = final_b.len;
        if (len_b.len != 4 * n || inside_b.len != n || lo_b.len != 257 * 8 || trans_b.len != 1024 * states ||
            q < 0 || q >= states || stride <= 0 || width < 0 || (have_follow && follow_b.len != 256)) {
            PyErr_SetString(PyExc_ValueError, "walk_rests: arrays of the wrong size or dtype");
            goto done;
        }
        const int32_t *row = trans + q * 256;
        Py_ssize_t m = 0;
        for (int b = 0; b < 256; b++)
            if (row[b] >= 0) m += (Py_ssize_t)(lo[b + 1] - lo[b]);
        if (m == 0) {
            result = Py_BuildValue("(yy)", "", "");
            goto done;
        }
        starting = (int64_t *)malloc((size_t)m * sizeof(int64_t));
        lens = (int64_t *)malloc((size_t)m * sizeof(int64_t));
        if (!starting || !lens) {
            PyErr_NoMemory();
            goto done;
        }
        Py_ssize_t k = 0;
        int64_t lmax = 0;
        for (int b = 0; b < 256; b++)
            if (row[b] >= 0)
                for (int64_t i = lo[b]; i < lo[b + 1]; i++) {
                    starting[k] = i;
                    lens[k] = length[i];
                    if (length[i] > lmax) lmax = length[i];
                    k++;
                }
        /* The numpy walk reports crossings by j, then in the order of the rests sorted by length,
         * longest first, stably. Walking in that order jumps across the token matrix (a cache miss
         * per rest: 4.3 ms vs 2.9 ms for numpy over 94k space-led leftovers on Gemma); walking in
         * bucket order and sorting the crossings by (j, longest first) stably keeps both the
         * memory order and numpy's output order, while the key range (width + 1)**2 is small. */
        int64_t nkeys = (lmax + 1) * (lmax + 1);
        double inv = 1.0 / (double)stride;
        int by_memory = nkeys <= (1 << 22);
        if (!by_memory) {
            order = counting_order(lens, m, lmax + 1, 1);
            if (!order) {
                PyErr_NoMemory();
                goto done;
            }
        }
        for (Py_ssize_t p = 0; p < m; p++) {
            int64_t i = starting[by_memory ? p : order[p]];
            if (by_memory && p + 8 < m) __builtin_prefetch(rest_bytes(rows, width, stride, inv, base[starting[p + 8]]));
            const uint8_t *s = rest_bytes(rows, width, stride, inv, base[i]);
            int32_t n = length[i];
            Py_ssize_t mark = cpos.n;
            int32_t st = (int32_t)q;
            int32_t j = 0;
            for (; j < n; j++) {
                uint8_t byte = s[j];
                if (j && final[st] && (!follow || follow[byte])) {
                    if (vec_push(&cpos, p) < 0 || vec_push(&cj, j) < 0) {
                        PyErr_NoMemory();
                        goto done;
                    }
                }
                st = trans[st * 256 + byte];
                if (st < 0) break;
            }
            if (j == n) {  /* stays inside: its crossings never change a mask (drop_inside) */
                inside[i] = 1;
                cpos.n = cj.n = mark;
            }
        }
        if (by_memory) {  /* sort key: j, then longer rests first (stable: bucket order last) */
            for (Py_ssize_t t = 0; t < cj.n; t++) cj.a[t] = cj.a[t] * (lmax + 1) + (lmax - lens[cpos.a[t]]);
            jorder = counting_order(cj.a, cj.n, nkeys, 0);
        } else {
            jorder = counting_order(cj.a, cj.n, lmax + 1, 0);
        }
        keys = (int64_t *)malloc((size_t)(2 * cj.n + 1) * sizeof(int64_t));
        if (!jorder || !keys) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t t = 0; t < cj.n; t++) {
            Py_ssize_t u = jorder[t];
            keys[t] = starting[by_memory ? cpos.a[u] : order[cpos.a[u]]];
            keys[cj.n + t] = by_memory ? cj.a[u] / (lmax + 1) : cj.a[u];
        }
        PyObject *a = as_bytes(keys, cj.n), *b = as_bytes(keys + cj.n, cj.n);
        if (a && b) result = PyTuple_Pack(2, a, b);
        Py_XDECREF(a);
        Py_XDECREF(b);
    }
done:
    free(starting);
    free(order);
    free(lens);
    free(jorder);
    free(keys);
    free(cpos.a);
    free(cj.a);
    if (have_follow) PyBuffer_Release(&follow_b);
    PyBuffer_Release(&trans_b);
    PyBuffer_Release(&final_b);
    PyBuffer_Release(&rows_b);
    PyBuffer_Release(&base_b);
    PyBuffer_Release(&len_b);
    PyBuffer_Release(&lo_b);
    PyBuffer_Release(&inside_b);
    return result;
}

/* The trie walk's inputs, shared by walk_trie and walk_trie_leftovers (their first thirteen
 * arguments, and the cut): the buffers, checked for size, and typed views of them. */
typedef struct {
    Py_buffer trans_b, final_b, byte_b, depth_b, skip_b, tlo_b, thi_b, elo_b, etok_b, inside_b, follow_b, cut_b;
    int have_follow, have_cut, parsed;
    long long q, dtop;
    const int32_t *trans, *depth, *skip;
    const uint8_t *final, *byte, *follow, *cut;
    const int64_t *tlo, *thi, *end_lo, *end_tok;
    uint8_t *inside;
    Py_ssize_t nodes;
} TrieIn;

/* After PyArg_ParseTuple filled the first ten buffers, q and dtop: take follow and cut (None or a
 * buffer), check the sizes, set the views. -1 with an exception set. */
static int trie_in_open(TrieIn *t, PyObject *follow_o, PyObject *cut_o, const char *who) {
    t->parsed = 1;
    if (follow_o != Py_None) {
        if (PyObject_GetBuffer(follow_o, &t->follow_b, PyBUF_SIMPLE) < 0) return -1;
        t->have_follow = 1;
    }
    if (cut_o != Py_None) {
        if (PyObject_GetBuffer(cut_o, &t->cut_b, PyBUF_SIMPLE) < 0) return -1;
        t->have_cut = 1;
    }
    Py_ssize_t nodes = t->byte_b.len, states = t->final_b.len;
    if (t->depth_b.len != 4 * nodes || t->skip_b.len != 4 * nodes || t->tlo_b.len != 8 * nodes ||
        t->thi_b.len != 8 * nodes || t->elo_b.len != 8 * (nodes + 1) || t->trans_b.len != 1024 * states || t->q < 0 ||
        t->q >= states || t->dtop < 0 || (t->have_follow && t->follow_b.len != 256) ||
        (t->have_cut && t->cut_b.len != nodes)) {
        PyErr_Format(PyExc_ValueError, "%s: arrays of the wrong size or dtype", who);
        return -1;
    }
    t->trans = (const int32_t *)t->trans_b.buf;
    t->final = (const uint8_t *)t->final_b.buf;
    t->byte = (const uint8_t *)t->byte_b.buf;
    t->depth = (const int32_t *)t->depth_b.buf;
    t->skip = (const int32_t *)t->skip_b.buf;
    t->tlo = (const int64_t *)t->tlo_b.buf;
    t->thi = (const int64_t *)t->thi_b.buf;
    t->end_lo = (const int64_t *)t->elo_b.buf;
    t->end_tok = (const int64_t *)t->etok_b.buf;
    t->follow = t->have_follow ? (const uint8_t *)t->follow_b.buf : NULL;
    t->cut = t->have_cut ? (const uint8_t *)t->cut_b.buf : NULL;
    t->inside = (uint8_t *)t->inside_b.buf;
    t->nodes = nodes;
    return 0;
}

static void trie_in_close(TrieIn *t) {
    if (!t->parsed) return;
    if (t->have_follow) PyBuffer_Release(&t->follow_b);
    if (t->have_cut) PyBuffer_Release(&t->cut_b);
    Py_buffer *bs[] = {&t->trans_b, &t->final_b, &t->byte_b, &t->depth_b, &t->skip_b, &t->tlo_b, &t->thi_b,
                       &t->elo_b, &t->etok_b, &t->inside_b};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) PyBuffer_Release(bs[i]);
}

/* The depth-first walk of walk_trie (below): marks inside[t] for the tokens the DFA survives from
 * q and pushes each crossing run as (its node, j) onto node / jv (the greatest j into *dmax), at
 * most cap of them: past it, *capped is set and no more are pushed (the walk goes on marking). A
 * dead node's subtree, and one cut marks, is jumped over. -1 with MemoryError set on failure. */
static int trie_descend(const TrieIn *t, int32_t *stack, vec *node, vec *jv, int32_t *dmax, Py_ssize_t cap,
                        int *capped) {
    const int32_t *trans = t->trans, *depth = t->depth, *skip = t->skip;
    const uint8_t *final = t->final, *byte = t->byte, *follow = t->follow, *cut = t->cut;
    const int64_t *end_lo = t->end_lo, *end_tok = t->end_tok;
    uint8_t *inside = t->inside;
    stack[0] = (int32_t)t->q;
    for (Py_ssize_t i = 0; i < t->nodes;) {
        if (cut && cut[i]) {
            i = skip[i];
            continue;
        }
        int32_t d = depth[i];
        int32_t ps = stack[d - 1];
        uint8_t b = byte[i];
        if (d >= 2 && final[ps] && (!follow || follow[b]) && !*capped) {
            if (node->n >= cap) {
                *capped = 1;
            } else {
                if (vec_push(node, i) < 0 || vec_push(jv, d - 1) < 0) {
                    PyErr_NoMemory();
                    return -1;
                }
                if (d - 1 > *dmax) *dmax = d - 1;
            }
        }
        int32_t s = trans[ps * 256 + b];
        if (s < 0) {
            i = skip[i];
            continue;
        }
        stack[d] = s;
        for (int64_t e = end_lo[i]; e < end_lo[i + 1]; e++) inside[end_tok[e]] = 1;
        i++;
    }
    return 0;
}

/* walk_trie(trans, final, q, byte, depth, skip, tlo, thi, end_lo, end_tok, follow, inside, levels)
 *   the token trie in preorder: per node its edge byte (uint8), depth (int32, 1 = a first byte),
 *   skip (int32: the node after its subtree), lexicographic token run [tlo, thi) (int64), and the
 *   tokens that end at it: end_tok[end_lo[i]:end_lo[i+1]] (rest indices, int64); levels: the
 *   greatest depth
 * Writes inside[t] = 1 for the tokens the DFA survives from q; returns (lo, hi, j) as int64 bytes:
 * the runs of tokens that can end the terminal after j bytes (the next byte allowed by follow), by
 * j, then in lexicographic order (trie_walk.walk_vocabulary's order). A dead node's subtree is
 * skipped in one jump. cut (optional, uint8 per node, or None): a node marked 1 roots a subtree
 * whose tokens the caller knows the DFA survives (slices.trie_cut) and marks inside itself: the
 * subtree is jumped over unwalked and no crossing of its tokens is reported (an inside token's
 * crossings are dropped anyway: rest_walk.drop_inside). */
static PyObject *walk_trie(PyObject *self, PyObject *args) {
    TrieIn t = {0};
    PyObject *follow_o, *cut_o = Py_None;
    if (!PyArg_ParseTuple(args, "y*y*Ly*y*y*y*y*y*y*Ow*L|O", &t.trans_b, &t.final_b, &t.q, &t.byte_b, &t.depth_b,
                          &t.skip_b, &t.tlo_b, &t.thi_b, &t.elo_b, &t.etok_b, &follow_o, &t.inside_b, &t.dtop, &cut_o))
        return NULL;
    PyObject *result = NULL;
    vec node = {0}, jv = {0};
    int64_t *jorder = NULL, *out = NULL;
    int32_t *stack = NULL;
    if (trie_in_open(&t, follow_o, cut_o, "walk_trie") < 0) goto done;
    {
        int32_t dmax = 0;
        stack = (int32_t *)malloc(((size_t)t.dtop + 1) * sizeof(int32_t));
        if (!stack) {
            PyErr_NoMemory();
            goto done;
        }
        int capped = 0;
        if (trie_descend(&t, stack, &node, &jv, &dmax, PY_SSIZE_T_MAX, &capped) < 0) goto done;
        jorder = counting_order(jv.a, jv.n, (int64_t)dmax + 1, 0);
        out = (int64_t *)malloc((size_t)(3 * jv.n + 1) * sizeof(int64_t));
        if (!jorder || !out) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t k = 0; k < jv.n; k++) {
            int64_t i = node.a[jorder[k]];
            out[k] = t.tlo[i];
            out[jv.n + k] = t.thi[i];
            out[2 * jv.n + k] = jv.a[jorder[k]];
        }
        PyObject *a = as_bytes(out, jv.n), *b = as_bytes(out + jv.n, jv.n), *c = as_bytes(out + 2 * jv.n, jv.n);
        if (a && b && c) result = PyTuple_Pack(3, a, b, c);
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(c);
    }
done:
    free(stack);
    free(node.a);
    free(jv.a);
    free(jorder);
    free(out);
    trie_in_close(&t);
    return result;
}

/* -- token sets out of walks: the many small numpy calls around every walk result, in one loop.
 * Why: a fresh mask ORs the tokens of every allowed crossing into its row and marks the rests a
 * deeper walk allowed; in numpy each is ~6-10 array calls (concat_ranges, gathers, a 262k-byte
 * bool array packed per call), microseconds apiece, thousands per fresh document (cProfile of 30
 * fresh documents of 10 corpus grammars: sources + pack_ids + sparse_ids + the mask's ORs ~13% of
 * all mask time). */

/* set_bits(out, ids[, flags]): out (int32 [W], written) |= bit id%32 of word id//32 for every id
 * (int64), or with flags (uint8, one per id) for the ids whose flag is set: a walk's bool result
 * packed without the boolean gather ``ids[flags]`` first (``TokenMatrix.pack_where``: 0.62 instead
 * of 1.38 ms for a 30-character string interior's 143k tokens on Gemma's vocabulary). */
static PyObject *set_bits(PyObject *self, PyObject *args) {
    Py_buffer out_b, ids_b, flags_b;
    PyObject *flags_o = Py_None;
    if (!PyArg_ParseTuple(args, "w*y*|O", &out_b, &ids_b, &flags_o)) return NULL;
    uint32_t *out = (uint32_t *)out_b.buf;
    const int64_t *ids = (const int64_t *)ids_b.buf;
    Py_ssize_t n = ids_b.len / 8, bits = (out_b.len / 4) * 32;
    const uint8_t *flags = NULL;
    PyObject *result = Py_None;
    if (flags_o != Py_None) {
        if (PyObject_GetBuffer(flags_o, &flags_b, PyBUF_SIMPLE) < 0) {
            PyBuffer_Release(&out_b);
            PyBuffer_Release(&ids_b);
            return NULL;
        }
        flags = (const uint8_t *)flags_b.buf;
        if (flags_b.len != n) {
            PyErr_SetString(PyExc_ValueError, "set_bits: one flag per id");
            result = NULL;
            n = 0;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {  /* (no branch on a flag: kept tokens come in runs) */
        int64_t t = ids[i];
        if (t < 0 || t >= bits) {
            PyErr_SetString(PyExc_IndexError, "set_bits: token id out of range");
            result = NULL;
            break;
        }
        out[t >> 5] |= (uint32_t)(flags ? flags[i] != 0 : 1) << (t & 31);
    }
    if (flags_o != Py_None) PyBuffer_Release(&flags_b);
    PyBuffer_Release(&out_b);
    PyBuffer_Release(&ids_b);
    Py_XINCREF(result);
    return result;
}

/* csr(inv, n) -> (order, bounds) as int64 bytes: the crossings k grouped by leftover inv[k] in
 * [0, n), stably (order), and per leftover a its run order[bounds[a]:bounds[a + 1]]: a counting
 * sort, what np.argsort(inv, kind="stable") + np.searchsorted give. */
static PyObject *csr(PyObject *self, PyObject *args) {
    Py_buffer inv_b;
    long long n;
    if (!PyArg_ParseTuple(args, "y*L", &inv_b, &n)) return NULL;
    const int64_t *inv = (const int64_t *)inv_b.buf;
    Py_ssize_t k = inv_b.len / 8;
    PyObject *result = NULL;
    int64_t *bounds = NULL, *order = NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "csr: negative size");
        goto done;
    }
    bounds = (int64_t *)calloc((size_t)n + 2, sizeof(int64_t));
    order = (int64_t *)malloc((size_t)(k ? k : 1) * sizeof(int64_t));
    if (!bounds || !order) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        if (inv[i] < 0 || inv[i] >= n) {
            PyErr_SetString(PyExc_IndexError, "csr: leftover index out of range");
            goto done;
        }
        bounds[inv[i] + 2]++;
    }
    for (long long a = 2; a < n + 2; a++) bounds[a] += bounds[a - 1];
    for (Py_ssize_t i = 0; i < k; i++) order[bounds[inv[i] + 1]++] = i;  /* bounds[a + 1]: next slot of a */
    {
        PyObject *o = as_bytes(order, k), *b = as_bytes(bounds, (Py_ssize_t)n + 1);
        if (o && b) result = PyTuple_Pack(2, o, b);
        Py_XDECREF(o);
        Py_XDECREF(b);
    }
done:
    free(bounds);
    free(order);
    PyBuffer_Release(&inv_b);
    return result;
}

/* Mark walked rest x for gather/gather_dense: flags[x] = 1, or with tid the bit of token tid[x] in
 * bits. Returns -1 when an index is out of range. */
static inline int mark_rest(int64_t x, const int64_t *tid, Py_ssize_t ntid, uint8_t *flags, uint32_t *bits,
                            Py_ssize_t limit) {
    if (tid) {
        if (x < 0 || x >= ntid) return -1;
        x = tid[x];
    }
    if (x < 0 || x >= limit) return -1;
    if (tid) bits[x >> 5] |= (uint32_t)1 << (x & 31);
    else flags[x] = 1;
    return 0;
}

/* gather(by_rest, bounds, allowed, tid, out): for each allowed leftover a (int64) and each crossing
 * in its run by_rest[bounds[a]:bounds[a + 1]] (the walked rest x it came from), mark x: with tid
 * None, out (uint8 [n]) gets out[x] = 1; else out (int32 bitmask row) gets the bit of token
 * tid[x]. Walk.sources's CSR path, with its consumer's write fused in. */
static PyObject *gather(PyObject *self, PyObject *args) {
    Py_buffer rest_b, bounds_b, allowed_b, out_b, tid_b;
    PyObject *tid_o;
    if (!PyArg_ParseTuple(args, "y*y*y*Ow*", &rest_b, &bounds_b, &allowed_b, &tid_o, &out_b)) return NULL;
    int have_tid = 0;
    PyObject *result = NULL;
    if (tid_o != Py_None) {
        if (PyObject_GetBuffer(tid_o, &tid_b, PyBUF_SIMPLE) < 0) goto done;
        have_tid = 1;
    }
    {
        const int64_t *by_rest = (const int64_t *)rest_b.buf, *bounds = (const int64_t *)bounds_b.buf;
        const int64_t *allowed = (const int64_t *)allowed_b.buf;
        const int64_t *tid = have_tid ? (const int64_t *)tid_b.buf : NULL;
        Py_ssize_t nk = rest_b.len / 8, na = allowed_b.len / 8, nb = bounds_b.len / 8;
        Py_ssize_t ntid = have_tid ? tid_b.len / 8 : 0;
        Py_ssize_t limit = have_tid ? (out_b.len / 4) * 32 : out_b.len;
        uint8_t *flags = (uint8_t *)out_b.buf;
        uint32_t *bits = (uint32_t *)out_b.buf;
        for (Py_ssize_t i = 0; i < na; i++) {
            int64_t a = allowed[i];
            if (a < 0 || a + 1 >= nb || bounds[a] < 0 || bounds[a + 1] > nk) goto range;
            for (int64_t k = bounds[a]; k < bounds[a + 1]; k++)
                if (mark_rest(by_rest[k], tid, ntid, flags, bits, limit) < 0) goto range;
        }
        result = Py_None;
        Py_INCREF(result);
        goto done;
    range:
        PyErr_SetString(PyExc_IndexError, "gather: index out of range");
    }
done:
    if (have_tid) PyBuffer_Release(&tid_b);
    PyBuffer_Release(&rest_b);
    PyBuffer_Release(&bounds_b);
    PyBuffer_Release(&allowed_b);
    PyBuffer_Release(&out_b);
    return result;
}

/* gather_ids(by_tok, bounds, allowed, out): gather with the token ids already looked up per
 * crossing (by_tok = tid[by_rest], made once per walk): out (int32 bitmask row) gets the bit of
 * by_tok[k] for every crossing k in the runs of the allowed leftovers. Without the tid[x] lookup
 * (a random read into the 262k-entry id array per crossing, ~2 MB on Gemma) the loop reads
 * sequentially and writes into a 32 KB row. */
static PyObject *gather_ids(PyObject *self, PyObject *args) {
    Py_buffer tok_b, bounds_b, allowed_b, out_b;
    if (!PyArg_ParseTuple(args, "y*y*y*w*", &tok_b, &bounds_b, &allowed_b, &out_b)) return NULL;
    PyObject *result = NULL;
    {
        const int64_t *by_tok = (const int64_t *)tok_b.buf, *bounds = (const int64_t *)bounds_b.buf;
        const int64_t *allowed = (const int64_t *)allowed_b.buf;
        Py_ssize_t nk = tok_b.len / 8, na = allowed_b.len / 8, nb = bounds_b.len / 8;
        Py_ssize_t limit = (out_b.len / 4) * 32;
        uint32_t *bits = (uint32_t *)out_b.buf;
        for (Py_ssize_t i = 0; i < na; i++) {
            int64_t a = allowed[i];
            if (a < 0 || a + 1 >= nb || bounds[a] < 0 || bounds[a + 1] > nk || bounds[a] > bounds[a + 1]) goto range;
            for (int64_t k = bounds[a]; k < bounds[a + 1]; k++) {
                int64_t x = by_tok[k];
                if (x < 0 || x >= limit) goto range;
                bits[x >> 5] |= (uint32_t)1 << (x & 31);
            }
        }
        result = Py_None;
        Py_INCREF(result);
        goto done;
    range:
        PyErr_SetString(PyExc_IndexError, "gather_ids: index out of range");
    }
done:
    PyBuffer_Release(&tok_b);
    PyBuffer_Release(&bounds_b);
    PyBuffer_Release(&allowed_b);
    PyBuffer_Release(&out_b);
    return result;
}

/* gather_dense(src, inv, allowed, n, tid, out): gather's result without a CSR index: every
 * crossing k whose leftover inv[k] (in [0, n)) is allowed marks src[k]. For many allowed leftovers
 * one pass over the crossings costs less than building the index (Walk.sources's dense path). */
static PyObject *gather_dense(PyObject *self, PyObject *args) {
    Py_buffer src_b, inv_b, allowed_b, out_b, tid_b;
    PyObject *tid_o;
    long long n;
    if (!PyArg_ParseTuple(args, "y*y*y*LOw*", &src_b, &inv_b, &allowed_b, &n, &tid_o, &out_b)) return NULL;
    int have_tid = 0;
    PyObject *result = NULL;
    uint8_t *sel = NULL;
    if (tid_o != Py_None) {
        if (PyObject_GetBuffer(tid_o, &tid_b, PyBUF_SIMPLE) < 0) goto done;
        have_tid = 1;
    }
    {
        const int64_t *src = (const int64_t *)src_b.buf, *inv = (const int64_t *)inv_b.buf;
        const int64_t *allowed = (const int64_t *)allowed_b.buf;
        const int64_t *tid = have_tid ? (const int64_t *)tid_b.buf : NULL;
        Py_ssize_t nk = src_b.len / 8, na = allowed_b.len / 8, ntid = have_tid ? tid_b.len / 8 : 0;
        Py_ssize_t limit = have_tid ? (out_b.len / 4) * 32 : out_b.len;
        uint8_t *flags = (uint8_t *)out_b.buf;
        uint32_t *bits = (uint32_t *)out_b.buf;
        if (n < 0 || inv_b.len != src_b.len) goto range;
        sel = (uint8_t *)calloc((size_t)n + 1, 1);
        if (!sel) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t i = 0; i < na; i++) {
            if (allowed[i] < 0 || allowed[i] >= n) goto range;
            sel[allowed[i]] = 1;
        }
        for (Py_ssize_t k = 0; k < nk; k++) {
            int64_t a = inv[k];
            if (a < 0 || a >= n) goto range;
            if (sel[a] && mark_rest(src[k], tid, ntid, flags, bits, limit) < 0) goto range;
        }
        result = Py_None;
        Py_INCREF(result);
        goto done;
    range:
        PyErr_SetString(PyExc_IndexError, "gather_dense: index out of range");
    }
done:
    free(sel);
    if (have_tid) PyBuffer_Release(&tid_b);
    PyBuffer_Release(&src_b);
    PyBuffer_Release(&inv_b);
    PyBuffer_Release(&allowed_b);
    PyBuffer_Release(&out_b);
    return result;
}

/* leftovers(tid, base, length, flat, stride, ci, cj, distinct) -> (tid, base, length, lo, pos)
 * as bytes: the rest set of the leftovers after crossings (rest ci[k] split after cj[k] bytes) and
 * each crossing's index in it: RestSet.of(tm, tid[ci], base[ci] + cj * stride, length[ci] - cj,
 * distinct=...) element for element. flat is the token matrix, column-major (a rest's first byte
 * is flat[base]). Not distinct: equal leftovers (equal base) are one rest, kept at the first
 * crossing that made it, in increasing base; then (both cases) a stable counting sort by first
 * byte. Why: with_crossings was ~10 numpy calls (np.unique's sorts among them) per walk, ~8% of
 * fresh mask time on 10 corpus grammars; an LSD radix sort of the bases replaces the sort. */
static PyObject *leftovers(PyObject *self, PyObject *args) {
    Py_buffer tid_b, base_b, len_b, flat_b, ci_b, cj_b;
    long long stride;
    int distinct;
    if (!PyArg_ParseTuple(args, "y*y*y*y*Ly*y*p", &tid_b, &base_b, &len_b, &flat_b, &stride, &ci_b, &cj_b, &distinct))
        return NULL;
    PyObject *result = NULL;
    int64_t *nb = NULL, *idx = NULL, *tmp = NULL, *grp = NULL, *first_at = NULL, *gorder = NULL, *out = NULL;
    int32_t *olen = NULL;
    const int64_t *tid = (const int64_t *)tid_b.buf, *base = (const int64_t *)base_b.buf;
    const int32_t *length = (const int32_t *)len_b.buf;
    const uint8_t *flat = (const uint8_t *)flat_b.buf;
    const int64_t *ci = (const int64_t *)ci_b.buf, *cj = (const int64_t *)cj_b.buf;
    Py_ssize_t n = base_b.len / 8, k = ci_b.len / 8;
    int64_t lo[257];
    if (cj_b.len != ci_b.len || tid_b.len != base_b.len || len_b.len != 4 * n || stride <= 0) {
        PyErr_SetString(PyExc_ValueError, "leftovers: arrays of the wrong size or dtype");
        goto done;
    }
    size_t sz = (size_t)(k ? k : 1) * sizeof(int64_t);
    nb = (int64_t *)malloc(sz);
    idx = (int64_t *)malloc(sz);
    tmp = (int64_t *)malloc(sz);
    grp = (int64_t *)malloc(sz);
    first_at = (int64_t *)malloc(sz);
    gorder = (int64_t *)malloc(sz);
    out = (int64_t *)malloc(3 * sz);
    olen = (int32_t *)malloc((size_t)(k ? k : 1) * sizeof(int32_t));
    if (!nb || !idx || !tmp || !grp || !first_at || !gorder || !out || !olen) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t maxb = 0;
    for (Py_ssize_t t = 0; t < k; t++) {
        int64_t i = ci[t];
        if (i < 0 || i >= n || cj[t] < 0 || cj[t] >= length[i]) {
            PyErr_SetString(PyExc_IndexError, "leftovers: crossing out of range");
            goto done;
        }
        nb[t] = base[i] + cj[t] * stride;
        if (nb[t] < 0 || nb[t] >= flat_b.len) {
            PyErr_SetString(PyExc_IndexError, "leftovers: leftover outside the token matrix");
            goto done;
        }
        if (nb[t] > maxb) maxb = nb[t];
    }
    Py_ssize_t ng;  /* the distinct leftovers: group g first made by crossing first_at[g] */
    if (distinct) {
        ng = k;
        for (Py_ssize_t t = 0; t < k; t++) {
            grp[t] = t;
            first_at[t] = t;
        }
    } else {
        /* stable LSD radix sort of the crossings by base, 8 bits a pass */
        for (Py_ssize_t t = 0; t < k; t++) idx[t] = t;
        for (int shift = 0; shift < 64 && (maxb >> shift) > 0; shift += 8) {
            int64_t cnt[257] = {0};
            for (Py_ssize_t t = 0; t < k; t++) cnt[((nb[idx[t]] >> shift) & 255) + 1]++;
            for (int b = 1; b < 257; b++) cnt[b] += cnt[b - 1];
            for (Py_ssize_t t = 0; t < k; t++) tmp[cnt[(nb[idx[t]] >> shift) & 255]++] = idx[t];
            int64_t *sw = idx;
            idx = tmp;
            tmp = sw;
        }
        ng = 0;
        for (Py_ssize_t t = 0; t < k; t++) {
            if (t == 0 || nb[idx[t]] != nb[idx[t - 1]]) first_at[ng++] = idx[t];
            grp[idx[t]] = ng - 1;
        }
    }
    /* stable counting sort of the groups (in increasing base, or crossing order) by first byte,
     * each read from the token matrix once (a cache miss apiece: kept in tmp, free by now) */
    {
        int64_t cnt[258] = {0};
        uint8_t *fb = (uint8_t *)tmp;
        for (Py_ssize_t g = 0; g < ng; g++) {
            fb[g] = flat[nb[first_at[g]]];
            cnt[fb[g] + 2]++;
        }
        for (int b = 2; b < 258; b++) cnt[b] += cnt[b - 1];
        for (int b = 0; b < 257; b++) lo[b] = cnt[b + 1];
        for (Py_ssize_t g = 0; g < ng; g++) {
            int64_t r = cnt[fb[g] + 1]++;
            gorder[g] = r;  /* the group's index in the set */
            int64_t f = first_at[g];
            out[r] = tid[ci[f]];
            out[ng + r] = nb[f];
            olen[r] = (int32_t)(length[ci[f]] - cj[f]);
        }
    }
    for (Py_ssize_t t = 0; t < k; t++) out[2 * ng + t] = gorder[grp[t]];
    {
        PyObject *a = as_bytes(out, ng), *b = as_bytes(out + ng, ng);
        PyObject *c = PyBytes_FromStringAndSize((const char *)olen, ng * (Py_ssize_t)sizeof(int32_t));
        PyObject *d = as_bytes(lo, 257), *e = as_bytes(out + 2 * ng, k);
        if (a && b && c && d && e) result = PyTuple_Pack(5, a, b, c, d, e);
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(c);
        Py_XDECREF(d);
        Py_XDECREF(e);
    }
done:
    free(nb);
    free(idx);
    free(tmp);
    free(grp);
    free(first_at);
    free(gorder);
    free(out);
    free(olen);
    PyBuffer_Release(&tid_b);
    PyBuffer_Release(&base_b);
    PyBuffer_Release(&len_b);
    PyBuffer_Release(&flat_b);
    PyBuffer_Release(&ci_b);
    PyBuffer_Release(&cj_b);
    return result;
}

/* walk_trie_leftovers(trans, final, q, byte, depth, skip, tlo, thi, end_lo, end_tok, follow, inside,
 *                     levels, cut, known, lex, tid, base, length, first, flat, stride)
 *   -> (ci, tid, base, length, lo, pos) as bytes
 * walk_trie (the same arguments up to cut), then, in the same call: known (uint8 per rest, or None:
 * a cut's tokens known to stay inside) joins inside; the crossings are the runs' tokens
 * (lex[tlo:thi] of each run's node, lex: lexicographic position -> rest) that do not stay inside,
 * each ending the terminal after its run's j bytes, in walk_trie's order (by j, then preorder;
 * lexicographic within a run); and the leftovers they leave are made as leftovers(..., distinct=1)
 * makes them: tid, base (+ j * stride), length (int32, - j), lo (257: by first byte, stably), and
 * each crossing's index pos in them; ci: each crossing's rest. first (int64 [257]): the rest set's
 * first-byte offsets (also the lexicographic order's). Element for element what walk_trie,
 * spreading the runs out, rest_walk.drop_inside and rest_walk.leftovers make (tests/constrain/
 * test_walk_kernel.py).
 * Why one call: a terminal that can end after any byte (a line of text, [^\n]+) has a run at
 * nearly every node of the trie (380,650 on Gemma's 587,920 nodes), whose tokens nearly all stay
 * inside: the runs went back to Python as 9 MB of bytes, were spread out to every (token, j) pair
 * (~1.7M) to drop the inside ones, and each leftover's first byte was read from the token matrix
 * (a cache miss apiece). Here a run whose tokens all stay inside is dropped by a prefix count over
 * the lexicographic order, and a run's leftovers share their first byte (its tokens share their
 * first j + 1 bytes), read once. Past a cap on recorded runs, the few tokens that do not stay
 * inside are walked one by one instead (below). Gemma, AMD EPYC VM, walk_vocabulary from the start
 * state, the two paths alternating in one process (medians of 8): [^\n]+ 19.8 -> 5.0 ms (with its
 * trie cut 11.2 -> 4.2; the walk that only marks inside is 4.2), [ \t\n\r]+ (137,510 leftovers)
 * 4.65 -> 2.62 ms, a NAME 4.8 -> 3.3 ms. Over the corpus grammars' fresh documents the effect is
 * small (most broad states are sliced, slices.py): benchmarks/ab_masks.py --grammars --switch
 * trieleft --reps 4: masks 4,238 -> 4,063 ms without the cap, 3,352 -> 3,332 ms with it (another
 * run: per-document noise is +-8%). */
static PyObject *walk_trie_leftovers(PyObject *self, PyObject *args) {
    TrieIn t = {0};
    Py_buffer lex_b, tid_b, base_b, len_b, first_b, flat_b, known_b;
    PyObject *follow_o, *cut_o, *known_o;
    long long stride, cap_arg = -1, flat_max_arg = -1;
    if (!PyArg_ParseTuple(args, "y*y*Ly*y*y*y*y*y*y*Ow*LOOy*y*y*y*y*y*L|LL", &t.trans_b, &t.final_b, &t.q, &t.byte_b,
                          &t.depth_b, &t.skip_b, &t.tlo_b, &t.thi_b, &t.elo_b, &t.etok_b, &follow_o, &t.inside_b,
                          &t.dtop, &cut_o, &known_o, &lex_b, &tid_b, &base_b, &len_b, &first_b, &flat_b, &stride,
                          &cap_arg, &flat_max_arg))
        return NULL;
    PyObject *result = NULL;
    int have_known = 0;
    vec node = {0}, jv = {0};
    int64_t *jorder = NULL, *bad = NULL, *out = NULL;
    int32_t *stack = NULL, *olen = NULL;
    int16_t *fb = NULL;
    if (trie_in_open(&t, follow_o, cut_o, "walk_trie_leftovers") < 0) goto done;
    if (known_o != Py_None) {
        if (PyObject_GetBuffer(known_o, &known_b, PyBUF_SIMPLE) < 0) goto done;
        have_known = 1;
    }
    {
        const int32_t *trans = t.trans;
        const uint8_t *final = t.final, *follow = t.follow;
        const int64_t *tlo = t.tlo, *thi = t.thi;
        const uint8_t *known = have_known ? (const uint8_t *)known_b.buf : NULL;
        uint8_t *inside = t.inside;
        const int64_t *lex = (const int64_t *)lex_b.buf, *tid = (const int64_t *)tid_b.buf;
        const int64_t *base = (const int64_t *)base_b.buf;
        const int32_t *length = (const int32_t *)len_b.buf;
        const uint8_t *flat = (const uint8_t *)flat_b.buf;
        const int64_t *first = (const int64_t *)first_b.buf;
        long long q = t.q;
        Py_ssize_t n = tid_b.len / 8, nlex = lex_b.len / 8;
        if (t.inside_b.len != n || (have_known && known_b.len != n) || base_b.len != tid_b.len || len_b.len != 4 * n ||
            nlex != n || first_b.len != 257 * 8 || stride <= 0) {
            PyErr_SetString(PyExc_ValueError, "walk_trie_leftovers: arrays of the wrong size or dtype");
            goto done;
        }
        int32_t dmax = 0;
        stack = (int32_t *)malloc(((size_t)t.dtop + 1) * sizeof(int32_t));
        if (!stack) {
            PyErr_NoMemory();
            goto done;
        }
        for (int c = 0; c < 256; c++)
            if (first[c] < 0 || first[c] > first[c + 1] || first[c + 1] > n) {
                PyErr_SetString(PyExc_ValueError, "walk_trie_leftovers: first-byte offsets out of order");
                goto done;
            }
        /* Runs are recorded up to cap = n / 2. A walk that would record more (a terminal that can
         * end after any byte has a run at nearly every node) goes on marking inside only; if at
         * most flat_max = n / 2 tokens then start with a byte q takes and do not stay inside
         * (the optional last two arguments set cap and flat_max, for tests), those are walked
         * one by one for their crossings, each a run of one token (flat), else the trie is walked
         * again recording every run. Both give the crossings in the same order: by j, then
         * lexicographic (preorder among the nodes of one depth is the lexicographic order of
         * their prefixes, and a run is a lexicographic range). */
        int capped = 0, flat_runs = 0;
        Py_ssize_t cap = cap_arg >= 0 ? (Py_ssize_t)cap_arg : n / 2;
        Py_ssize_t flat_max = flat_max_arg >= 0 ? (Py_ssize_t)flat_max_arg : n / 2;
        if (trie_descend(&t, stack, &node, &jv, &dmax, cap, &capped) < 0) goto done;
        if (known)
            for (Py_ssize_t i = 0; i < n; i++) inside[i] |= known[i];
        if (capped) {
            Py_ssize_t cand = 0;
            const int32_t *row = trans + q * 256;
            for (int c = 0; c < 256; c++)
                if (row[c] >= 0)
                    for (int64_t p = first[c]; p < first[c + 1]; p++) {
                        if (lex[p] < 0 || lex[p] >= n) {
                            PyErr_SetString(PyExc_IndexError, "walk_trie_leftovers: a token out of range");
                            goto done;
                        }
                        cand += !inside[lex[p]];
                    }
            node.n = jv.n = 0;
            dmax = 0;
            if (cand <= flat_max) {
                flat_runs = 1;
                for (int c = 0; c < 256; c++) {
                    if (row[c] < 0) continue;
                    for (int64_t p = first[c]; p < first[c + 1]; p++) {
                        int64_t x = lex[p];
                        if (inside[x]) continue;
                        int32_t len = length[x];
                        if (base[x] < 0 || base[x] + (int64_t)(len - 1) * stride >= flat_b.len) {
                            PyErr_SetString(PyExc_IndexError, "walk_trie_leftovers: leftover outside the token matrix");
                            goto done;
                        }
                        int32_t st = (int32_t)q;
                        for (int32_t j = 0; j < len; j++) {
                            uint8_t bj = flat[base[x] + (int64_t)j * stride];
                            if (j && final[st] && (!follow || follow[bj])) {
                                if (vec_push(&node, p) < 0 || vec_push(&jv, j) < 0) {
                                    PyErr_NoMemory();
                                    goto done;
                                }
                                if (j > dmax) dmax = j;
                            }
                            st = trans[st * 256 + bj];
                            if (st < 0) break;
                        }
                    }
                }
            } else {
                capped = 0;
                if (trie_descend(&t, stack, &node, &jv, &dmax, PY_SSIZE_T_MAX, &capped) < 0) goto done;
            }
        }
        Py_ssize_t runs = jv.n;
        jorder = counting_order(jv.a, runs, (int64_t)dmax + 1, 0);
        fb = (int16_t *)malloc((size_t)(runs ? runs : 1) * sizeof(int16_t));
        if (!jorder || !fb) {
            PyErr_NoMemory();
            goto done;
        }
        /* tokens a run holds, in all: past n, count the ones outside by a prefix sum over the
         * lexicographic order (one pass) rather than reading each run's tokens */
        int64_t spread = 0;
        if (!flat_runs)
            for (Py_ssize_t r = 0; r < runs; r++) {
                int64_t i = node.a[r];
                if (tlo[i] < 0 || tlo[i] > thi[i] || thi[i] > nlex) {
                    PyErr_SetString(PyExc_IndexError, "walk_trie_leftovers: a run out of range");
                    goto done;
                }
                spread += thi[i] - tlo[i];
            }
        if (spread > n) {
            bad = (int64_t *)malloc((size_t)(nlex + 1) * sizeof(int64_t));
            if (!bad) {
                PyErr_NoMemory();
                goto done;
            }
            bad[0] = 0;
            for (Py_ssize_t p = 0; p < nlex; p++) {
                if (lex[p] < 0 || lex[p] >= n) {
                    PyErr_SetString(PyExc_IndexError, "walk_trie_leftovers: a token out of range");
                    goto done;
                }
                bad[p + 1] = bad[p] + !inside[lex[p]];
            }
        }
        int64_t cnt[258] = {0}, lo[257];
        Py_ssize_t k = 0;
        for (Py_ssize_t t = 0; t < runs; t++) {  /* per run: its first byte (-1: no token outside), count */
            int64_t i = node.a[jorder[t]], jj = jv.a[jorder[t]];
            int64_t rl = flat_runs ? i : tlo[i], rh = flat_runs ? i + 1 : thi[i];
            fb[t] = -1;
            if (bad && bad[rh] == bad[rl]) continue;
            for (int64_t p = rl; p < rh; p++) {
                int64_t x = lex[p];
                if (x < 0 || x >= n) {
                    PyErr_SetString(PyExc_IndexError, "walk_trie_leftovers: a token out of range");
                    goto done;
                }
                if (inside[x]) continue;
                int64_t nb = base[x] + jj * stride;
                if (jj >= length[x] || nb < 0 || nb >= flat_b.len) {
                    PyErr_SetString(PyExc_IndexError, "walk_trie_leftovers: leftover outside the token matrix");
                    goto done;
                }
                if (fb[t] < 0) fb[t] = flat[nb];  /* (the run's tokens share their first j + 1 bytes) */
                cnt[fb[t] + 2]++;
                k++;
            }
        }
        for (int c = 2; c < 258; c++) cnt[c] += cnt[c - 1];
        for (int c = 0; c < 257; c++) lo[c] = cnt[c + 1];
        size_t sz = (size_t)(k ? k : 1) * sizeof(int64_t);
        out = (int64_t *)malloc(4 * sz);
        olen = (int32_t *)malloc((size_t)(k ? k : 1) * sizeof(int32_t));
        if (!out || !olen) {
            PyErr_NoMemory();
            goto done;
        }
        int64_t *oci = out, *otid = out + k, *obase = out + 2 * k, *opos = out + 3 * k;
        Py_ssize_t c = 0;
        for (Py_ssize_t t = 0; t < runs; t++) {
            if (fb[t] < 0) continue;
            int64_t i = node.a[jorder[t]], jj = jv.a[jorder[t]];
            int64_t rl = flat_runs ? i : tlo[i], rh = flat_runs ? i + 1 : thi[i];
            for (int64_t p = rl; p < rh; p++) {
                int64_t x = lex[p];
                if (inside[x]) continue;
                int64_t at = cnt[fb[t] + 1]++;
                oci[c] = x;
                opos[c] = at;
                otid[at] = tid[x];
                obase[at] = base[x] + jj * stride;
                olen[at] = (int32_t)(length[x] - jj);
                c++;
            }
        }
        PyObject *a = as_bytes(oci, k), *b = as_bytes(otid, k), *d = as_bytes(obase, k);
        PyObject *e = PyBytes_FromStringAndSize((const char *)olen, k * (Py_ssize_t)sizeof(int32_t));
        PyObject *f = as_bytes(lo, 257), *g = as_bytes(opos, k);
        if (a && b && d && e && f && g) result = PyTuple_Pack(6, a, b, d, e, f, g);
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(d);
        Py_XDECREF(e);
        Py_XDECREF(f);
        Py_XDECREF(g);
    }
done:
    free(stack);
    free(node.a);
    free(jv.a);
    free(jorder);
    free(bad);
    free(fb);
    free(out);
    free(olen);
    if (have_known) PyBuffer_Release(&known_b);
    trie_in_close(&t);
    PyBuffer_Release(&lex_b);
    PyBuffer_Release(&tid_b);
    PyBuffer_Release(&base_b);
    PyBuffer_Release(&len_b);
    PyBuffer_Release(&first_b);
    PyBuffer_Release(&flat_b);
    return result;
}

/* reach(trans, n, slice, m, q, cap) -> int: the largest d <= cap such that every byte string of
 * at most d bytes that the slice DFA (``slice`` int32 [m, 256], -1 dead, start 0) keeps alive stays
 * alive in the DFA ``trans`` (int32 [n, 256]) from state q (slices.reach, one state). Breadth-first
 * over the product, one level of strings at a time, each pair visited once: the first pair with a
 * byte the slice moves on and the DFA does not ends it at that level's depth. */
static PyObject *reach(PyObject *self, PyObject *args) {
    Py_buffer tb, sb;
    Py_ssize_t n, m, q, cap;
    if (!PyArg_ParseTuple(args, "y*ny*nnn", &tb, &n, &sb, &m, &q, &cap)) return NULL;
    const int32_t *trans = (const int32_t *)tb.buf, *sl = (const int32_t *)sb.buf;
    if (tb.len < n * 256 * 4 || sb.len < m * 256 * 4 || q < 0 || q >= n) {
        PyBuffer_Release(&tb);
        PyBuffer_Release(&sb);
        PyErr_SetString(PyExc_ValueError, "reach: table sizes or state out of range");
        return NULL;
    }
    uint8_t *seen = (uint8_t *)calloc((size_t)(n * m), 1);
    int64_t *cur = (int64_t *)malloc((size_t)(n * m) * sizeof(int64_t));
    int64_t *nxt = (int64_t *)malloc((size_t)(n * m) * sizeof(int64_t));
    if (!seen || !cur || !nxt) {
        free(seen); free(cur); free(nxt);
        PyBuffer_Release(&tb);
        PyBuffer_Release(&sb);
        return PyErr_NoMemory();
    }
    Py_ssize_t ncur = 1, depth = 0, result = cap;
    cur[0] = q;  /* pair (s, p) as s * n + p; slice state 0 */
    seen[q] = 1;
    while (ncur && depth < cap && result == cap) {
        Py_ssize_t nn = 0;
        for (Py_ssize_t i = 0; i < ncur && result == cap; i++) {
            int64_t s = cur[i] / n, p = cur[i] % n;
            const int32_t *srow = sl + s * 256, *prow = trans + p * 256;
            for (int b = 0; b < 256; b++) {
                int32_t ts = srow[b];
                if (ts < 0) continue;
                int32_t tp = prow[b];
                if (tp < 0) { result = depth; break; }
                int64_t key = (int64_t)ts * n + tp;
                if (!seen[key]) { seen[key] = 1; nxt[nn++] = key; }
            }
        }
        int64_t *tmp = cur; cur = nxt; nxt = tmp;
        ncur = nn;
        depth++;
    }
    free(seen); free(cur); free(nxt);
    PyBuffer_Release(&tb);
    PyBuffer_Release(&sb);
    return PyLong_FromSsize_t(result);
}

/* special_ways(trans, removed, tainted, special_final) -> (gone_off, gone_byte, ways_off,
 *               ways_byte, ways_target, ways_special) as bytes
 *   trans int32 [n, 256] (-1 dead), removed bool [n, 256], tainted bool [n], special_final bool [n]
 * Per tainted state: its removed bytes, and its ways to a special final or tainted state (byte,
 * target, whether the target is special final), by byte; offsets int64 [n + 1] by state
 * (cut_walk.Simulation._sparse's lists as arrays: numpy took ~20 ms over a 4,096-state cut). */
static PyObject *special_ways(PyObject *self, PyObject *args) {
    Py_buffer tb, rb, tt, sb;
    if (!PyArg_ParseTuple(args, "y*y*y*y*", &tb, &rb, &tt, &sb)) return NULL;
    PyObject *res = NULL;
    Py_ssize_t n = tt.len;
    const int32_t *trans = (const int32_t *)tb.buf;
    const uint8_t *removed = (const uint8_t *)rb.buf, *tainted = (const uint8_t *)tt.buf,
                  *special = (const uint8_t *)sb.buf;
    int64_t *goff = NULL, *woff = NULL;
    uint8_t *gbyte = NULL, *wbyte = NULL, *wsp = NULL;
    int32_t *wtgt = NULL;
    if (n < 1 || tb.len != n * 256 * (Py_ssize_t)sizeof(int32_t) || rb.len != n * 256 || sb.len != n) {
        PyErr_SetString(PyExc_ValueError, "special_ways: tables of different sizes");
        goto done;
    }
    Py_ssize_t ng = 0, nw = 0;
    for (Py_ssize_t s = 0; s < n; s++) {  /* count first: exact sizes */
        if (!tainted[s]) continue;
        const int32_t *row = trans + s * 256;
        const uint8_t *gone = removed + s * 256;
        for (int b = 0; b < 256; b++) {
            ng += gone[b] != 0;
            int32_t t = row[b];
            if (t >= n) {
                PyErr_SetString(PyExc_ValueError, "special_ways: a transition past the last state");
                goto done;
            }
            nw += t >= 0 && (tainted[t] || special[t]);
        }
    }
    goff = (int64_t *)malloc((size_t)(n + 1) * sizeof(int64_t));
    woff = (int64_t *)malloc((size_t)(n + 1) * sizeof(int64_t));
    gbyte = (uint8_t *)malloc((size_t)(ng ? ng : 1));
    wbyte = (uint8_t *)malloc((size_t)(nw ? nw : 1));
    wsp = (uint8_t *)malloc((size_t)(nw ? nw : 1));
    wtgt = (int32_t *)malloc((size_t)(nw ? nw : 1) * sizeof(int32_t));
    if (!goff || !woff || !gbyte || !wbyte || !wsp || !wtgt) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t g = 0, w = 0;
    for (Py_ssize_t s = 0; s < n; s++) {
        goff[s] = g;
        woff[s] = w;
        if (!tainted[s]) continue;
        const int32_t *row = trans + s * 256;
        const uint8_t *gone = removed + s * 256;
        for (int b = 0; b < 256; b++)
            if (gone[b]) gbyte[g++] = (uint8_t)b;
        for (int b = 0; b < 256; b++) {
            int32_t t = row[b];
            if (t >= 0 && (tainted[t] || special[t])) {
                wbyte[w] = (uint8_t)b;
                wtgt[w] = t;
                wsp[w++] = special[t] ? 1 : 0;
            }
        }
    }
    goff[n] = g;
    woff[n] = w;
    res = Py_BuildValue("(y#y#y#y#y#y#)", (const char *)goff, (n + 1) * (Py_ssize_t)sizeof(int64_t),
                        (const char *)gbyte, ng, (const char *)woff, (n + 1) * (Py_ssize_t)sizeof(int64_t),
                        (const char *)wbyte, nw, (const char *)wtgt, nw * (Py_ssize_t)sizeof(int32_t),
                        (const char *)wsp, nw);
done:
    free(goff);
    free(woff);
    free(gbyte);
    free(wbyte);
    free(wsp);
    free(wtgt);
    PyBuffer_Release(&tb);
    PyBuffer_Release(&rb);
    PyBuffer_Release(&tt);
    PyBuffer_Release(&sb);
    return res;
}

/* special_paths(gone_off, gone_byte, ways_off, ways_byte, ways_target, ways_special, q, max_len,
 *               max_paths, max_nodes) -> list[bytes] | None
 *   gone_off int64 [n + 1], gone_byte uint8: state s's removed bytes are gone_byte[gone_off[s]:
 *   gone_off[s + 1]]; ways_off int64 [n + 1], ways_byte uint8, ways_target int32, ways_special
 *   bool: its ways on towards a special place (byte, target, whether the target is special final)
 *   (``special_ways``' arrays)
 * cut_walk.Simulation.special_paths' depth-first search, in the same order with the same bounds
 * (a stack of states, each popped state counted against max_nodes; None past max_nodes nodes or
 * max_paths paths): the byte strings of at most max_len bytes from q to a special place. Why C:
 * the Python search took up to ~0.6 ms a call on open objects with many keys (maskbench's dev
 * split: ~1.6% of all fresh requests' time, ~20 ms on some schemas). Each popped state's ways are
 * listed once per DFA (reading its 256-byte row at every visit instead was ~4x slower where the
 * search runs to max_nodes). */
typedef struct {
    int32_t state, parent, len;
    uint8_t byte;
} PathNode;

/* Append node e's path followed by byte last to the list out; -1 on error. */
static int append_path(PyObject *out, const PathNode *arena, int32_t e, uint8_t last) {
    int32_t L = arena[e].len;
    PyObject *p = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)L + 1);
    if (!p) return -1;
    char *buf = PyBytes_AS_STRING(p);
    buf[L] = (char)last;
    for (int32_t i = L - 1, x = e; i >= 0; i--, x = arena[x].parent) buf[i] = (char)arena[x].byte;
    int r = PyList_Append(out, p);
    Py_DECREF(p);
    return r;
}

static int offsets_ok(const int64_t *off, Py_ssize_t n, Py_ssize_t total) {
    if (off[0] < 0 || off[n] > total) return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (off[i] > off[i + 1]) return 0;
    return 1;
}

static PyObject *special_paths(PyObject *self, PyObject *args) {
    Py_buffer go, gb, wo, wb, wt, ws;
    Py_ssize_t q, max_len, max_paths, max_nodes;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*nnnn", &go, &gb, &wo, &wb, &wt, &ws, &q, &max_len, &max_paths,
                          &max_nodes))
        return NULL;
    PyObject *out = NULL;
    PathNode *arena = NULL;
    int32_t *stack = NULL;
    Py_ssize_t n = go.len / (Py_ssize_t)sizeof(int64_t) - 1, nw = wb.len;
    const int64_t *goff = (const int64_t *)go.buf, *woff = (const int64_t *)wo.buf;
    const uint8_t *gbyte = (const uint8_t *)gb.buf, *wbyte = (const uint8_t *)wb.buf, *wsp = (const uint8_t *)ws.buf;
    const int32_t *wtgt = (const int32_t *)wt.buf;
    if (n < 1 || go.len != (n + 1) * (Py_ssize_t)sizeof(int64_t) || wo.len != go.len ||
        wt.len != nw * (Py_ssize_t)sizeof(int32_t) || ws.len != nw || q < 0 || q >= n || max_len < 1 ||
        !offsets_ok(goff, n, gb.len) || !offsets_ok(woff, n, nw)) {
        PyErr_SetString(PyExc_ValueError, "special_paths: offsets, arrays or state out of range");
        goto done;
    }
    for (Py_ssize_t k = 0; k < nw; k++) {
        if (wtgt[k] < 0 || wtgt[k] >= n) {
            PyErr_SetString(PyExc_ValueError, "special_paths: a target past the last state");
            goto done;
        }
    }
    Py_ssize_t cap = 1024, used = 1, top = 1, scap = 1024, nodes = 0;
    arena = (PathNode *)malloc((size_t)cap * sizeof(PathNode));
    stack = (int32_t *)malloc((size_t)scap * sizeof(int32_t));
    out = PyList_New(0);
    if (!arena || !stack || !out) {
        Py_CLEAR(out);
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    arena[0].state = (int32_t)q;
    arena[0].parent = -1;
    arena[0].len = 0;
    arena[0].byte = 0;
    stack[0] = 0;
    while (top > 0) {
        int32_t e = stack[--top];
        if (++nodes > max_nodes) goto refuse;
        int32_t s = arena[e].state, L = arena[e].len;
        for (int64_t k = goff[s]; k < goff[s + 1]; k++) {
            if (append_path(out, arena, e, gbyte[k]) < 0) {
                Py_CLEAR(out);
                goto done;
            }
        }
        int deeper = (Py_ssize_t)L + 1 < max_len;
        for (int64_t k = woff[s]; k < woff[s + 1]; k++) {
            if (wsp[k]) {
                if (append_path(out, arena, e, wbyte[k]) < 0) {
                    Py_CLEAR(out);
                    goto done;
                }
            } else if (deeper) {
                if (used == cap || top == scap) {
                    if (used == cap) {
                        PathNode *a2 = (PathNode *)realloc(arena, 2 * (size_t)cap * sizeof(PathNode));
                        if (!a2) goto nomem;
                        arena = a2;
                        cap *= 2;
                    }
                    if (top == scap) {
                        int32_t *s2 = (int32_t *)realloc(stack, 2 * (size_t)scap * sizeof(int32_t));
                        if (!s2) goto nomem;
                        stack = s2;
                        scap *= 2;
                    }
                }
                if (used >= INT32_MAX) goto nomem;
                arena[used].state = wtgt[k];
                arena[used].parent = e;
                arena[used].len = L + 1;
                arena[used].byte = wbyte[k];
                stack[top++] = (int32_t)used++;
            }
        }
        /* (every state on the stack will be popped and counted: past max_nodes either way, so
         * the stack and its arena stay under max_nodes + 256 entries) */
        if (PyList_GET_SIZE(out) > max_paths || nodes + top > max_nodes) goto refuse;
    }
    goto done;
refuse:
    Py_CLEAR(out);
    Py_INCREF(Py_None);
    out = Py_None;
    goto done;
nomem:
    Py_CLEAR(out);
    PyErr_NoMemory();
done:
    free(arena);
    free(stack);
    PyBuffer_Release(&go);
    PyBuffer_Release(&gb);
    PyBuffer_Release(&wo);
    PyBuffer_Release(&wb);
    PyBuffer_Release(&wt);
    PyBuffer_Release(&ws);
    return out;
}

/* Lexicographic order of key i (bytes blob[offs[i]:offs[i+1]]) against p[0:k]: <0, 0, >0. */
static inline int key_cmp(const uint8_t *blob, const int64_t *offs, int64_t i, const uint8_t *p, Py_ssize_t k) {
    int64_t len = offs[i + 1] - offs[i];
    int64_t m = len < k ? len : k;
    int c = m ? memcmp(blob + offs[i], p, (size_t)m) : 0;
    if (c) return c;
    return len < k ? -1 : len > k ? 1 : 0;
}

static inline int key_starts(const uint8_t *blob, const int64_t *offs, int64_t i, const uint8_t *p, Py_ssize_t k) {
    return offs[i + 1] - offs[i] >= k && memcmp(blob + offs[i], p, (size_t)k) == 0;
}

/* The first key in [a, b) not less than p[0:k] (keys sorted). */
static int64_t key_lower_bound(const uint8_t *blob, const int64_t *offs, int64_t a, int64_t b, const uint8_t *p,
                               Py_ssize_t k) {
    while (a < b) {
        int64_t mid = a + (b - a) / 2;
        if (key_cmp(blob, offs, mid, p, k) < 0) a = mid + 1; else b = mid;
    }
    return a;
}

/* The first key in [a, b) that does not start with p[0:k], where those that do come first. */
static int64_t key_prefix_end(const uint8_t *blob, const int64_t *offs, int64_t a, int64_t b, const uint8_t *p,
                              Py_ssize_t k) {
    while (a < b) {
        int64_t mid = a + (b - a) / 2;
        if (key_starts(blob, offs, mid, p, k)) a = mid + 1; else b = mid;
    }
    return a;
}

/* prefix_bounds(blob, offs, text) -> bytes (int64 triples)
 *   blob, offs int64 [n + 1]: n keys in lexicographic order, key i = blob[offs[i]:offs[i+1]]
 *   text: the literal
 * For k = 1, 2, ... while some key starts with p = text[:k]: (lo_k, eq_k, hi_k), the keys
 * [lo_k, eq_k) equal to p and [lo_k, hi_k) starting with it: literal_walk's two bisects per prefix
 * on Python bytes (``bisect_left`` on the key list, ~18 rich comparisons a search), by memcmp.
 * Fewer triples than len(text): no key starts with the next prefix. */
static PyObject *prefix_bounds(PyObject *self, PyObject *args) {
    Py_buffer bb, ob, tb;
    if (!PyArg_ParseTuple(args, "y*y*y*", &bb, &ob, &tb)) return NULL;
    Py_ssize_t n = ob.len / (Py_ssize_t)sizeof(int64_t) - 1, lo = 0;
    const uint8_t *blob = (const uint8_t *)bb.buf, *p = (const uint8_t *)tb.buf;
    const int64_t *offs = (const int64_t *)ob.buf;
    Py_ssize_t L = tb.len;
    PyObject *res = NULL;
    int64_t *out = NULL;
    if (n < 0 || ob.len != (n + 1) * (Py_ssize_t)sizeof(int64_t) || offs[0] < 0 || offs[n] > bb.len) {
        PyErr_SetString(PyExc_ValueError, "prefix_bounds: offsets out of range");
        goto done;
    }
    out = (int64_t *)malloc((size_t)(L ? L : 1) * 3 * sizeof(int64_t));
    if (!out) { PyErr_NoMemory(); goto done; }
    Py_ssize_t k, rows = 0;
    int64_t hi = n;  /* the keys starting with the previous prefix end here */
    for (k = 1; k <= L; k++) {
        lo = key_lower_bound(blob, offs, lo, hi, p, k);  /* in [lo, hi): every later key is greater */
        if (lo >= hi || !key_starts(blob, offs, lo, p, k)) break;
        int64_t eq = lo;
        while (eq < hi && offs[eq + 1] - offs[eq] == k && key_starts(blob, offs, eq, p, k)) eq++;
        hi = key_prefix_end(blob, offs, eq, hi, p, k);
        out[rows * 3] = lo, out[rows * 3 + 1] = eq, out[rows * 3 + 2] = hi;
        rows++;
    }
    res = as_bytes(out, rows * 3);
done:
    free(out);
    PyBuffer_Release(&bb);
    PyBuffer_Release(&ob);
    PyBuffer_Release(&tb);
    return res;
}

/* prefix_ranges(blob, offs, texts) -> bytes (int64 pairs)
 *   blob, offs: n keys in lexicographic order (prefix_bounds'); texts: a list of m byte strings
 * For each text, (lo, hi): the keys [lo, hi) that start with it ((0, 0): none does). One call for
 * cut_walk.affected_rests' special paths (a prefix_bounds call per path, each every prefix's
 * triple, and a numpy slice per path were ~2% of fresh masks' time over 100 maskbench documents). */
static PyObject *prefix_ranges(PyObject *self, PyObject *args) {
    Py_buffer bb, ob;
    PyObject *texts;
    if (!PyArg_ParseTuple(args, "y*y*O", &bb, &ob, &texts)) return NULL;
    Py_ssize_t n = ob.len / (Py_ssize_t)sizeof(int64_t) - 1;
    const uint8_t *blob = (const uint8_t *)bb.buf;
    const int64_t *offs = (const int64_t *)ob.buf;
    PyObject *res = NULL, *seq = NULL;
    int64_t *out = NULL;
    if (n < 0 || ob.len != (n + 1) * (Py_ssize_t)sizeof(int64_t) || offs[0] < 0 || offs[n] > bb.len) {
        PyErr_SetString(PyExc_ValueError, "prefix_ranges: offsets out of range");
        goto done;
    }
    seq = PySequence_Fast(texts, "prefix_ranges: texts must be a sequence of bytes");
    if (!seq) goto done;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
    out = (int64_t *)malloc((size_t)(m ? m : 1) * 2 * sizeof(int64_t));
    if (!out) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *t = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyBytes_Check(t)) {
            PyErr_SetString(PyExc_TypeError, "prefix_ranges: texts must be bytes");
            goto done;
        }
        const uint8_t *p = (const uint8_t *)PyBytes_AS_STRING(t);
        Py_ssize_t k = PyBytes_GET_SIZE(t);
        int64_t lo = key_lower_bound(blob, offs, 0, n, p, k);
        if (lo >= n || !key_starts(blob, offs, lo, p, k)) {
            out[2 * i] = out[2 * i + 1] = 0;
            continue;
        }
        out[2 * i] = lo, out[2 * i + 1] = key_prefix_end(blob, offs, lo, n, p, k);
    }
    res = as_bytes(out, 2 * m);
done:
    free(out);
    Py_XDECREF(seq);
    PyBuffer_Release(&bb);
    PyBuffer_Release(&ob);
    return res;
}

/* divergence(trans, final, q, r, cap) -> (bytes [256] uint8, depth) or None
 *   trans int32 [S*256] (-1 dead), final uint8 [S]; q, r two states
 * Walks the pairs (a, c) the same byte strings reach from (q, r), up to cap bytes: a pair
 * *diverges* on byte b when exactly one of a, c moves on b, or both do to states of different
 * finality. Returns the bytes some reachable pair diverges on (1 each) and the fewest bytes read
 * to the first divergence (cap + 1: none), or None past 2048 states (the pair table is S*S
 * bytes). A byte string that never takes a diverging byte walks alike from q and r: alive at
 * the same places, accepting at the same places (alike_patch.py). */
static PyObject *divergence(PyObject *self, PyObject *args) {
    Py_buffer tb, fb;
    long long q, r, cap;
    if (!PyArg_ParseTuple(args, "y*y*LLL", &tb, &fb, &q, &r, &cap)) return NULL;
    const int32_t *trans = (const int32_t *)tb.buf;
    const uint8_t *final = (const uint8_t *)fb.buf;
    Py_ssize_t n = fb.len;
    PyObject *result = NULL;
    uint8_t *seen = NULL;
    vec cur = {0}, nxt = {0};
    if (tb.len != n * 1024 || q < 0 || q >= n || r < 0 || r >= n || cap < 0) {
        PyErr_SetString(PyExc_ValueError, "divergence: table sizes or states out of range");
        goto done;
    }
    if (n > 2048) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    seen = (uint8_t *)calloc((size_t)(n * n), 1);
    if (!seen || (q != r && vec_push(&cur, q * n + r) < 0)) {
        PyErr_NoMemory();
        goto done;
    }
    if (q != r) seen[q * n + r] = 1;
    uint8_t diverge[256] = {0};
    long long first = cap + 1;
    for (long long depth = 1; depth <= cap && cur.n; depth++) {
        nxt.n = 0;
        for (Py_ssize_t i = 0; i < cur.n; i++) {
            int64_t a = cur.a[i] / n, c = cur.a[i] % n;
            const int32_t *ra = trans + a * 256, *rc = trans + c * 256;
            for (int b = 0; b < 256; b++) {
                int32_t ta = ra[b], tc = rc[b];
                if (ta < 0 && tc < 0) continue;
                if (ta >= n || tc >= n) {
                    PyErr_SetString(PyExc_ValueError, "divergence: a transition past the last state");
                    goto done;
                }
                if (ta < 0 || tc < 0 || final[ta] != final[tc]) {
                    diverge[b] = 1;
                    if (depth < first) first = depth;
                    continue;
                }
                if (ta == tc) continue;  /* one state from here on: alike */
                int64_t key = (int64_t)ta * n + tc;
                if (!seen[key]) {
                    seen[key] = 1;
                    if (vec_push(&nxt, key) < 0) {
                        PyErr_NoMemory();
                        goto done;
                    }
                }
            }
        }
        vec tmp = cur; cur = nxt; nxt = tmp;
    }
    PyObject *bytes = PyBytes_FromStringAndSize((const char *)diverge, 256);
    if (bytes) result = Py_BuildValue("(NL)", bytes, first);
done:
    free(seen);
    free(cur.a);
    free(nxt.a);
    PyBuffer_Release(&tb);
    PyBuffer_Release(&fb);
    return result;
}

/* holding(rows, width, stride, base, length, parting) -> bytes (int64)
 *   rows/width/stride/base/length: a rest set over the token matrix (as walk_rests reads it);
 *   parting uint8 [256]
 * The indices of the rests that hold a byte marked in parting: the
 * tokens alike_patch walks again (one pass over the vocabulary's bytes, ~1-2 ms on Gemma's, for
 * any set of bytes: a numpy pass per byte was ~1.5-4 ms each). */
static PyObject *holding(PyObject *self, PyObject *args) {
    Py_buffer rows_b, base_b, len_b, part_b;
    long long width, stride;
    if (!PyArg_ParseTuple(args, "y*LLy*y*y*", &rows_b, &width, &stride, &base_b, &len_b, &part_b)) return NULL;
    PyObject *result = NULL;
    int64_t *out = NULL;
    const uint8_t *rows = (const uint8_t *)rows_b.buf, *parting = (const uint8_t *)part_b.buf;
    const int64_t *base = (const int64_t *)base_b.buf;
    const int32_t *length = (const int32_t *)len_b.buf;
    Py_ssize_t n = base_b.len / 8;
    if (len_b.len != 4 * n || part_b.len != 256 || stride <= 0 || width < 0 || rows_b.len < stride * width) {
        PyErr_SetString(PyExc_ValueError, "holding: arrays of the wrong size or dtype");
        goto done;
    }
    out = (int64_t *)malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!out) { PyErr_NoMemory(); goto done; }
    double inv = 1.0 / (double)stride;
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t len = length[i];
        if (base[i] < 0) continue;
        const uint8_t *p = rest_bytes(rows, width, stride, inv, base[i]);
        for (int32_t j = 0; j < len; j++)
            if (parting[p[j]]) {
                out[k++] = i;
                break;
            }
    }
    result = as_bytes(out, k);
done:
    free(out);
    PyBuffer_Release(&rows_b);
    PyBuffer_Release(&base_b);
    PyBuffer_Release(&len_b);
    PyBuffer_Release(&part_b);
    return result;
}

/* walk_ends(trans, q, rows, width, stride, base, length, lo, ends, stops)
 *   every rest of a rest set whose first byte has a transition from q walked to its end or death:
 *   ends[i] = the state after the whole rest, or -2 - (the state before the byte with no
 *   transition) with stops[i] = that byte's offset. Rests that do not start are left as the
 *   caller filled them. (counted_walk.py reads a token's count of characters off the end state of
 *   a counting automaton.) */
static PyObject *walk_ends(PyObject *self, PyObject *args) {
    Py_buffer trans_b, rows_b, base_b, len_b, lo_b, ends_b, stops_b;
    long long q, width, stride;
    if (!PyArg_ParseTuple(args, "y*Ly*LLy*y*y*w*w*", &trans_b, &q, &rows_b, &width, &stride, &base_b, &len_b,
                          &lo_b, &ends_b, &stops_b))
        return NULL;
    PyObject *result = NULL;
    const int32_t *trans = (const int32_t *)trans_b.buf;
    const uint8_t *rows = (const uint8_t *)rows_b.buf;
    const int64_t *base = (const int64_t *)base_b.buf, *lo = (const int64_t *)lo_b.buf;
    const int32_t *length = (const int32_t *)len_b.buf;
    int32_t *ends = (int32_t *)ends_b.buf, *stops = (int32_t *)stops_b.buf;
    Py_ssize_t n = base_b.len / 8, states = trans_b.len / 1024;
    if (len_b.len != 4 * n || ends_b.len != 4 * n || stops_b.len != 4 * n || lo_b.len != 257 * 8 ||
        trans_b.len != 1024 * states || q < 0 || q >= states || stride <= 0 || width < 0 || lo[256] > n) {
        PyErr_SetString(PyExc_ValueError, "walk_ends: arrays of the wrong size or dtype");
        goto done;
    }
    {
        double inv = 1.0 / (double)stride;
        const int32_t *row = trans + q * 256;
        for (int b = 0; b < 256; b++) {
            if (row[b] < 0) continue;
            for (int64_t i = lo[b]; i < lo[b + 1]; i++) {
                const uint8_t *s = rest_bytes(rows, width, stride, inv, base[i]);
                int32_t len = length[i], st = (int32_t)q, j = 0;
                for (; j < len; j++) {
                    int32_t nx = trans[st * 256 + s[j]];
                    if (nx < 0) break;
                    st = nx;
                }
                if (j == len) {
                    ends[i] = st;
                } else {
                    ends[i] = -2 - st;
                    stops[i] = j;
                }
            }
        }
        result = Py_None;
        Py_INCREF(result);
    }
done:
    PyBuffer_Release(&trans_b);
    PyBuffer_Release(&rows_b);
    PyBuffer_Release(&base_b);
    PyBuffer_Release(&len_b);
    PyBuffer_Release(&lo_b);
    PyBuffer_Release(&ends_b);
    PyBuffer_Release(&stops_b);
    return result;
}

/* count_rows(ends, tid, nph, tbase, cap, out)
 *   out ([cap + 1, words] int32, zeroed by the caller): row m holds the tokens tid[i] whose walk of
 *   a counting automaton (walk_ends) ended inside the body, state ends[i] in [0, tbase) = count
 *   c * nph + phase, having started at most m characters (c, plus one where the phase is inside a
 *   character): one pass setting each token's bit in the row of its count, then each row OR-ed
 *   into the next (counted_walk._unit). */
static PyObject *count_rows(PyObject *self, PyObject *args) {
    Py_buffer ends_b, tid_b, out_b;
    long long nph, tbase, cap;
    if (!PyArg_ParseTuple(args, "y*y*LLLw*", &ends_b, &tid_b, &nph, &tbase, &cap, &out_b)) return NULL;
    PyObject *result = NULL;
    const int32_t *ends = (const int32_t *)ends_b.buf;
    const int64_t *tid = (const int64_t *)tid_b.buf;
    uint32_t *out = (uint32_t *)out_b.buf;
    Py_ssize_t n = ends_b.len / 4;
    Py_ssize_t words = cap >= 0 ? out_b.len / 4 / (cap + 1) : 0;
    if (tid_b.len != 8 * n || nph <= 0 || cap < 0 || words <= 0 || out_b.len != 4 * words * (cap + 1)) {
        PyErr_SetString(PyExc_ValueError, "count_rows: arrays of the wrong size or dtype");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t e = ends[i];
        if (e < 0 || e >= tbase) continue;
        int64_t m = e / nph + (e % nph != 0), t = tid[i];
        if (m > cap || t < 0 || t >= 32 * (int64_t)words) {
            PyErr_SetString(PyExc_ValueError, "count_rows: a count past the cap or a token past the row");
            goto done;
        }
        out[m * words + (t >> 5)] |= 1u << (t & 31);
    }
    for (int64_t m = 1; m <= cap; m++)
        for (Py_ssize_t w = 0; w < words; w++) out[m * words + w] |= out[(m - 1) * words + w];
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&ends_b);
    PyBuffer_Release(&tid_b);
    PyBuffer_Release(&out_b);
    return result;
}

/* pair_map(trans_a, final_a, a0, trans_b, final_b, b0)
 *   the states of DFA A reachable from a0 paired with those of B reachable from b0 by the byte
 *   strings that reach them, as int32 bytes [states of A] (-1: not reached), when the pairing is
 *   a function that relates states alike in finality and in which bytes have a transition (then
 *   the sub-automata from a0 and b0 accept the same strings, state by state); None when it is not
 *   (a state of A met with two states of B, or a pair that differs). */
static PyObject *pair_map(PyObject *self, PyObject *args) {
    Py_buffer ta_b, fa_b, tb_b, fb_b;
    long long a0, b0;
    if (!PyArg_ParseTuple(args, "y*y*Ly*y*L", &ta_b, &fa_b, &a0, &tb_b, &fb_b, &b0)) return NULL;
    PyObject *result = NULL;
    int32_t *map = NULL, *queue = NULL;
    const int32_t *ta = (const int32_t *)ta_b.buf, *tb = (const int32_t *)tb_b.buf;
    const uint8_t *fa = (const uint8_t *)fa_b.buf, *fb = (const uint8_t *)fb_b.buf;
    Py_ssize_t na = fa_b.len, nb = fb_b.len;
    if (ta_b.len != 1024 * na || tb_b.len != 1024 * nb || a0 < 0 || a0 >= na || b0 < 0 || b0 >= nb) {
        PyErr_SetString(PyExc_ValueError, "pair_map: arrays of the wrong size or dtype");
        goto done;
    }
    map = (int32_t *)malloc((size_t)na * sizeof(int32_t));
    queue = (int32_t *)malloc((size_t)na * sizeof(int32_t));
    if (!map || !queue) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < na; i++) map[i] = -1;
    {
        Py_ssize_t head = 0, tail = 0;
        int ok = 1;
        map[a0] = (int32_t)b0;
        queue[tail++] = (int32_t)a0;
        while (ok && head < tail) {
            int32_t a = queue[head++], b = map[a];
            if (!fa[a] != !fb[b]) { ok = 0; break; }
            const int32_t *ra = ta + (Py_ssize_t)a * 256, *rb = tb + (Py_ssize_t)b * 256;
            for (int x = 0; x < 256; x++) {
                int32_t u = ra[x], v = rb[x];
                if ((u < 0) != (v < 0) || (u >= 0 && (u >= na || v >= nb))) { ok = 0; break; }
                if (u < 0) continue;
                if (map[u] < 0) {
                    map[u] = v;
                    queue[tail++] = u;
                } else if (map[u] != v) { ok = 0; break; }
            }
        }
        if (ok) result = PyBytes_FromStringAndSize((const char *)map, na * (Py_ssize_t)sizeof(int32_t));
        else { result = Py_None; Py_INCREF(result); }
    }
done:
    free(map);
    free(queue);
    PyBuffer_Release(&ta_b);
    PyBuffer_Release(&fa_b);
    PyBuffer_Release(&tb_b);
    PyBuffer_Release(&fb_b);
    return result;
}

static PyMethodDef methods[] = {
    {"reach", reach, METH_VARARGS, "How deep every string a slice keeps alive stays alive from a DFA state."},
    {"walk_rests", walk_rests, METH_VARARGS, "One DFA state over a rest set (rest_walk.walk's loop)."},
    {"walk_trie", walk_trie, METH_VARARGS, "One DFA state over the token trie (trie_walk.walk_vocabulary's loop)."},
    {"set_bits", set_bits, METH_VARARGS, "OR token ids into a packed int32 bitmask row."},
    {"csr", csr, METH_VARARGS, "Crossings grouped by leftover (a stable counting sort)."},
    {"gather", gather, METH_VARARGS, "Mark the walked rests (or their tokens' bits) behind allowed leftovers."},
    {"gather_dense", gather_dense, METH_VARARGS, "gather by one pass over the crossings (no index)."},
    {"gather_ids", gather_ids, METH_VARARGS, "gather into a bitmask row from token ids looked up once per walk."},
    {"holding", holding, METH_VARARGS, "The rests that hold one of some bytes (alike_patch)."},
    {"divergence", divergence, METH_VARARGS, "The bytes on which two DFA states' walks can part (alike_patch)."},
    {"special_ways", special_ways, METH_VARARGS, "A cut DFA's tainted states' removed bytes and ways on, by state (cut_walk)."},
    {"special_paths", special_paths, METH_VARARGS, "The byte strings from a cut DFA state to its special places (cut_walk)."},
    {"prefix_ranges", prefix_ranges, METH_VARARGS, "Where the keys starting with each of some byte strings lie in a sorted key list."},
    {"prefix_bounds", prefix_bounds, METH_VARARGS, "Where the keys equal to and starting with each prefix of a literal lie in a sorted key list."},
    {"walk_ends", walk_ends, METH_VARARGS, "Where each rest of a set ends (or dies) from a DFA state (counted_walk)."},
    {"count_rows", count_rows, METH_VARARGS, "Per-count unions of the tokens a counting walk kept (counted_walk)."},
    {"pair_map", pair_map, METH_VARARGS, "The states of one DFA paired with another's alike ones, or None (counted_walk)."},
    {"leftovers", leftovers, METH_VARARGS, "The rest set of the leftovers after crossings (RestSet.of)."},
    {"walk_trie_leftovers", walk_trie_leftovers, METH_VARARGS, "walk_trie, its crossings less the tokens inside, and their leftovers."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_walkc", NULL, -1, methods};

PyMODINIT_FUNC PyInit__walkc(void) { return PyModule_Create(&module); }
