/* A tiny test harness for the C API tests: CHECK records failures and keeps
 * going; SUMMARY prints "name: N passed, N failed" and sets the exit code. */
#ifndef ENKAI_CHECK_H
#define ENKAI_CHECK_H
#include <stdio.h>
#include <string.h>
#include "enkai_tensor.h"

static int checks_passed, checks_failed;

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
