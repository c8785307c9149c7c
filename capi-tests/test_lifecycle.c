/* Handles, errors, strings and the live counters through the C ABI. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <stdint.h>
#include <stdlib.h>
#include "check.h"

/* The default backend: "torch" in the full build, "cpu" in the libtorch-free one
 * (where every test below runs on the native backend). */
static const char *home = "torch";

static void test_library(void) {
    CHECK(enkai_abi_version() >> 32 == 1);
    char *s = NULL;
    size_t n = 0;
    CHECK(enkai_backend_list(&s, &n) == 0);
    int full = s && strcmp(s, "[\"torch\",\"cpu\"]") == 0;
    CHECK(s && (full || strcmp(s, "[\"cpu\"]") == 0) && n == strlen(s));
    enkai_tensor_string_free(s);
    if (!full) {
        home = "cpu";
        CHECK(enkai_backend_set("torch") == 1);
        CHECK_ERR(E_BACKEND_UNAVAILABLE);
    }
    CHECK(enkai_backend_current(&s, &n) == 0 && strcmp(s, home) == 0);
    free(s); /* plain free is a valid way to release output strings */
    CHECK(enkai_backend_list(NULL, &n) == 1);
    CHECK_ERR(E_NULL_POINTER);
    CHECK(enkai_backend_list(&s, NULL) == 1);
    CHECK_ERR(E_NULL_POINTER);
    CHECK(enkai_backend_set("tensorflow") == 1);
    CHECK_ERR(E_BACKEND_UNKNOWN);
    CHECK(enkai_backend_set(NULL) == 1);
    CHECK_ERR(E_NULL_POINTER);
    CHECK(enkai_backend_set("cpu") == 0);
    CHECK_OK();
    CHECK(enkai_backend_current(&s, &n) == 0 && strcmp(s, "cpu") == 0 && n == 3);
    enkai_free((uint8_t *)s, n);
    CHECK(enkai_backend_set(home) == 0);
    enkai_free(NULL, 0);
    enkai_tensor_string_free(NULL);
}

static void test_devices(void) {
    int64_t base = enkai_tensor_live_devices();
    int64_t cpu = enkai_tensor_device("cpu");
    CHECK(cpu > 0 && cpu < (1LL << 53));
    int64_t autod = enkai_tensor_device("auto");
    CHECK(autod > 0);
    CHECK(enkai_tensor_device("gpu") == 0);
    CHECK_ERR(E_INVALID_ARG);
    CHECK(enkai_tensor_device("cuda:01") == 0);
    CHECK_ERR(E_INVALID_ARG);
    CHECK(enkai_tensor_device("cuda:4096") == 0);
    CHECK_ERR(E_DEVICE);
    CHECK(enkai_tensor_device(NULL) == 0);
    CHECK_ERR(E_NULL_POINTER);
    CHECK(enkai_tensor_live_devices() == base + 2);
    CHECK(enkai_tensor_device_retain(cpu) == 0);
    CHECK(enkai_tensor_device_free(cpu) == 0);
    CHECK(enkai_tensor_live_devices() == base + 2);
    CHECK(enkai_tensor_device_free(cpu) == 0);
    CHECK(enkai_tensor_device_free(cpu) == 1);
    CHECK_ERR(E_HANDLE_STALE);
    CHECK(enkai_tensor_device_free(autod) == 0);
    CHECK(enkai_tensor_live_devices() == base);
}

static void test_handles(int64_t dev) {
    int64_t base = enkai_tensor_live_tensors();
    int64_t t = enkai_tensor_randn("[2,3]", "fp32", dev);
    CHECK(t > 0 && t < (1LL << 53));
    CHECK_OK();
    CHECK(enkai_tensor_live_tensors() == base + 1);
    CHECK(enkai_tensor_retain(t) == 0);
    CHECK(enkai_tensor_free(t) == 0);
    CHECK(enkai_tensor_numel(t) == 6);
    CHECK(enkai_tensor_free(t) == 0);
    CHECK(enkai_tensor_live_tensors() == base);
    /* stale: double free and use after free */
    CHECK(enkai_tensor_free(t) == 1);
    CHECK_ERR(E_HANDLE_STALE);
    CHECK(enkai_tensor_numel(t) == -1);
    CHECK_ERR(E_HANDLE_STALE);
    CHECK(isnan(enkai_tensor_item(t)));
    CHECK_ERR(E_HANDLE_STALE);
    /* the slot is reused under a new generation; the old handle stays stale */
    int64_t u = enkai_tensor_zeros("[1]", "fp32", dev);
    CHECK(u > 0 && u != t);
    CHECK(enkai_tensor_retain(t) == 1);
    CHECK_ERR(E_HANDLE_STALE);
    /* wrong kind, invented, zero, negative */
    CHECK(enkai_tensor_free(dev) == 1);
    CHECK_ERR(E_HANDLE_KIND);
    CHECK(enkai_tensor_device_free(u) == 1);
    CHECK_ERR(E_HANDLE_KIND);
    CHECK(enkai_tensor_randn("[2]", "fp32", u) == 0);
    CHECK_ERR(E_HANDLE_KIND);
    CHECK(enkai_tensor_numel(0) == -1);
    CHECK_ERR(E_HANDLE_INVALID);
    CHECK(enkai_tensor_numel(-5) == -1);
    CHECK_ERR(E_HANDLE_INVALID);
    CHECK(enkai_tensor_numel(123456789) == -1);
    CHECK_ERR(E_HANDLE_INVALID);
    CHECK(enkai_tensor_numel(u + 1000) == -1);
    CHECK_ERR(E_HANDLE_INVALID);
    CHECK(enkai_tensor_item(u) == 0.0);
    CHECK_OK();
    CHECK(enkai_tensor_free(u) == 0);
    CHECK(enkai_tensor_live_tensors() == base);
}

static void test_bad_arguments(int64_t dev) {
    int64_t base = enkai_tensor_live_tensors();
    const char *bad_shapes[] = {"[2,x]", "[2.5]", "[[2],3]", "[99999999999999999999]", "2,3",
                                "[2,-3]", "[1,]", "", "[1e3]"};
    for (size_t i = 0; i < sizeof bad_shapes / sizeof *bad_shapes; i++) {
        CHECK(enkai_tensor_zeros(bad_shapes[i], "fp32", dev) == 0);
        CHECK_ERR(E_INVALID_ARG);
    }
    CHECK(strstr(enkai_tensor_last_error(), "1e3") != NULL);
    CHECK(enkai_tensor_zeros(NULL, "fp32", dev) == 0);
    CHECK_ERR(E_NULL_POINTER);
    CHECK(enkai_tensor_zeros("[2]", NULL, dev) == 0);
    CHECK_ERR(E_NULL_POINTER);
    CHECK(enkai_tensor_zeros("[2]", "float", dev) == 0);
    CHECK_ERR(E_INVALID_ARG);
    CHECK(enkai_tensor_zeros("[2]", "FP32", dev) == 0);
    CHECK_ERR(E_INVALID_ARG);
    const char bad_utf8[] = {'[', '2', (char)0xff, ']', 0};
    CHECK(enkai_tensor_zeros(bad_utf8, "fp32", dev) == 0);
    CHECK_ERR(E_INVALID_ARG);
    CHECK(strstr(enkai_tensor_last_error(), "UTF-8") != NULL);
    CHECK(enkai_tensor_randn("[2]", "int64", dev) == 0);
    CHECK_ERR(E_DTYPE);
    float four[4] = {1, 2, 3, 4};
    CHECK(enkai_tensor_from_data(four, 12, "[4]", "fp32", dev) == 0);
    CHECK_ERR(E_SHAPE);
    CHECK(enkai_tensor_from_data(NULL, 16, "[4]", "fp32", dev) == 0);
    CHECK_ERR(E_NULL_POINTER);
    unsigned char bad_bool[2] = {1, 2};
    CHECK(enkai_tensor_from_data(bad_bool, 2, "[2]", "bool", dev) == 0);
    CHECK_ERR(E_INVALID_ARG);
    int64_t t = enkai_tensor_from_data(four, 16, "[2,2]", "fp32", dev);
    CHECK(t > 0);
    float out[4] = {0};
    CHECK(enkai_tensor_copy_to(t, out, 15) == 1);
    CHECK_ERR(E_SHAPE);
    CHECK(out[0] == 0.0f); /* nothing written */
    CHECK(enkai_tensor_copy_to(t, NULL, 16) == 1);
    CHECK_ERR(E_NULL_POINTER);
    CHECK(isnan(enkai_tensor_item(t)));
    CHECK_ERR(E_SHAPE);
    char *s = (char *)0x1;
    size_t n = 7;
    CHECK(enkai_tensor_dtype(t, NULL, &n) == 1 && n == 7);
    CHECK_ERR(E_NULL_POINTER);
    CHECK(enkai_tensor_dtype(t, &s, NULL) == 1 && s == (char *)0x1);
    CHECK_ERR(E_NULL_POINTER);
    EnkaiSlice sl = enkai_tensor_shape(dev);
    CHECK(sl.ptr == NULL && sl.len == 0);
    CHECK_ERR(E_HANDLE_KIND);
    uint32_t ids[6] = {1, 2, 3, 4, 5, 6};
    CHECK(enkai_tensor_ids_u32(ids, 6, 2, 4, dev) == 0);
    CHECK_ERR(E_SHAPE);
    CHECK(enkai_tensor_ids_u32(NULL, 6, 2, 3, dev) == 0);
    CHECK_ERR(E_NULL_POINTER);
    CHECK(enkai_tensor_free(t) == 0);
    CHECK(enkai_tensor_live_tensors() == base);
}

static void test_metadata(int64_t dev) {
    int64_t t = enkai_tensor_full("[2,3,1]", 2.5, "bf16", dev);
    CHECK(enkai_tensor_numel(t) == 6);
    EnkaiSlice sl = enkai_tensor_shape(t);
    CHECK(sl.len == 7 && memcmp(sl.ptr, "[2,3,1]", 7) == 0);
    enkai_free(sl.ptr, sl.len);
    char *s = NULL;
    size_t n = 0;
    CHECK(enkai_tensor_dtype(t, &s, &n) == 0 && strcmp(s, "bf16") == 0 && n == 4);
    enkai_tensor_string_free(s);
    enkai_tensor_free(t);

    int64_t scalar = enkai_tensor_full("[]", -3.25, "f64", dev);
    sl = enkai_tensor_shape(scalar);
    CHECK(sl.len == 2 && memcmp(sl.ptr, "[]", 2) == 0);
    free(sl.ptr);
    CHECK(enkai_tensor_item(scalar) == -3.25);
    CHECK(enkai_tensor_dtype(scalar, &s, &n) == 0 && strcmp(s, "fp64") == 0);
    enkai_free((uint8_t *)s, n);
    enkai_tensor_free(scalar);

    int64_t one = enkai_tensor_ones("[1,1]", "int32", dev);
    CHECK(enkai_tensor_item(one) == 1.0);
    enkai_tensor_free(one);

    int64_t empty = enkai_tensor_zeros("[0,3]", "fp32", dev);
    CHECK(empty > 0 && enkai_tensor_numel(empty) == 0);
    CHECK(enkai_tensor_copy_to(empty, NULL, 0) == 0);
    enkai_tensor_free(empty);

    uint32_t ids[6] = {0, 7, 4294967295u, 3, 2, 1};
    int64_t it = enkai_tensor_ids_u32(ids, 6, 2, 3, dev);
    int64_t back[6];
    CHECK(enkai_tensor_copy_to(it, back, sizeof back) == 0);
    CHECK(back[1] == 7 && back[2] == 4294967295LL && back[5] == 1);
    sl = enkai_tensor_shape(it);
    CHECK(sl.len == 5 && memcmp(sl.ptr, "[2,3]", 5) == 0);
    enkai_free(sl.ptr, sl.len);
    enkai_tensor_free(it);
}

static void test_seed(int64_t dev) {
    float a[8], b[8];
    CHECK(enkai_tensor_manual_seed(42) == 0);
    int64_t x = enkai_tensor_randn("[8]", "fp32", dev);
    CHECK(enkai_tensor_manual_seed(42) == 0);
    int64_t y = enkai_tensor_randn("[8]", "fp32", dev);
    int64_t z = enkai_tensor_randn("[8]", "fp32", dev);
    float c[8];
    enkai_tensor_copy_to(x, a, sizeof a);
    enkai_tensor_copy_to(y, b, sizeof b);
    enkai_tensor_copy_to(z, c, sizeof c);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
    enkai_tensor_free(x);
    enkai_tensor_free(y);
    enkai_tensor_free(z);
}

/* Every dtype survives from_data -> copy_to bit for bit. */
static void test_round_trip(int64_t dev) {
    static const struct { const char *name; const char *alias; size_t size; } dtypes[] = {
        {"fp32", "f32", 4}, {"fp16", "f16", 2}, {"bf16", "bf16", 2}, {"fp64", "f64", 8},
        {"int64", "i64", 8}, {"int32", "i32", 4}, {"bool", "bool", 1}, {"uint8", "u8", 1},
        {"complex64", "c64", 8}, {"complex128", "c128", 16},
    };
    for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++) {
        unsigned char in[6 * 16], out[6 * 16 + 4];
        size_t nb = 6 * dtypes[d].size;
        for (size_t i = 0; i < nb; i++)
            in[i] = strcmp(dtypes[d].name, "bool") == 0 ? (unsigned char)(i % 2) : (unsigned char)(i * 37 + 11);
        /* keep half-precision bit patterns finite and non-NaN so they round trip exactly */
        if (dtypes[d].size == 2)
            for (size_t i = 1; i < nb; i += 2) in[i] &= 0x3f;
        int64_t t = enkai_tensor_from_data(in, nb, "[2,3]", dtypes[d].alias, dev);
        CHECK(t > 0);
        memset(out, 0xAB, sizeof out);
        CHECK(enkai_tensor_copy_to(t, out, sizeof out) == 0); /* a larger buffer is fine */
        CHECK(memcmp(in, out, nb) == 0);
        CHECK(out[nb] == 0xAB); /* exactly nb bytes written */
        char *s = NULL;
        size_t n = 0;
        CHECK(enkai_tensor_dtype(t, &s, &n) == 0 && strcmp(s, dtypes[d].name) == 0);
        enkai_tensor_string_free(s);
        CHECK(enkai_tensor_free(t) == 0);
    }
}

/* A quantized weight through its whole life from C: quantize, read its
 * dtype, shape and bytes, multiply, save and load, free (valgrind watches). */
static void test_quantized(int64_t dev) {
    float w[2 * 32], x[32], y[2];
    for (int i = 0; i < 64; i++) w[i] = (float)((i * 7) % 13) - 6.0f;
    for (int i = 0; i < 32; i++) x[i] = (float)(i % 5) - 2.0f;
    int64_t wt = enkai_tensor_from_data(w, sizeof w, "[2,32]", "fp32", dev);
    int64_t xt = enkai_tensor_from_data(x, sizeof x, "[1,32]", "fp32", dev);
    int64_t q = enkai_quantize_q8_0(wt), qc = enkai_quantize_per_channel(wt, 0);
    CHECK(q > 0 && qc > 0);
    char *dt = NULL;
    size_t n = 0;
    CHECK(enkai_tensor_dtype(q, &dt, &n) == 0 && dt && strcmp(dt, "q8_0") == 0);
    enkai_tensor_string_free(dt);
    CHECK(enkai_tensor_numel(q) == 64);
    unsigned char raw[2 * 34];
    CHECK(enkai_tensor_copy_to(q, raw, sizeof raw) == 0);
    CHECK(raw[2] == (unsigned char)(signed char)-127); /* block 0's first value, -6, is its largest magnitude */
    CHECK(enkai_tensor_copy_to(q, raw, 10) == 1);
    CHECK_ERR(E_SHAPE);
    int64_t in[] = {xt, q}, out = 0;
    CHECK(enkai_op("linear", in, 2, NULL, &out, 1) == 1 && out > 0);
    CHECK(enkai_tensor_copy_to(out, y, sizeof y) == 0);
    float want[2] = {0, 0};
    for (int j = 0; j < 2; j++)
        for (int i = 0; i < 32; i++) want[j] += x[i] * w[j * 32 + i];
    /* x's integers quantize exactly (2 -> 127 at scale 2/127), w's to within 6/254. */
    CHECK(y[0] - want[0] < 1.0f && want[0] - y[0] < 1.0f && y[1] - want[1] < 1.0f && want[1] - y[1] < 1.0f);
    CHECK(enkai_tensor_add(q, xt) == 0);
    CHECK_ERR(E_DTYPE);
    CHECK(enkai_dequantize(xt) == 0);
    CHECK_ERR(E_HANDLE_KIND);
    CHECK(enkai_tensor_retain(qc) == 0 && enkai_tensor_free(qc) == 0);
    int64_t hs[] = {out, q, qc, wt, xt};
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) CHECK(enkai_tensor_free(hs[i]) == 0);
    CHECK(enkai_tensor_free(q) == 1);
    CHECK_ERR(E_HANDLE_STALE);
}

/* ONNX export from C: a traced linear + relu is written (the file exists and
 * is non-empty); an op with no ONNX form is E_UNSUPPORTED naming it, and
 * leaves no file; the trace keeps the weight after its handle is freed. */
static void test_onnx(int64_t dev) {
    float w[3 * 4], x[2 * 4];
    for (int i = 0; i < 12; i++) w[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < 8; i++) x[i] = (float)(i % 3) - 1.0f;
    int64_t wt = enkai_tensor_from_data(w, sizeof w, "[3,4]", "fp32", dev);
    int64_t xt = enkai_tensor_from_data(x, sizeof x, "[2,4]", "fp32", dev);
    CHECK(enkai_onnx_export("/tmp/x.onnx", "[]", "[]", "{}", 17) == 1);
    CHECK(enkai_onnx_trace_begin() == 0);
    int64_t in[] = {xt, wt}, lin = 0, y = 0;
    CHECK(enkai_op("linear", in, 2, NULL, &lin, 1) == 1);
    CHECK(enkai_op("relu", &lin, 1, NULL, &y, 1) == 1);
    CHECK(enkai_onnx_trace_end() == 0);
    char path[64], dir[] = "/tmp/enkai_onnx_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/m.onnx", dir);
    char ins[64], outs[64], names[64];
    snprintf(ins, sizeof ins, "[{\"handle\": %lld, \"batch_dim\": 0}]", (long long)xt);
    snprintf(outs, sizeof outs, "[%lld]", (long long)y);
    snprintf(names, sizeof names, "{\"fc.weight\": %lld}", (long long)wt);
    CHECK(enkai_onnx_export(path, ins, outs, names, 16) == 1);
    CHECK_ERR(E_INVALID_ARG);
    CHECK(enkai_onnx_export(NULL, ins, outs, names, 17) == 1);
    CHECK_ERR(E_NULL_POINTER);
    CHECK(enkai_onnx_export(path, ins, outs, names, 17) == 0);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (f) {
        CHECK(fseek(f, 0, SEEK_END) == 0 && ftell(f) > 100);
        fclose(f);
    }
    CHECK(remove(path) == 0);
    /* The weight as a constant, after its handle is gone: no names. */
    CHECK(enkai_tensor_free(wt) == 0);
    CHECK(enkai_onnx_export(path, ins, outs, "{}", 17) == 0);
    CHECK(remove(path) == 0);
    /* Through an op with no lowering: refused by name, no file. */
    CHECK(enkai_onnx_trace_begin() == 0);
    int64_t cs = 0;
    CHECK(enkai_op("nonzero", &xt, 1, NULL, &cs, 1) == 1);
    CHECK(enkai_onnx_trace_end() == 0);
    snprintf(outs, sizeof outs, "[%lld]", (long long)cs);
    CHECK(enkai_onnx_export(path, ins, outs, "{}", 17) == 1);
    CHECK_ERR(E_UNSUPPORTED);
    CHECK(strstr(enkai_tensor_last_error(), "nonzero") != NULL);
    CHECK(fopen(path, "rb") == NULL);
    CHECK(rmdir(dir) == 0);
    CHECK(enkai_onnx_trace_clear() == 0);
    int64_t hs[] = {lin, y, cs, xt};
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) CHECK(enkai_tensor_free(hs[i]) == 0);
}

int main(void) {
    int64_t tensors0 = enkai_tensor_live_tensors(), devices0 = enkai_tensor_live_devices();
    test_library();
    test_devices();
    int64_t dev = enkai_tensor_device("cpu");
    test_handles(dev);
    test_bad_arguments(dev);
    test_metadata(dev);
    test_seed(dev);
    test_round_trip(dev);
    test_quantized(dev);
    CHECK(enkai_backend_set("cpu") == 0);
    test_round_trip(dev);
    test_quantized(dev);
    test_onnx(dev);
    CHECK(enkai_backend_set(home) == 0);
    test_onnx(dev);
    CHECK(enkai_tensor_device_free(dev) == 0);
    CHECK(enkai_tensor_live_tensors() == tensors0);
    CHECK(enkai_tensor_live_devices() == devices0);
    CHECK(enkai_tensor_live_opts() == 0 && enkai_tensor_live_scalers() == 0);
    return SUMMARY("capi-lifecycle");
}
