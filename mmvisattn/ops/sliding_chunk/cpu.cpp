// Sliding-chunk local attention on CPU, forward and backward fused per query chunk
// ("Multi-Scale Vision Longformer", arXiv:2103.15358, App. C). The arithmetic and the tensors are
// those of pytorch.py's SlidingChunkAttention (its docstring gives the shapes), which is the twin
// these kernels are tested against. Per (row of B*H, chunk): gather the live slot keys and values,
// one GEMM for the scores, bias, mask and softmax in one vectorised pass over the scores while they
// are in cache, one GEMM for the output. The forward keeps the log-sum-exp of every query (N
// numbers), so the backward rebuilds the probabilities with one GEMM and one exp per score, as
// FlashAttention does; nothing of size N x S is stored.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "../utils/cpu_kernels.h"

namespace {

using mmvisattn::matmul;

using Runs = std::vector<std::pair<int64_t, int64_t>>;  // (first slot column, length)

// exp of a float as the inlined Cephes polynomial (relative error about 1e-7): unlike a call to
// expf it vectorises. Arguments below the float range, -inf included, give exactly 0.
inline float exp_vectorisable(float x) {
  const float low = x < -87.0f ? -87.0f : x;
  const float clamped = low > 88.0f ? 88.0f : low;
  const float n = (clamped * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // rounded to an integer
  const float r = clamped - n * 0.693359375f + n * 2.12194440e-4f;               // minus n ln 2 in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // 2^n
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return x < -87.0f ? 0.0f : p * scale;
}
inline double exp_vectorisable(double x) { return std::exp(x); }  // float64 serves gradcheck, not speed

struct Layout {
  int64_t rows, chunks, queries, dims, slots, table_rows, heads, mask_rows;
  std::vector<std::vector<int64_t>> live;  // per chunk: the slot columns some query of it may use
  std::vector<Runs> runs;                  // the same columns as runs, so bias and mask rows are read in order
};

// A column is dead for a chunk when every query masks it (neighbours outside the map): it is skipped,
// as chunk_groups does in the torch path.
Layout layout_of(const at::Tensor& q, const at::Tensor& k, const at::Tensor& index, const at::Tensor& invalid,
                 int64_t heads) {
  Layout l{q.size(0), q.size(1), q.size(2), q.size(3), index.size(1), k.size(1), heads, invalid.size(1), {}, {}};
  const auto mask = invalid.accessor<bool, 3>();
  l.live.resize(l.chunks);
  l.runs.resize(l.chunks);
  for (int64_t c = 0; c < l.chunks; ++c) {
    for (int64_t s = 0; s < l.slots; ++s) {
      bool dead = true;
      for (int64_t r = 0; r < l.mask_rows && dead; ++r) dead = mask[c][r][s];
      if (dead) continue;
      l.live[c].push_back(s);
      Runs& runs = l.runs[c];
      if (!runs.empty() && runs.back().first + runs.back().second == s) {
        ++runs.back().second;
      } else {
        runs.emplace_back(s, 1);
      }
    }
  }
  return l;
}

template <typename T>
void gather_rows(const T* table, const int64_t* index, const std::vector<int64_t>& live, int64_t dims, T* out) {
  for (size_t j = 0; j < live.size(); ++j) std::copy_n(table + index[live[j]] * dims, dims, out + j * dims);
}

template <typename T>
void add_rows(T* table, const int64_t* index, const std::vector<int64_t>& live, int64_t dims, const T* rows) {
  for (size_t j = 0; j < live.size(); ++j) {
    T* target = table + index[live[j]] * dims;
    const T* source = rows + j * dims;
#pragma omp simd
    for (int64_t e = 0; e < dims; ++e) target[e] += source[e];
  }
}

// The chunk's scores (queries x s, s live slots) become probabilities in place: bias added, masked
// slots -inf, then exp(score - shift). The forward takes the shift from the row's maximum, normalises
// and stores the log-sum-exp in lse; the backward passes the stored lse as the shift.
// target_clones: an AVX2 copy beside the baseline one, chosen when the library loads.
template <typename T>
__attribute__((target_clones("avx2", "default"))) void softmax_rows(T* scores, const Layout& l, const Runs& runs,
                                                                    int64_t s, const T* bias, const bool* mask,
                                                                    T* lse, bool forward) {
  const T minus_inf = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < l.queries; ++i) {
    T* row = scores + i * s;
    // bool read as bytes: a select on a bool load does not vectorise
    const uint8_t* row_mask = reinterpret_cast<const uint8_t*>(mask) + (l.mask_rows == 1 ? 0 : i) * l.slots;
    const T* row_bias = bias == nullptr ? nullptr : bias + i * l.slots;
    int64_t at = 0;
    for (const auto& [column, length] : runs) {
      T* part = row + at;
      const uint8_t* blocked = row_mask + column;
      const T* part_bias = row_bias == nullptr ? nullptr : row_bias + column;
#pragma omp simd
      for (int64_t j = 0; j < length; ++j) {
        const T x = part_bias == nullptr ? part[j] : part[j] + part_bias[j];
        part[j] = blocked[j] ? minus_inf : x;
      }
      at += length;
    }
    T shift = lse[i];
    if (forward) {
      shift = minus_inf;
#pragma omp simd reduction(max : shift)
      for (int64_t j = 0; j < s; ++j) shift = row[j] > shift ? row[j] : shift;
    }
#pragma omp simd
    for (int64_t j = 0; j < s; ++j) row[j] = exp_vectorisable(row[j] - shift);
    if (!forward) continue;
    T total = 0;
#pragma omp simd reduction(+ : total)
    for (int64_t j = 0; j < s; ++j) total += row[j];
    const T inverse = T(1) / total;
#pragma omp simd
    for (int64_t j = 0; j < s; ++j) row[j] *= inverse;
    lse[i] = shift + std::log(total);
  }
}

// grad_scores holds grad_out v_slots^T on entry and leaves as the scores' gradient
// p * (grad_out v^T - grad_out . out); its columns are added into the bias gradient of the row of B*H.
template <typename T>
__attribute__((target_clones("avx2", "default"))) void softmax_backward_rows(T* grad_scores, const T* probs,
                                                                             const T* grad_out, const T* out,
                                                                             const Layout& l, const Runs& runs,
                                                                             int64_t s, T* grad_bias) {
  for (int64_t i = 0; i < l.queries; ++i) {
    const T* g = grad_out + i * l.dims;
    const T* o = out + i * l.dims;
    T dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t e = 0; e < l.dims; ++e) dot += g[e] * o[e];
    T* row = grad_scores + i * s;
    const T* p = probs + i * s;
#pragma omp simd
    for (int64_t j = 0; j < s; ++j) row[j] = p[j] * (row[j] - dot);
    if (grad_bias == nullptr) continue;
    T* bias_row = grad_bias + i * l.slots;
    int64_t at = 0;
    for (const auto& [column, length] : runs) {
#pragma omp simd
      for (int64_t j = 0; j < length; ++j) bias_row[column + j] += row[at + j];
      at += length;
    }
  }
}

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& index,
                  const at::Tensor& invalid, const c10::optional<at::Tensor>& bias) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 3 && v.sizes() == k.sizes() && q.size(3) == k.size(2),
              "sliding_chunk cpu: expected q (B*H, C, w^2, d) and k, v (B*H, T, d)");
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous(), "sliding_chunk cpu: inputs must be contiguous");
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
              "sliding_chunk cpu: q, k, v must share one dtype");
  TORCH_CHECK(index.scalar_type() == at::kLong && index.is_contiguous() && index.size(0) == q.size(1),
              "sliding_chunk cpu: expected a contiguous int64 index (C, S)");
  TORCH_CHECK(invalid.scalar_type() == at::kBool && invalid.is_contiguous() && invalid.size(2) == index.size(1),
              "sliding_chunk cpu: expected a contiguous bool mask (C, 1 or w^2, S)");
  TORCH_CHECK(!bias.has_value() || (bias->is_contiguous() && bias->scalar_type() == q.scalar_type() &&
                                    bias->size(1) == q.size(2) && bias->size(2) == index.size(1)),
              "sliding_chunk cpu: expected a contiguous bias (H, w^2, S) of q's dtype");
}

template <typename T>
struct Pointers {
  const T *q, *k, *v, *bias;
  const int64_t* index;
  const bool* invalid;
};

template <typename T>
Pointers<T> pointers(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& index,
                     const at::Tensor& invalid, const c10::optional<at::Tensor>& bias) {
  return {q.data_ptr<T>(), k.data_ptr<T>(), v.data_ptr<T>(), bias.has_value() ? bias->data_ptr<T>() : nullptr,
          index.data_ptr<int64_t>(), invalid.data_ptr<bool>()};
}

std::vector<at::Tensor> forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& index, const at::Tensor& invalid,
                                const c10::optional<at::Tensor>& bias) {
  check_inputs(q, k, v, index, invalid, bias);
  const Layout l = layout_of(q, k, index, invalid, bias.has_value() ? bias->size(0) : 1);
  at::Tensor out = at::empty_like(q), lse = at::empty({l.rows, l.chunks, l.queries}, q.options());
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "sliding_chunk_cpu_forward", [&] {
    const Pointers<scalar_t> in = pointers<scalar_t>(q, k, v, index, invalid, bias);
    scalar_t *out_data = out.data_ptr<scalar_t>(), *lse_data = lse.data_ptr<scalar_t>();
    at::parallel_for(0, l.rows * l.chunks, 1, [&](int64_t begin, int64_t end) {
      std::vector<scalar_t> keys(l.slots * l.dims), values(l.slots * l.dims), scores(l.queries * l.slots);
      for (int64_t task = begin; task < end; ++task) {
        const int64_t row = task / l.chunks, c = task % l.chunks;
        const int s = l.live[c].size(), d = l.dims, n = l.queries;
        const int64_t first_query = (row * l.chunks + c) * n;
        const int64_t* slot_rows = in.index + c * l.slots;
        gather_rows(in.k + row * l.table_rows * d, slot_rows, l.live[c], d, keys.data());
        gather_rows(in.v + row * l.table_rows * d, slot_rows, l.live[c], d, values.data());
        matmul<scalar_t>(false, true, n, s, d, in.q + first_query * d, d, keys.data(), d, scores.data(), s);
        softmax_rows<scalar_t>(scores.data(), l, l.runs[c], s,
                               in.bias == nullptr ? nullptr : in.bias + (row % l.heads) * n * l.slots,
                               in.invalid + c * l.mask_rows * l.slots, lse_data + first_query, true);
        matmul<scalar_t>(false, false, n, d, s, scores.data(), s, values.data(), d, out_data + first_query * d, d);
      }
    });
  });
  return {out, lse};
}

std::vector<at::Tensor> backward(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                                 const at::Tensor& v, const at::Tensor& index, const at::Tensor& invalid,
                                 const c10::optional<at::Tensor>& bias, const at::Tensor& out,
                                 const at::Tensor& lse) {
  check_inputs(q, k, v, index, invalid, bias);
  TORCH_CHECK(grad_out.is_contiguous() && out.is_contiguous() && lse.is_contiguous() && grad_out.sizes() == q.sizes(),
              "sliding_chunk cpu: expected contiguous grad_out and out shaped as q, and the forward's lse");
  const Layout l = layout_of(q, k, index, invalid, bias.has_value() ? bias->size(0) : 1);
  at::Tensor grad_q = at::empty_like(q), grad_k = at::zeros_like(k), grad_v = at::zeros_like(v);
  // per row of B*H (the caller sums the rows of a head): the rows are the tasks, so no two threads add
  // into the same numbers, and the same holds for grad_k and grad_v; empty without a bias
  at::Tensor grad_bias = at::zeros({bias.has_value() ? l.rows : 0, l.queries, l.slots}, q.options());
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "sliding_chunk_cpu_backward", [&] {
    const Pointers<scalar_t> in = pointers<scalar_t>(q, k, v, index, invalid, bias);
    const scalar_t *grad_out_data = grad_out.data_ptr<scalar_t>(), *out_data = out.data_ptr<scalar_t>();
    scalar_t* lse_data = lse.data_ptr<scalar_t>();
    scalar_t *grad_q_data = grad_q.data_ptr<scalar_t>(), *grad_k_data = grad_k.data_ptr<scalar_t>(),
             *grad_v_data = grad_v.data_ptr<scalar_t>();
    scalar_t* grad_bias_data = bias.has_value() ? grad_bias.data_ptr<scalar_t>() : nullptr;
    at::parallel_for(0, l.rows, 1, [&](int64_t begin, int64_t end) {
      const int64_t slot_elements = l.slots * l.dims, score_elements = l.queries * l.slots;
      std::vector<scalar_t> keys(slot_elements), values(slot_elements), grad_slots(slot_elements),
          probs(score_elements), grad_scores(score_elements);
      for (int64_t row = begin; row < end; ++row) {
        for (int64_t c = 0; c < l.chunks; ++c) {
          const int s = l.live[c].size(), d = l.dims, n = l.queries;
          const int64_t first_query = (row * l.chunks + c) * n;
          const scalar_t *q_chunk = in.q + first_query * d, *grad_out_chunk = grad_out_data + first_query * d;
          const int64_t* slot_rows = in.index + c * l.slots;
          gather_rows(in.k + row * l.table_rows * d, slot_rows, l.live[c], d, keys.data());
          gather_rows(in.v + row * l.table_rows * d, slot_rows, l.live[c], d, values.data());
          matmul<scalar_t>(false, true, n, s, d, q_chunk, d, keys.data(), d, probs.data(), s);
          softmax_rows<scalar_t>(probs.data(), l, l.runs[c], s,
                                 in.bias == nullptr ? nullptr : in.bias + (row % l.heads) * n * l.slots,
                                 in.invalid + c * l.mask_rows * l.slots, lse_data + first_query, false);
          matmul<scalar_t>(false, true, n, s, d, grad_out_chunk, d, values.data(), d, grad_scores.data(), s);
          softmax_backward_rows<scalar_t>(grad_scores.data(), probs.data(), grad_out_chunk, out_data + first_query * d,
                                          l, l.runs[c], s,
                                          grad_bias_data == nullptr ? nullptr : grad_bias_data + row * n * l.slots);
          matmul<scalar_t>(false, false, n, d, s, grad_scores.data(), s, keys.data(), d, grad_q_data + first_query * d,
                           d);
          matmul<scalar_t>(true, false, s, d, n, grad_scores.data(), s, q_chunk, d, grad_slots.data(), d);
          add_rows(grad_k_data + row * l.table_rows * d, slot_rows, l.live[c], d, grad_slots.data());
          matmul<scalar_t>(true, false, s, d, n, probs.data(), s, grad_out_chunk, d, grad_slots.data(), d);
          add_rows(grad_v_data + row * l.table_rows * d, slot_rows, l.live[c], d, grad_slots.data());
        }
      }
    });
  });
  return {grad_q, grad_k, grad_v, grad_bias};
}

}  // namespace

TORCH_LIBRARY(mmvisattn_sliding_chunk_cpu, m) {
  m.def("forward(Tensor q, Tensor k, Tensor v, Tensor index, Tensor invalid, Tensor? bias) -> Tensor[]");
  m.def("backward(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor index, Tensor invalid, Tensor? bias, "
        "Tensor out, Tensor lse) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(mmvisattn_sliding_chunk_cpu, CPU, m) {
  m.impl("forward", &forward);
  m.impl("backward", &backward);
}
