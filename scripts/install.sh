#!/usr/bin/env bash
# `make install`: installs the built library as a C library is installed —
#   $PREFIX/lib/libenkai_tensor.so.X.Y.Z, .so.X (the SONAME) and .so links,
#   $PREFIX/include/enkai_tensor.h (and enkai_tensor.hpp),
#   $PREFIX/lib/pkgconfig/enkai_tensor.pc,
#   $PREFIX/lib/cmake/enkai_tensor/ (find_package(enkai_tensor), target
#   enkai_tensor::enkai_tensor; relocatable: paths are found from the file).
# Usage: install.sh LIB PREFIX [DESTDIR]. Files go under DESTDIR/PREFIX; the
# .pc file names PREFIX (staged installs, as packagers use DESTDIR).
# The library keeps its RUNPATH to libtorch, so it needs no LD_LIBRARY_PATH.
set -euo pipefail

lib=$1
prefix=$2
root="${3:-}$prefix"
[ -f "$lib" ] || { echo "install: $lib is not built (run make build)" >&2; exit 1; }
case "$prefix" in /*) ;; *) echo "install: PREFIX must be an absolute path, got $prefix" >&2; exit 1 ;; esac

soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ -n "$soname" ] || { echo "install: $lib has no SONAME" >&2; exit 1; }
# The full version, as the library itself reports it (major << 32 | minor << 16 | patch).
abi=$(python3 -c 'import ctypes, sys
v = ctypes.CDLL(sys.argv[1]).enkai_abi_version
v.restype = ctypes.c_uint64
v = v()
print(f"{v >> 32}.{(v >> 16) & 0xffff}.{v & 0xffff}")' "$(realpath "$lib")")
major=${abi%%.*}
[ "$soname" = "libenkai_tensor.so.$major" ] || { echo "install: SONAME $soname does not carry ABI major $major" >&2; exit 1; }

here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/lib/pkgconfig" "$root/lib/cmake/enkai_tensor" "$root/include"
install -m 0755 "$lib" "$root/lib/libenkai_tensor.so.$abi"
ln -sfn "libenkai_tensor.so.$abi" "$root/lib/$soname"
ln -sfn "$soname" "$root/lib/libenkai_tensor.so"
for h in "$here"/include/enkai_tensor.h "$here"/include/enkai_tensor.hpp; do
  [ -f "$h" ] && install -m 0644 "$h" "$root/include/"
done

cat > "$root/lib/pkgconfig/enkai_tensor.pc" <<EOF
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: enkai_tensor
Description: Tensors, autograd, AdamW, mixed precision and checkpoints behind a C ABI
Version: $abi
Cflags: -I\${includedir}
Libs: -L\${libdir} -lenkai_tensor
EOF

cat > "$root/lib/cmake/enkai_tensor/enkai_tensorConfig.cmake" <<EOF
# find_package(enkai_tensor) — the imported target enkai_tensor::enkai_tensor.
# Paths are relative to this file, so an installed tree can be moved.
get_filename_component(_enkai_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET enkai_tensor::enkai_tensor)
  add_library(enkai_tensor::enkai_tensor SHARED IMPORTED)
  set_target_properties(enkai_tensor::enkai_tensor PROPERTIES
    IMPORTED_LOCATION "\${_enkai_prefix}/lib/libenkai_tensor.so.$abi"
    IMPORTED_SONAME "$soname"
    INTERFACE_INCLUDE_DIRECTORIES "\${_enkai_prefix}/include")
endif()
set(enkai_tensor_VERSION "$abi")
unset(_enkai_prefix)
EOF

# Same major, at least the requested version: the ABI's compatibility rule.
cat > "$root/lib/cmake/enkai_tensor/enkai_tensorConfigVersion.cmake" <<EOF
set(PACKAGE_VERSION "$abi")
if(NOT PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
elseif(PACKAGE_FIND_VERSION_MAJOR STREQUAL "$major" AND NOT PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION VERSION_EQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
else()
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
endif()
EOF
echo "installed enkai_tensor $abi into ${3:-}$prefix"
