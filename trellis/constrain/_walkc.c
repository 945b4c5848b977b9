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

/* walk_trie(trans, final, q, byte, depth, skip, tlo, thi, end_lo, end_tok, follow, inside, levels)
 *   the token trie in preorder: per node its edge byte (uint8), depth (int32, 1 = a first byte),
 *   skip (int32: the node after its subtree), lexicographic token run [tlo, thi) (int64), and the
 *   tokens that end at it: end_tok[end_lo[i]:end_lo[i+1]] (rest indices, int64); levels: the
 *   greatest depth
 * Writes inside[t] = 1 for the tokens the DFA survives from q; returns (lo, hi, j) as int64 bytes:
 * the runs of tokens that can end the terminal after j bytes (the next byte allowed by follow), by
 * j, then in lexicographic order (trie_walk.walk_vocabulary's order). A dead node's subtree is
 * skipped in one jump. */
static PyObject *walk_trie(PyObject *self, PyObject *args) {
    Py_buffer trans_b, final_b, byte_b, depth_b, skip_b, tlo_b, thi_b, elo_b, etok_b, inside_b;
    PyObject *follow_o;
    long long q, dtop;
    if (!PyArg_ParseTuple(args, "y*y*Ly*y*y*y*y*y*y*Ow*L", &trans_b, &final_b, &q, &byte_b, &depth_b, &skip_b,
                          &tlo_b, &thi_b, &elo_b, &etok_b, &follow_o, &inside_b, &dtop))
        return NULL;
    PyObject *result = NULL;
    Py_buffer follow_b;
    int have_follow = 0;
    vec node = {0}, jv = {0};
    int64_t *jorder = NULL, *out = NULL;
    int32_t *stack = NULL;
    if (follow_o != Py_None) {
        if (PyObject_GetBuffer(follow_o, &follow_b, PyBUF_SIMPLE) < 0) goto done;
        have_follow = 1;
    }
    {
        const int32_t *trans = (const int32_t *)trans_b.buf;
        const uint8_t *final = (const uint8_t *)final_b.buf;
        const uint8_t *byte = (const uint8_t *)byte_b.buf;
        const int32_t *depth = (const int32_t *)depth_b.buf;
        const int32_t *skip = (const int32_t *)skip_b.buf;
        const int64_t *tlo = (const int64_t *)tlo_b.buf;
        const int64_t *thi = (const int64_t *)thi_b.buf;
        const int64_t *end_lo = (const int64_t *)elo_b.buf;
        const int64_t *end_tok = (const int64_t *)etok_b.buf;
        const uint8_t *follow = have_follow ? (const uint8_t *)follow_b.buf : NULL;
        uint8_t *inside = (uint8_t *)inside_b.buf;
        Py_ssize_t nodes = byte_b.len, states = final_b.len;
        if (depth_b.len != 4 * nodes || skip_b.len != 4 * nodes || tlo_b.len != 8 * nodes || thi_b.len != 8 * nodes ||
            elo_b.len != 8 * (nodes + 1) || trans_b.len != 1024 * states || q < 0 || q >= states || dtop < 0 ||
            (have_follow && follow_b.len != 256)) {
            PyErr_SetString(PyExc_ValueError, "walk_trie: arrays of the wrong size or dtype");
            goto done;
        }
        int32_t dmax = 0;
        stack = (int32_t *)malloc(((size_t)dtop + 1) * sizeof(int32_t));
        if (!stack) {
            PyErr_NoMemory();
            goto done;
        }
        stack[0] = (int32_t)q;
        for (Py_ssize_t i = 0; i < nodes;) {
            int32_t d = depth[i];
            int32_t ps = stack[d - 1];
            uint8_t b = byte[i];
            if (d >= 2 && final[ps] && (!follow || follow[b])) {
                if (vec_push(&node, i) < 0 || vec_push(&jv, d - 1) < 0) {
                    PyErr_NoMemory();
                    goto done;
                }
                if (d - 1 > dmax) dmax = d - 1;
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
        jorder = counting_order(jv.a, jv.n, (int64_t)dmax + 1, 0);
        out = (int64_t *)malloc((size_t)(3 * jv.n + 1) * sizeof(int64_t));
        if (!jorder || !out) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t t = 0; t < jv.n; t++) {
            int64_t i = node.a[jorder[t]];
            out[t] = tlo[i];
            out[jv.n + t] = thi[i];
            out[2 * jv.n + t] = jv.a[jorder[t]];
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
    if (have_follow) PyBuffer_Release(&follow_b);
    PyBuffer_Release(&trans_b);
    PyBuffer_Release(&final_b);
    PyBuffer_Release(&byte_b);
    PyBuffer_Release(&depth_b);
    PyBuffer_Release(&skip_b);
    PyBuffer_Release(&tlo_b);
    PyBuffer_Release(&thi_b);
    PyBuffer_Release(&elo_b);
    PyBuffer_Release(&etok_b);
    PyBuffer_Release(&inside_b);
    return result;
}

static PyMethodDef methods[] = {
    {"walk_rests", walk_rests, METH_VARARGS, "One DFA state over a rest set (rest_walk.walk's loop)."},
    {"walk_trie", walk_trie, METH_VARARGS, "One DFA state over the token trie (trie_walk.walk_vocabulary's loop)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_walkc", NULL, -1, methods};

PyMODINIT_FUNC PyInit__walkc(void) { return PyModule_Create(&module); }
