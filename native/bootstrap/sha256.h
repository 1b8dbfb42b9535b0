/* SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104) for the bootstrap's mutual authentication: libpycoll needs
 * nothing but libc, so it carries these ~100 lines rather than a crypto library. tests/rendezvous/test_bootstrap.py checks
 * them against Python's hashlib and hmac. */
#ifndef PYCOLL_BOOTSTRAP_SHA256_H
#define PYCOLL_BOOTSTRAP_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "pycoll/types.h"

#define SHA256_BYTES 32

typedef struct sha256 {
    uint32_t h[8];
    uint64_t length; /* bytes hashed so far */
    uint8_t block[64];
    size_t used;     /* bytes of block filled */
} sha256_t;

void sha256_init(sha256_t *s);
void sha256_update(sha256_t *s, const void *data, size_t n);
void sha256_final(sha256_t *s, uint8_t out[SHA256_BYTES]);

/* HMAC-SHA256(key, parts[0] || parts[1] || ...). Exported for the tests only (not in the public headers). */
PYCOLL_API void pycoll_hmac_sha256(const uint8_t *key, size_t key_len, int n_parts, const void *const *parts,
                                   const size_t *lens, uint8_t out[SHA256_BYTES]);

/* 1 when a and b hold the same n bytes; the time taken does not depend on where they differ. */
int equal_in_constant_time(const uint8_t *a, const uint8_t *b, size_t n);

#endif
