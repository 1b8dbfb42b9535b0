/* See shm_slot_copy.h. */
#include "transport/shm_slot_copy.h"

#include <string.h>

#include "common/settings.h"
#include "pycoll/p2p.h"

#if defined(__x86_64__)
#include <emmintrin.h> /* SSE2's streaming stores are part of every x86-64 */
#define HAVE_STREAMING_STORES 1
#else
#define HAVE_STREAMING_STORES 0
#endif

/* Smallest collective that chooses (below it: plain). Both measured alike around here on a machine whose cores
 * pull fast, and a few lines' pull costs little where they pull slowly. */
#define STREAM_MIN_BYTES (32LL << 10)
/* One call in this many tries the choice it did not make, to notice that the machine changed. Rare: the choice
 * not made can cost several times the other. */
#define SLOT_COPY_EXPLORE_EVERY 32

static int size_class(int64_t bytes)
{
    int c = 0;
    for (int64_t b = STREAM_MIN_BYTES; b * 2 <= bytes && c < SLOT_COPY_CLASSES - 1; b *= 2)
        c++;
    return c;
}

/* The median of what is kept of one choice's measurements (of two, the smaller); 0: none yet. */
static double estimate(const shm_slot_copy_t *s, int c, int streaming)
{
    const int64_t n = s->kept[c][streaming] < SLOT_COPY_KEPT ? s->kept[c][streaming] : SLOT_COPY_KEPT;
    const double *v = s->ns_per_byte[c][streaming];
    if (n == 0)
        return 0;
    if (n == 1)
        return v[0];
    if (n == 2)
        return v[0] < v[1] ? v[0] : v[1];
    const double lo = v[0] < v[1] ? v[0] : v[1], hi = v[0] < v[1] ? v[1] : v[0];
    return v[2] < lo ? lo : v[2] > hi ? hi : v[2];
}

void slot_copy_init(shm_slot_copy_t *s)
{
    const char *mode = setting_text(SETTING_SHM_STREAMING);
    memset(s, 0, sizeof *s);
    s->mode = !HAVE_STREAMING_STORES || (mode && strcmp(mode, "off") == 0) ? SLOT_COPY_PLAIN
              : mode && strcmp(mode, "on") == 0                              ? SLOT_COPY_STREAMING
                                                                             : SLOT_COPY_AUTO;
}

void slot_copy_begin(shm_slot_copy_t *s, int64_t bytes)
{
    s->streaming = 0;
    s->measuring = 0;
    if (s->mode == SLOT_COPY_PLAIN || bytes < STREAM_MIN_BYTES)
        return;
    if (s->mode == SLOT_COPY_STREAMING) {
        s->streaming = 1;
        return;
    }
    const int c = size_class(bytes);
    const int64_t n = s->calls[c];
    if (n <= 4) /* the first call warms up; then plain, streaming, plain, streaming */
        s->streaming = n % 2 == 0 && n > 0;
    else
        s->streaming = (estimate(s, c, 1) < estimate(s, c, 0)) !=
                       (n % SLOT_COPY_EXPLORE_EVERY == SLOT_COPY_EXPLORE_EVERY - 1);
    s->measuring = c + 1;
    s->bytes = bytes;
    s->started_ns = pycoll_now_ns();
}

void slot_copy_end(shm_slot_copy_t *s)
{
    if (!s->measuring)
        return;
    const int c = s->measuring - 1;
    s->measuring = 0;
    if (s->calls[c]++ == 0)
        return; /* a size's first call also pays for first touches */
    int64_t *kept = &s->kept[c][s->streaming];
    s->ns_per_byte[c][s->streaming][*kept % SLOT_COPY_KEPT] = (double)(pycoll_now_ns() - s->started_ns) / (double)s->bytes;
    ++*kept;
}

#if HAVE_STREAMING_STORES
static void copy_streaming(unsigned char *dst, const unsigned char *src, size_t n)
{
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15; /* to the stores' 16-byte alignment */
    if (head > n)
        head = n;
    memcpy(dst, src, head);
    dst += head;
    src += head;
    n -= head;
    const size_t body = n & ~(size_t)63;
    for (size_t i = 0; i < body; i += 64) {
        const __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
        const __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
        const __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
        const __m128i d = _mm_loadu_si128((const __m128i *)(src + i + 48));
        _mm_stream_si128((__m128i *)(dst + i), a);
        _mm_stream_si128((__m128i *)(dst + i + 16), b);
        _mm_stream_si128((__m128i *)(dst + i + 32), c);
        _mm_stream_si128((__m128i *)(dst + i + 48), d);
    }
    memcpy(dst + body, src + body, n - body);
    _mm_sfence(); /* streaming stores are not ordered with the flag's release store without it */
}
#endif

void slot_copy(const shm_slot_copy_t *s, void *dst, const void *src, size_t n)
{
#if HAVE_STREAMING_STORES
    if (s->streaming) {
        copy_streaming(dst, src, n);
        return;
    }
#else
    (void)s;
#endif
    memcpy(dst, src, n);
}
