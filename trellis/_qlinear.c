/* y = x @ W.T for a weight stored as int8 blocks: W[n, k] = d[n, k / G] * q[n, k], exactly.
 *
 * Why: a decode step of Gemma 3 270M on the 2-core CPU is mostly its LM head, a 262,144 x 640
 * float32 matrix (671 MB) read once per forward: F.linear took 56 ms for one row and the best
 * BLAS path 22-49 ms for 2-8 rows (AMD EPYC Zen 4 VM, 2 threads, 2026-11-26), against ~7 ms for
 * all 18 decoder layers together. The model trellis ships is a GGUF whose token embedding (tied
 * to the LM head) is Q8_0: every block of 32 weights is an fp16 scale times 32 int8 values, so
 * the float32 copy the converter writes holds exactly those products. Reading the int8 values
 * and the scales instead moves 4x fewer bytes per forward, and multiplying them back in float32
 * gives the same weights bit for bit (an fp16 times an int8 is exact in float32; the Python side
 * checks every weight before it is used, trellis/kernels.py). Only the summation order differs
 * from the BLAS, as it does between the BLAS kernels trellis already chooses among.
 *
 * Layout: x [B, K] float32, q [N, K] int8, d [N, K / G] float32, y [B, N] float32, all row-major
 * and contiguous; K and G multiples of 16. The output rows are split across ``threads`` pthreads;
 * the GIL is released while they run.
 *
 * Tiles: NB output rows x RB input rows per pass, so each converted weight vector feeds RB fused
 * multiply-adds and each pass has NB * RB independent accumulators (the FMA latency is hidden
 * even for one input row). AVX-512 and AVX2+FMA versions are chosen at run time; a plain C loop
 * is the fallback (other CPUs, other compilers).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    const float *x;
    const int8_t *q;
    const float *d;
    float *y;
    int64_t B, K, G, N, n0, n1;
    int isa; /* 2: AVX-512, 1: AVX2+FMA, 0: plain C */
} job;

/* ------------------------------------------------------------------------------ plain C */
static void run_plain(const job *j) {
    const int64_t K = j->K, G = j->G, N = j->N, nb = K / G;
    for (int64_t n = j->n0; n < j->n1; n++) {
        const int8_t *qn = j->q + n * K;
        const float *dn = j->d + n * nb;
        for (int64_t r = 0; r < j->B; r++) {
            const float *xr = j->x + r * K;
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++) acc += ((float)qn[k] * dn[k / G]) * xr[k];
            j->y[r * N + n] = acc;
        }
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_X86 1

/* Weights are read once per forward, from memory, and the kernel waited on it: Gemma's 1024 x 640
   int8 q_proj took 43 us with its bytes in the caches and 337 us from memory (one thread; ~2 GB/s
   where one core streams 21 GB/s: few cache misses in flight), its 262,144 x 640 LM head read at
   ~12 GB/s on two. So the rows PF_ROWS ahead of each tile are asked for while it runs (one
   prefetch per row and 64 bytes; a prefetch past the end of the weights is a hint, never a fault),
   and the first PF_ROWS rows before the first tile. Interleaved A/B, cold caches, Zen 4 VM,
   2026-11-29, one input row: LM head 22.1 -> 18.7 ms (2 threads), q_proj 194 -> 164 us, gate_proj
   259 -> 221 us; products unchanged (only the loads' timing is). 64 rows ahead: no better. */
#define PF_ROWS 16
#define PREFETCH_ROW(j, row, k, nb)                                                               \
    if (((k) & 63) == 0) {                                                                         \
        _mm_prefetch((const char *)((j)->q + (row) * (j)->K + (k)), _MM_HINT_T0);                  \
        if ((k) == 0) _mm_prefetch((const char *)((j)->d + (row) * (nb)), _MM_HINT_T0);            \
    }

/* One tile: NB output rows x RB input rows, accumulated over K in steps of 16 int8 weights.
   Each instruction set supplies its vector type V, ZERO, the scaled weights of one step
   (WEIGHTS: from the 16 raw int8 and the block scale, declared once per output row) and the
   multiply-add of one input row (FMA), and the horizontal sum HSUM. */
#define TILE(PREFIX, TARGET, V, ZERO, SET1, WEIGHTS, FMA, HSUM, NB, RB)                           \
    static __attribute__((target(TARGET))) void PREFIX##_##NB##_##RB(const job *j, int64_t n,       \
                                                                      int64_t r) {                 \
        const int64_t K = j->K, G = j->G, nb = K / G;                                              \
        V acc[NB][RB];                                                                             \
        for (int a = 0; a < NB; a++)                                                               \
            for (int b = 0; b < RB; b++) acc[a][b] = ZERO();                                       \
        for (int64_t k = 0; k < K; k += 16) {                                                      \
            for (int a = 0; a < NB; a++) {                                                         \
                PREFETCH_ROW(j, n + a + PF_ROWS, k, nb)                                            \
                const __m128i raw = _mm_loadu_si128((const __m128i *)(j->q + (n + a) * K + k));    \
                const V s = SET1(j->d[(n + a) * nb + k / G]);                                      \
                WEIGHTS(raw, s)                                                                    \
                for (int b = 0; b < RB; b++) FMA(acc[a][b], j->x + (r + b) * K + k)                \
            }                                                                                      \
        }                                                                                          \
        for (int a = 0; a < NB; a++)                                                               \
            for (int b = 0; b < RB; b++) j->y[(r + b) * j->N + n + a] = HSUM(acc[a][b]);           \
    }

/* ------------------------------------------------------------------------------ AVX-512 */
#define W512(raw, s) const __m512 w = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(raw)), s);
#define FMA512(acc, xb) acc = _mm512_fmadd_ps(w, _mm512_loadu_ps(xb), acc);
#define TILE512(NB, RB) TILE(tile512, "avx512f", __m512, _mm512_setzero_ps, _mm512_set1_ps, W512, FMA512, \
                             _mm512_reduce_add_ps, NB, RB)
TILE512(2, 8)
TILE512(2, 7)
TILE512(2, 6)
TILE512(2, 5)
TILE512(4, 4)
TILE512(4, 3)
TILE512(4, 2)
TILE512(4, 1)
TILE512(1, 8)
TILE512(1, 7)
TILE512(1, 6)
TILE512(1, 5)
TILE512(1, 4)
TILE512(1, 3)
TILE512(1, 2)
TILE512(1, 1)

typedef void (*tile_fn)(const job *, int64_t, int64_t);
/* AVX-512 has 32 vector registers: up to 8 input rows per pass (2 x 8 accumulators) */
static const tile_fn T512_N[9] = {NULL, tile512_4_1, tile512_4_2, tile512_4_3, tile512_4_4,
                                  tile512_2_5, tile512_2_6, tile512_2_7, tile512_2_8};
static const int T512_NB[9] = {0, 4, 4, 4, 4, 2, 2, 2, 2};
static const tile_fn T512_1[9] = {NULL, tile512_1_1, tile512_1_2, tile512_1_3, tile512_1_4,
                                  tile512_1_5, tile512_1_6, tile512_1_7, tile512_1_8};

/* ------------------------------------------------------------------------------ AVX2 + FMA */
static inline __attribute__((target("avx2,fma"))) float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 16 int8 weights are two 8-wide halves */
#define W256(raw, s)                                                                              \
    const __m256 lo = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw)), s);            \
    const __m256 hi = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(raw, 8))), s);
#define FMA256(acc, xb)                                                                           \
    {                                                                                             \
        acc = _mm256_fmadd_ps(lo, _mm256_loadu_ps(xb), acc);                                      \
        acc = _mm256_fmadd_ps(hi, _mm256_loadu_ps((xb) + 8), acc);                                \
    }
#define TILE256(NB, RB) TILE(tile256, "avx2,fma", __m256, _mm256_setzero_ps, _mm256_set1_ps, W256, FMA256, \
                             hsum256, NB, RB)
TILE256(2, 4)
TILE256(2, 3)
TILE256(2, 2)
TILE256(4, 1)
TILE256(1, 4)
TILE256(1, 3)
TILE256(1, 2)
TILE256(1, 1)

static const tile_fn T256_N[5] = {NULL, tile256_4_1, tile256_2_2, tile256_2_3, tile256_2_4};
static const int T256_NB[5] = {0, 4, 2, 2, 2};
static const tile_fn T256_1[5] = {NULL, tile256_1_1, tile256_1_2, tile256_1_3, tile256_1_4};

static void run_tiles(const job *j) {
    const int64_t most = j->isa == 2 ? 8 : 4; /* input rows per pass over the weights */
    /* the first PF_ROWS rows, which no tile asks for ahead (a small weight is mostly these) */
    const int64_t end = j->n0 + PF_ROWS < j->n1 ? j->n0 + PF_ROWS : j->n1;
    for (const char *p = (const char *)(j->q + j->n0 * j->K); p < (const char *)(j->q + end * j->K); p += 64)
        _mm_prefetch(p, _MM_HINT_T0);
    for (int64_t r = 0; r < j->B; r += most) {
        const int rb = (int)(j->B - r < most ? j->B - r : most);
        const tile_fn wide = j->isa == 2 ? T512_N[rb] : T256_N[rb];
        const tile_fn one = j->isa == 2 ? T512_1[rb] : T256_1[rb];
        const int64_t step = j->isa == 2 ? T512_NB[rb] : T256_NB[rb];
        int64_t n = j->n0;
        for (; n + step <= j->n1; n += step) wide(j, n, r);
        for (; n < j->n1; n++) one(j, n, r);
    }
}
#else
#define HAVE_X86 0
#endif

static int isa = 0; /* the best this CPU has (set at import) */

static void *run_job(void *arg) {
    const job *j = (const job *)arg;
#if HAVE_X86
    if (j->isa > 0) {
        run_tiles(j);
        return NULL;
    }
#endif
    run_plain(j);
    return NULL;
}

static int detect_isa(void) {
#if HAVE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
#endif
    return 0;
}

static int get_buffer(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t need, const char *what) {
    if (PyObject_GetBuffer(obj, view, writable ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS : PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->len < need) {
        PyErr_Format(PyExc_ValueError, "%s: buffer of %zd bytes, need %zd", what, view->len, need);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* linear(x, q, d, y, B, K, N, G, threads, isa): y[B, N] = x[B, K] @ (d * q)[N, K].T.
 * ``isa``: -1 the best this CPU has, else 0 plain C, 1 AVX2, 2 AVX-512 (tests compare them). */
static PyObject *linear(PyObject *self, PyObject *args) {
    PyObject *xo, *qo, *d_o, *yo;
    Py_ssize_t B, K, N, G, threads;
    int want = -1;
    if (!PyArg_ParseTuple(args, "OOOOnnnnn|i", &xo, &qo, &d_o, &yo, &B, &K, &N, &G, &threads, &want)) return NULL;
    if (B < 1 || K < 16 || N < 1 || G < 16 || K % 16 || G % 16 || K % G) {
        PyErr_SetString(PyExc_ValueError, "linear: need B, N >= 1 and K, G multiples of 16 with G dividing K");
        return NULL;
    }
    int use = want < 0 ? isa : want;
    if (use > isa) {
        PyErr_SetString(PyExc_ValueError, "linear: this CPU lacks the requested instruction set");
        return NULL;
    }
    Py_buffer xb, qb, db, yb;
    if (get_buffer(xo, &xb, 0, B * K * 4, "x") < 0) return NULL;
    if (get_buffer(qo, &qb, 0, N * K, "q") < 0) goto fail_x;
    if (get_buffer(d_o, &db, 0, N * (K / G) * 4, "d") < 0) goto fail_q;
    if (get_buffer(yo, &yb, 1, B * N * 4, "y") < 0) goto fail_d;
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    /* a thread per 2M weights at least: starting one costs ~20-40 us, a 640 x 640 product on one
     * core about as much (a decode step of Gemma has 122 such products) */
    const int64_t most = (int64_t)N * K >> 21;
    if (threads > most) threads = most > 0 ? most : 1;
    job jobs[64];
    pthread_t tids[64];
    int started[64] = {0};
    const int64_t chunk = ((N + threads - 1) / threads + 3) / 4 * 4;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t t = 0; t < threads; t++) {
        job *jb = &jobs[t];
        jb->x = (const float *)xb.buf;
        jb->q = (const int8_t *)qb.buf;
        jb->d = (const float *)db.buf;
        jb->y = (float *)yb.buf;
        jb->B = B, jb->K = K, jb->G = G, jb->N = N, jb->isa = use;
        jb->n0 = t * chunk < N ? t * chunk : N;
        jb->n1 = (t + 1) * chunk < N ? (t + 1) * chunk : N;
        if (t > 0 && jb->n0 < jb->n1) started[t] = pthread_create(&tids[t], NULL, run_job, jb) == 0;
        if (t > 0 && jb->n0 < jb->n1 && !started[t]) run_job(jb); /* no thread: do it here */
    }
    run_job(&jobs[0]);
    for (Py_ssize_t t = 1; t < threads; t++)
        if (started[t]) pthread_join(tids[t], NULL);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&yb);
    PyBuffer_Release(&db);
    PyBuffer_Release(&qb);
    PyBuffer_Release(&xb);
    Py_RETURN_NONE;
fail_d:
    PyBuffer_Release(&db);
fail_q:
    PyBuffer_Release(&qb);
fail_x:
    PyBuffer_Release(&xb);
    return NULL;
}

/* One block of g weights as s * q, s = amax / m: 1 (q filled) if every w / s is an integer in
 * [-127, 127] whose product with s in float32 is w exactly (the kernels' own product). The
 * integer comes from w * (1 / s) rounded by the 1.5 * 2^23 trick (round-half-even, no libm, SSE2
 * vectorises it); an inexact reciprocal can only make the product check fail, never pass. */
static float block_amax(const float *w, int64_t g) {
    float amax = 0.0f; /* a NaN never compares greater: caught by the caller's finiteness check */
    for (int64_t i = 0; i < g; i++) amax = fmaxf(amax, fabsf(w[i]));
    return amax;
}

static int block_as(const float *w, int64_t g, float amax, int m, int8_t *q, float *d) {
    const float s = amax / (float)m, inv = 1.0f / s, magic = 12582912.0f;
    float r[64];
    int bad = 0;
    for (int64_t i = 0; i < g; i++) {
        r[i] = (w[i] * inv + magic) - magic;
        bad |= (fabsf(r[i]) > 127.0f) | (r[i] * s != w[i]);
    }
    if (bad) return 0;
    for (int64_t i = 0; i < g; i++) q[i] = (int8_t)r[i];
    *d = s;
    return 1;
}

/* blocks(w, q, d, n, k, g) -> bool: w [n, k] float32 as int8 blocks of g (q [n, k] int8, d [n, k / g]
 * float32), trellis.kernels.int8_blocks' search (see there): the top integers of the GGUF block
 * formats first, every other one for the blocks they leave if those are at most 1% of all. */
static PyObject *blocks(PyObject *self, PyObject *args) {
    PyObject *wo, *qo, *d_o;
    Py_ssize_t n, k, g;
    if (!PyArg_ParseTuple(args, "OOOnnn", &wo, &qo, &d_o, &n, &k, &g)) return NULL;
    if (n < 1 || k < 1 || g < 1 || g > 64 || k % g) {
        PyErr_SetString(PyExc_ValueError, "blocks: need n, k >= 1 and 1 <= g <= 64 dividing k");
        return NULL;
    }
    Py_buffer wb, qb, db;
    if (get_buffer(wo, &wb, 0, n * k * 4, "w") < 0) return NULL;
    if (get_buffer(qo, &qb, 1, n * k, "q") < 0) {
        PyBuffer_Release(&wb);
        return NULL;
    }
    if (get_buffer(d_o, &db, 1, n * (k / g) * 4, "d") < 0) {
        PyBuffer_Release(&qb);
        PyBuffer_Release(&wb);
        return NULL;
    }
    static const int first[5] = {127, 16, 8, 32, 31};
    const int64_t nblocks = (int64_t)n * (k / g), allowed = nblocks / 100;
    int64_t *left = (int64_t *)malloc((size_t)(allowed + 1) * sizeof(int64_t));
    int64_t nleft = 0;
    int result = left != NULL;
    const float *w = (const float *)wb.buf;
    int8_t *q = (int8_t *)qb.buf;
    float *d = (float *)db.buf;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t b = 0; result && b < nblocks; b++) {
        const float *wbk = w + b * g;
        const float amax = block_amax(wbk, g);
        if (amax == 0.0f) {
            for (int64_t i = 0; i < g; i++) q[b * g + i] = 0;
            d[b] = 0.0f;
            continue;
        }
        if (!(amax < 3.4e38f)) { /* inf or nan */
            result = 0;
            break;
        }
        int done = 0;
        for (int c = 0; c < 5 && !done; c++) done = block_as(wbk, g, amax, first[c], q + b * g, d + b);
        if (done) continue;
        if (nleft == allowed) {
            result = 0; /* not a block format: the search over every integer would be slow and vain */
            break;
        }
        left[nleft++] = b;
    }
    for (int64_t t = 0; result && t < nleft; t++) {
        const int64_t b = left[t];
        const float *wbk = w + b * g;
        const float amax = block_amax(wbk, g);
        int done = 0;
        for (int m = 126; m >= 1 && !done; m--)
            if (m != 16 && m != 8 && m != 32 && m != 31) done = block_as(wbk, g, amax, m, q + b * g, d + b);
        result = done;
    }
    Py_END_ALLOW_THREADS
    free(left);
    PyBuffer_Release(&db);
    PyBuffer_Release(&qb);
    PyBuffer_Release(&wb);
    return PyBool_FromLong(result);
}

static PyObject *best_isa(PyObject *self, PyObject *args) { return PyLong_FromLong(isa); }

static PyMethodDef methods[] = {
    {"linear", linear, METH_VARARGS, "y[B, N] = x[B, K] @ (d * q)[N, K].T for int8 blocks q with float scales d."},
    {"blocks", blocks, METH_VARARGS, "w [n, k] float32 as int8 blocks of g: fills q and d, True if exact."},
    {"isa", best_isa, METH_NOARGS, "2: AVX-512, 1: AVX2+FMA, 0: plain C."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_qlinear", NULL, -1, methods};

PyMODINIT_FUNC PyInit__qlinear(void) {
    isa = detect_isa();
    return PyModule_Create(&module);
}
