/* A tiny test harness for the C API tests: CHECK records failures and keeps
 * going; SUMMARY prints "name: N passed, N failed" and sets the exit code. */
#ifndef ENKAI_CHECK_H
#define ENKAI_CHECK_H
#include <stdio.h>
#include <string.h>
#include "enkai_tensor.h"

static int checks_passed __attribute__((unused)), checks_failed __attribute__((unused));

/* Every EnkaiErrorCode's name, by number. */
static const char *const enkai_code_names[] __attribute__((unused)) = {
    "E_OK", "E_INVALID_ARG", "E_NULL_POINTER", "E_HANDLE_INVALID", "E_HANDLE_STALE", "E_HANDLE_KIND",
    "E_SHAPE", "E_DTYPE", "E_DEVICE", "E_BACKEND_UNKNOWN", "E_BACKEND_UNAVAILABLE", "E_BACKEND_MISMATCH",
    "E_TORCH", "E_INTERNAL", "E_RESOURCE", "E_AUTOGRAD", "E_NOT_FINITE", "E_AMP_INVALID_SCALE",
    "E_AMP_INVALID_GROWTH_FACTOR", "E_AMP_INVALID_BACKOFF_FACTOR", "E_AMP_INVALID_GROWTH_INTERVAL",
    "E_AMP_STATE", "E_CKPT_MISSING", "E_CKPT_HASH_MISMATCH", "E_CKPT_FORMAT", "E_CKPT_IO",
    "E_DIST_ENV_GATE", "E_DIST", "E_DIST_PEER_LOST", "E_DIST_TIMEOUT", "E_DIST_ENV_MISMATCH",
    "E_DIST_MISMATCH", "E_CKPT_INCOMPLETE", "E_UNSUPPORTED", "E_LINALG",
};
#define ENKAI_N_CODES ((int)(sizeof enkai_code_names / sizeof enkai_code_names[0]))
_Static_assert(ENKAI_N_CODES == E_LINALG + 1, "enkai_code_names lists every code");

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (cond) {                                                              \
            checks_passed++;                                                     \
        } else {                                                                 \
            checks_failed++;                                                     \
            const char *le_ = enkai_tensor_last_error();                         \
            fprintf(stderr, "%s:%d: CHECK(%s) failed (last error: %s)\n",        \
                    __FILE__, __LINE__, #cond, le_ ? le_ : "none");               \
        }                                                                        \
    } while (0)

/* The last call failed with `code`, and its message starts with the code's name. */
#define CHECK_ERR(code)                                                          \
    do {                                                                         \
        const char *le_ = enkai_tensor_last_error();                             \
        CHECK(enkai_tensor_last_error_code() == (code));                         \
        CHECK(le_ != NULL && strncmp(le_, #code ": ", strlen(#code ": ")) == 0); \
    } while (0)

#define CHECK_OK() CHECK(enkai_tensor_last_error() == NULL && enkai_tensor_last_error_code() == E_OK)

#define SUMMARY(name)                                                            \
    (printf("%s: %d passed, %d failed\n", (name), checks_passed, checks_failed), \
     checks_failed ? 1 : 0)

#endif
