/* FP32 -> BF16 stochastic rounding in one pass: the kernel behind xlamigrate_runtime.rounding
 * on CPU. Built on first use by runtime/xlamigrate_runtime/native/__init__.py with the system C
 * compiler and loaded with ctypes; no torch headers, no Python API.
 *
 * The rule (as the eager form): add a uniform 16-bit integer to the fp32 bit pattern, keep the
 * top 16 bits. NaN becomes 0x7FC0 (what torch's own cast gives), inf and -0 stay.
 *
 * The noise is counter-based, so a result depends only on the key and on each element's place,
 * never on how the work is split between threads or on the instruction set used:
 *   element e (its index in the call, each tensor starting at a multiple of 16):
 *   c = (e / 16) * 8 + e % 8, a 64-bit counter;
 *   h = fmix32((uint32)c * mul + add + (uint32)(c >> 32) * 0x9E3779B9)   (murmur3's finaliser)
 *   noise = e % 16 < 8 ? h & 0xFFFF : h >> 16
 * `mul` (odd) and `add` are drawn per call from the caller's torch generator. fmix32 is a
 * bijection, so within a call no two elements of one half share a hash input.
 */
#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) || defined(_M_X64)
#define XM_X86 1
#include <immintrin.h>
#endif

typedef struct {
    const uint32_t *source; /* fp32 bit patterns, contiguous */
    uint16_t *destination;  /* bf16 bit patterns, contiguous */
    uint64_t count;
    uint64_t first; /* the noise index of source[0]: a multiple of 16 */
} xm_piece;

#define XM_GOLDEN 0x9E3779B9u
#define XM_BF16_NAN 0x7FC0u
#define XM_MIN_PER_THREAD (1u << 15) /* as ATen's grain size */
#define XM_MIN_STREAMED (1u << 22)   /* elements: 8 MiB of output, well past a core's L2 */
#define XM_MAX_THREADS 256

static inline uint32_t fmix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    return h;
}

static inline uint16_t round_one(uint32_t bits, uint32_t noise) {
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return XM_BF16_NAN;
    return (uint16_t)((bits + noise) >> 16); /* no overflow: the largest non-NaN is 0xFF800000 */
}

static inline uint32_t noise_of(uint64_t e, uint32_t mul, uint32_t add) {
    uint64_t c = (e >> 4) * 8 + (e & 7);
    uint32_t h = fmix32((uint32_t)c * mul + add + (uint32_t)(c >> 32) * XM_GOLDEN);
    return (e & 8) ? h >> 16 : h & 0xFFFFu;
}

/* Elements [begin, end) of the piece, one at a time: any architecture, and the edges. */
static void round_scalar(const xm_piece *piece, uint64_t begin, uint64_t end, uint32_t mul,
                         uint32_t add) {
    for (uint64_t i = begin; i < end; i++)
        piece->destination[i] = round_one(piece->source[i], noise_of(piece->first + i, mul, add));
}

#ifdef XM_X86
__attribute__((target("avx2"))) static inline __m256i fmix32x8(__m256i h) {
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
    h = _mm256_mullo_epi32(h, _mm256_set1_epi32((int)0x85EBCA6Bu));
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 13));
    h = _mm256_mullo_epi32(h, _mm256_set1_epi32((int)0xC2B2AE35u));
    return _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
}

__attribute__((target("avx2"))) static inline __m256i round_x8(__m256i bits, __m256i noise) {
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, noise), 16);
    __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF));
    __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7F800000));
    return _mm256_blendv_epi8(rounded, _mm256_set1_epi32((int)XM_BF16_NAN), nan);
}

/* Blocks of 16 from `begin` (its noise index a multiple of 16) while the counter's high word
 * stays the same; returns where it stopped. `stream`: write around the cache (large outputs,
 * 32-byte aligned destination), which spares reading the destination lines in first. */
__attribute__((target("avx2"))) static uint64_t round_avx2(const xm_piece *piece, uint64_t begin,
                                                           uint64_t end, uint32_t mul,
                                                           uint32_t add, int stream) {
    uint64_t c = ((piece->first + begin) >> 4) * 8;
    uint64_t blocks = (end - begin) / 16;
    uint64_t to_wrap = ((c | 0xFFFFFFFFull) - c + 1) / 8; /* blocks before the high word turns */
    if (blocks > to_wrap) blocks = to_wrap;
    /* the hash input (c + lane) * mul + offset grows by 8 * mul per block: no multiply */
    const __m256i offset = _mm256_set1_epi32((int)(add + (uint32_t)(c >> 32) * XM_GOLDEN));
    const __m256i lanes = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)c),
                                           _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i input = _mm256_add_epi32(_mm256_mullo_epi32(lanes, _mm256_set1_epi32((int)mul)),
                                     offset);
    const __m256i step = _mm256_set1_epi32((int)(8u * mul));
    const __m256i low_half = _mm256_set1_epi32(0xFFFF);
    const uint32_t *source = piece->source + begin;
    uint16_t *destination = piece->destination + begin;
    stream = stream && ((uintptr_t)destination & 31) == 0;
    for (uint64_t b = 0; b < blocks; b++) {
        __m256i h = fmix32x8(input);
        input = _mm256_add_epi32(input, step);
        __m256i low = _mm256_loadu_si256((const __m256i *)(source + 16 * b));
        __m256i high = _mm256_loadu_si256((const __m256i *)(source + 16 * b + 8));
        __m256i r0 = round_x8(low, _mm256_and_si256(h, low_half));
        __m256i r1 = round_x8(high, _mm256_srli_epi32(h, 16));
        /* packus interleaves 128-bit lanes: the permute puts the 16 results back in order */
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r0, r1), 0xD8);
        if (stream)
            _mm256_stream_si256((__m256i *)(destination + 16 * b), packed);
        else
            _mm256_storeu_si256((__m256i *)(destination + 16 * b), packed);
    }
    if (stream) _mm_sfence(); /* streamed stores are weakly ordered: publish before returning */
    return begin + 16 * blocks;
}
#endif

static void round_range(const xm_piece *piece, uint64_t begin, uint64_t end, uint32_t mul,
                        uint32_t add, int vector, int stream) {
    uint64_t aligned = begin + ((16 - (piece->first + begin) % 16) % 16);
    if (aligned > end) aligned = end;
    round_scalar(piece, begin, aligned, mul, add);
    begin = aligned;
#ifdef XM_X86
    if (vector)
        while (end - begin >= 16) begin = round_avx2(piece, begin, end, mul, add, stream);
#else
    (void)vector;
    (void)stream;
#endif
    round_scalar(piece, begin, end, mul, add);
}

typedef struct {
    const xm_piece *pieces;
    size_t count;
    uint64_t begin, end; /* a range of the pieces' elements laid end to end */
    uint32_t mul, add;
    int vector, stream;
} xm_job;

static void run_job(const xm_job *job) {
    uint64_t start = 0;
    for (size_t p = 0; p < job->count && start < job->end; p++) {
        uint64_t stop = start + job->pieces[p].count;
        uint64_t begin = job->begin > start ? job->begin : start;
        uint64_t end = job->end < stop ? job->end : stop;
        if (begin < end)
            round_range(&job->pieces[p], begin - start, end - start, job->mul, job->add,
                        job->vector, job->stream);
        start = stop;
    }
}

/* 8 where the AVX2 path will be used, else 1. */
int xm_vector_width(void) {
#ifdef XM_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? 8 : 1;
#else
    return 1;
#endif
}

/* 1 where built with OpenMP: loaded after torch, it shares torch's libgomp and its threads,
 * which are awake after torch's own kernels (a fresh pthread costs ~60 us on a VM). */
int xm_threaded(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

/* Rounds every piece. `threads` is an upper bound (fewer for small work); `vector` 0 forces
 * the portable path (tests compare the two). The result depends on neither. */
void xm_round_pieces(const xm_piece *pieces, size_t count, uint32_t mul, uint32_t add,
                     int threads, int vector) {
    uint64_t total = 0;
    for (size_t p = 0; p < count; p++) total += pieces[p].count;
    uint64_t most = total / XM_MIN_PER_THREAD;
    if ((uint64_t)threads > most) threads = most > 0 ? (int)most : 1;
    if (threads > XM_MAX_THREADS) threads = XM_MAX_THREADS;
    if (threads < 1) threads = 1;
    vector = vector && xm_vector_width() > 1;
    int stream = total >= XM_MIN_STREAMED;
    xm_job jobs[XM_MAX_THREADS];
    for (int t = 0; t < threads; t++) {
        /* split on multiples of 16 of the laid-out elements: whole blocks, mostly */
        uint64_t share = (uint64_t)threads;
        uint64_t begin = total * (uint64_t)t / share / 16 * 16;
        uint64_t end = total * (uint64_t)(t + 1) / share / 16 * 16;
        if (t == threads - 1) end = total;
        jobs[t] = (xm_job){pieces, count, begin, end, mul | 1u, add, vector, stream};
    }
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int t = 0; t < threads; t++) run_job(&jobs[t]);
}
