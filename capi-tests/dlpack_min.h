/* The DLPack 1.x structs the C tests build and read, as dlpack.h
 * (https://github.com/dmlc/dlpack) declares them. A program of yours would
 * include dlpack.h itself; enkai_tensor.h only names DLManagedTensorVersioned. */
#ifndef ENKAI_TESTS_DLPACK_MIN_H
#define ENKAI_TESTS_DLPACK_MIN_H
#include <stdint.h>

typedef struct { uint32_t major, minor; } DLPackVersion;
typedef enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 } DLDeviceType;
typedef struct { int32_t device_type, device_id; } DLDevice;
typedef enum { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6 } DLDataTypeCode;
typedef struct { uint8_t code, bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} DLTensor;
#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;
#endif
