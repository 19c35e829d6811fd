// What the ops' C++ CPU kernels (<op>/cpu.cpp) share: row-major matrix products through the BLAS
// that torch links (MKL or OpenBLAS export the Fortran symbols); at::mm per tile or chunk would cost
// microseconds of dispatch on products of a few hundred thousand multiply-adds.
#pragma once

#include <type_traits>

extern "C" {
void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*, const float*, const int*,
            const float*, const int*, const float*, float*, const int*);
void dgemm_(const char*, const char*, const int*, const int*, const int*, const double*, const double*, const int*,
            const double*, const int*, const double*, double*, const int*);
}

namespace mmvisattn {

// Row-major C (m x n) = op(A) op(B) (+ C with accumulate) through the column-major BLAS, which
// computes C^T = op(B)^T op(A)^T.
template <typename T>
void matmul(bool trans_a, bool trans_b, int m, int n, int k, const T* a, int lda, const T* b, int ldb, T* c,
            int ldc, bool accumulate = false) {
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  const T one = 1, keep = accumulate ? 1 : 0;
  if constexpr (std::is_same_v<T, float>) {
    sgemm_(&tb, &ta, &n, &m, &k, &one, b, &ldb, a, &lda, &keep, c, &ldc);
  } else {
    dgemm_(&tb, &ta, &n, &m, &k, &one, b, &ldb, a, &lda, &keep, c, &ldc);
  }
}

}  // namespace mmvisattn
