// The feature map of ripple attention on CPU ("Ripple attention for visual perception with
// sub-quadratic complexity", arXiv:2110.02453, Appendix C.1, Eq. 13):
// phi(x) = ReLU(W2 [sin(W1 s x); cos(W1 s x)] + b2), by blocks of rows: each block's projections, sines
// and cosines and the products stay in cache, sine and cosine come from one SLEEF call (the library
// torch's own sin and cos use, exported by libtorch), and the backward recomputes them instead of
// keeping them. pytorch.py's torch_forward / torch_backward are the twin.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../utils/cpu_kernels.h"

namespace {

using mmvisattn::matmul;

typedef struct {
  __m256 sin, cos;
} SincosF8;
extern "C" SincosF8 Sleef_sincosf8_u10avx2(__m256);

__attribute__((target("avx2,fma"))) void sincos_avx2(const float* x, int64_t count, float* sin, float* cos) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const SincosF8 both = Sleef_sincosf8_u10avx2(_mm256_loadu_ps(x + i));
    _mm256_storeu_ps(sin + i, both.sin);
    _mm256_storeu_ps(cos + i, both.cos);
  }
  for (; i < count; ++i) {
    sin[i] = std::sin(x[i]);
    cos[i] = std::cos(x[i]);
  }
}

// (rows, m) projections -> (rows, 2m) [sin | cos].
template <typename T>
void sines_and_cosines(const T* projected, int64_t rows, int64_t m, T* trig) {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  for (int64_t r = 0; r < rows; ++r) {
    const T* in = projected + r * m;
    T *sin = trig + r * 2 * m, *cos = sin + m;
    if constexpr (std::is_same_v<T, float>) {
      if (avx2) {
        sincos_avx2(in, m, sin, cos);
        continue;
      }
    }
    for (int64_t j = 0; j < m; ++j) {
      sin[j] = std::sin(in[j]);
      cos[j] = std::cos(in[j]);
    }
  }
}

constexpr int64_t kFeatureBlock = 256;  // rows per block: the projections of a block stay in cache

// ReLU(rows + b2) in place on (count, dims) rows.
template <typename T>
__attribute__((target_clones("avx2", "default"))) void add_bias_relu(T* rows, const T* bias, int64_t count,
                                                                     int64_t dims) {
  for (int64_t r = 0; r < count; ++r) {
#pragma omp simd
    for (int64_t j = 0; j < dims; ++j) rows[r * dims + j] = std::max(rows[r * dims + j] + bias[j], T(0));
  }
}

// The gradient through the ReLU of (count, dims) outputs, and its column sums added to grad_bias.
template <typename T>
__attribute__((target_clones("avx2", "default"))) void relu_gradient(const T* out, const T* grad_out, int64_t count,
                                                                     int64_t dims, T* grad_pre, T* grad_bias) {
  for (int64_t r = 0; r < count; ++r) {
#pragma omp simd
    for (int64_t j = 0; j < dims; ++j) {
      const T value = out[r * dims + j] > 0 ? grad_out[r * dims + j] : T(0);
      grad_pre[r * dims + j] = value;
      grad_bias[j] += value;
    }
  }
}

// d/d(projection) of [sin | cos] rows: g_sin cos - g_cos sin, (count, m) from (count, 2m).
template <typename T>
__attribute__((target_clones("avx2", "default"))) void trig_gradient(const T* grad_trig, const T* trig,
                                                                     int64_t count, int64_t m, T* grad_projected) {
  for (int64_t r = 0; r < count; ++r) {
    const T *g = grad_trig + r * 2 * m, *t = trig + r * 2 * m;
    T* target = grad_projected + r * m;
#pragma omp simd
    for (int64_t j = 0; j < m; ++j) target[j] = g[j] * t[m + j] - g[m + j] * t[j];
  }
}

// The rows of a tensor whose last dimension is contiguous, whatever its other strides (the heads of
// the qkv projection): their offsets in its storage.
std::vector<int64_t> row_offsets(const at::Tensor& x) {
  const int64_t leading = x.dim() - 1, rows = x.numel() / x.size(-1);
  std::vector<int64_t> offsets(rows);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rest = r, offset = 0;
    for (int64_t d = leading - 1; d >= 0; --d) {
      offset += rest % x.size(d) * x.stride(d);
      rest /= x.size(d);
    }
    offsets[r] = offset;
  }
  return offsets;
}

// One block of rows: x gathered, W1 s x, and [sin | cos] of it.
template <typename T>
struct FeatureBlock {
  int64_t dims, features;
  std::vector<T> x, projected, trig;

  FeatureBlock(int64_t dims, int64_t features)
      : dims(dims), features(features), x(kFeatureBlock * dims), projected(kFeatureBlock * features),
        trig(kFeatureBlock * 2 * features) {}

  void load(const T* data, const int64_t* offsets, int64_t rows, const T* scaled_w1) {
    for (int64_t r = 0; r < rows; ++r) std::copy_n(data + offsets[r], dims, x.data() + r * dims);
    matmul<T>(false, true, rows, features, dims, x.data(), dims, scaled_w1, dims, projected.data(), features);
    sines_and_cosines(projected.data(), rows, features, trig.data());
  }
};

void check_feature_inputs(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& w2) {
  TORCH_CHECK(x.dim() >= 2 && x.stride(-1) == 1 && w1.dim() == 2 && w1.size(1) == x.size(-1) && w2.dim() == 2 &&
                  w2.size(1) == 2 * w1.size(0),
              "ripple cpu features: expected x (..., d) with a contiguous last dimension, w1 (m, d), w2 (d', 2m)");
  TORCH_CHECK(w1.scalar_type() == x.scalar_type() && w2.scalar_type() == x.scalar_type(),
              "ripple cpu features: x and the weights must share one dtype");
}

at::Tensor forward(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& w2, const at::Tensor& b2,
                            double scale) {
  check_feature_inputs(x, w1, w2);
  TORCH_CHECK(b2.dim() == 1 && b2.size(0) == w2.size(0) && b2.scalar_type() == x.scalar_type(),
              "ripple cpu features: expected b2 (d') of x's dtype");
  const std::vector<int64_t> offsets = row_offsets(x);
  const int64_t rows = offsets.size(), dims = x.size(-1), features = w1.size(0), out_dims = w2.size(0);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = out_dims;
  at::Tensor out = at::empty(shape, x.options());
  const at::Tensor scaled_w1 = (w1 * scale).contiguous(), w2c = w2.contiguous(), b2c = b2.contiguous();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "trig_relu_features_cpu_forward", [&] {
    const scalar_t *w2_data = w2c.data_ptr<scalar_t>(), *b2_data = b2c.data_ptr<scalar_t>();
    scalar_t* out_data = out.data_ptr<scalar_t>();
    at::parallel_for(0, (rows + kFeatureBlock - 1) / kFeatureBlock, 1, [&](int64_t begin, int64_t end) {
      FeatureBlock<scalar_t> block(dims, features);
      for (int64_t index = begin; index < end; ++index) {
        const int64_t first = index * kFeatureBlock, count = std::min(kFeatureBlock, rows - first);
        block.load(x.data_ptr<scalar_t>(), offsets.data() + first, count, scaled_w1.data_ptr<scalar_t>());
        scalar_t* target = out_data + first * out_dims;
        matmul<scalar_t>(false, true, count, out_dims, 2 * features, block.trig.data(), 2 * features, w2_data,
                         2 * features, target, out_dims);
        add_bias_relu(target, b2_data, count, out_dims);
      }
    });
  });
  return out;
}

// Gradients for x (contiguous, x's shape), w1, w2 and b2 from the saved input and output.
std::vector<at::Tensor> backward(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& w2,
                                          const at::Tensor& features_out, const at::Tensor& grad_out, double scale) {
  check_feature_inputs(x, w1, w2);
  const std::vector<int64_t> offsets = row_offsets(x);
  const int64_t rows = offsets.size(), dims = x.size(-1), features = w1.size(0), out_dims = w2.size(0);
  TORCH_CHECK(features_out.numel() == rows * out_dims && grad_out.numel() == rows * out_dims,
              "ripple cpu features: the output and its gradient must have (..., d') of x's rows");
  const at::Tensor scaled_w1 = (w1 * scale).contiguous(), w2c = w2.contiguous();
  const at::Tensor out_c = features_out.contiguous(), grad_c = grad_out.contiguous();
  at::Tensor grad_x = at::empty(x.sizes(), x.options());
  // per-thread sums of the weights' gradients, added up at the end
  const int64_t threads = at::get_num_threads();
  at::Tensor grad_w1 = at::zeros({threads, features, dims}, x.options());
  at::Tensor grad_w2 = at::zeros({threads, out_dims, 2 * features}, x.options());
  at::Tensor grad_b2 = at::zeros({threads, out_dims}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "trig_relu_features_cpu_backward", [&] {
    const scalar_t *w1s = scaled_w1.data_ptr<scalar_t>(), *w2_data = w2c.data_ptr<scalar_t>();
    const scalar_t *out_data = out_c.data_ptr<scalar_t>(), *grad_data = grad_c.data_ptr<scalar_t>();
    at::parallel_for(0, (rows + kFeatureBlock - 1) / kFeatureBlock, 1, [&](int64_t begin, int64_t end) {
      const int64_t thread = at::get_thread_num();
      scalar_t* gw1 = grad_w1.data_ptr<scalar_t>() + thread * features * dims;
      scalar_t* gw2 = grad_w2.data_ptr<scalar_t>() + thread * out_dims * 2 * features;
      scalar_t* gb2 = grad_b2.data_ptr<scalar_t>() + thread * out_dims;
      FeatureBlock<scalar_t> block(dims, features);
      std::vector<scalar_t> grad_pre(kFeatureBlock * out_dims), grad_trig(kFeatureBlock * 2 * features),
          grad_projected(kFeatureBlock * features);
      for (int64_t index = begin; index < end; ++index) {
        const int64_t first = index * kFeatureBlock, count = std::min(kFeatureBlock, rows - first);
        block.load(x.data_ptr<scalar_t>(), offsets.data() + first, count, w1s);
        const scalar_t *out_rows = out_data + first * out_dims, *grad_rows = grad_data + first * out_dims;
        relu_gradient(out_rows, grad_rows, count, out_dims, grad_pre.data(), gb2);
        matmul<scalar_t>(true, false, out_dims, 2 * features, count, grad_pre.data(), out_dims, block.trig.data(),
                         2 * features, gw2, 2 * features, true);
        matmul<scalar_t>(false, false, count, 2 * features, out_dims, grad_pre.data(), out_dims, w2_data,
                         2 * features, grad_trig.data(), 2 * features);
        trig_gradient(grad_trig.data(), block.trig.data(), count, features, grad_projected.data());
        matmul<scalar_t>(true, false, features, dims, count, grad_projected.data(), features, block.x.data(), dims,
                         gw1, dims, true);
        matmul<scalar_t>(false, false, count, dims, features, grad_projected.data(), features, w1s, dims,
                         grad_x.data_ptr<scalar_t>() + first * dims, dims);
      }
    });
  });
  return {grad_x, grad_w1.sum(0) * scale, grad_w2.sum(0), grad_b2.sum(0)};
}

}  // namespace

TORCH_LIBRARY(mmvisattn_trig_relu_features_cpu, m) {
  m.def("forward(Tensor x, Tensor w1, Tensor w2, Tensor b2, float scale) -> Tensor");
  m.def("backward(Tensor x, Tensor w1, Tensor w2, Tensor features, Tensor grad_out, float scale) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(mmvisattn_trig_relu_features_cpu, CPU, m) {
  m.impl("forward", &forward);
  m.impl("backward", &backward);
}
