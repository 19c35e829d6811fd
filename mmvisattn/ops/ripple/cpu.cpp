// The local part of ripple attention on CPU ("Ripple attention for visual perception with
// sub-quadratic complexity", arXiv:2110.02453, Eq. 4-6): num_ij = sum beta_r(i, j) (q_ij . k_mn) v_mn
// and den_ij = sum beta_r(i, j) (q_ij . k_mn) over the tokens (m, n) of the Chebyshev groups
// r < R_max around (i, j). The arithmetic of pytorch.py's tiled_forward / tiled_backward, which is the
// twin these kernels are tested against, on the same tiles: T x T queries meet the halo of
// (T + 2 R_max - 2)^2 keys around them in two matrix products, and the ring weights are applied to
// the scores while they are in cache, one gather per score (weight_slots, a table of one tile's
// pairs); their gradient is summed by runs of each halo row (its middle is one group, the rest pairs
// of columns at equal distance). The maps are read in place: halos are gathered row by row with
// zeros outside the map, and the backward adds the halos' key and value gradients straight into the
// maps, so no padded map is built.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "../utils/cpu_kernels.h"

namespace {

using mmvisattn::matmul;

struct Grid {
  int64_t height, width, tokens, rings, tile, halo, side, keys, tile_rows, tile_cols;

  Grid(int64_t height, int64_t width, int64_t rings, int64_t tile)
      : height(height), width(width), tokens(height * width), rings(rings), tile(tile), halo(rings - 1),
        side(tile + 2 * (rings - 1)), keys(side * side), tile_rows((height + tile - 1) / tile),
        tile_cols((width + tile - 1) / tile) {}

  int64_t tiles() const { return tile_rows * tile_cols; }
};

// Copy the T x T queries of the tile with top-left token (y0, x0) from a (tokens, channels) map into
// rows of `stride` (channels unless given) numbers; rows outside the map are zero.
template <typename T>
void gather_tile(const T* map, const Grid& g, int64_t y0, int64_t x0, int64_t channels, T* out, int64_t stride = 0) {
  for (int64_t a = 0; a < g.tile * g.tile; ++a) {
    const int64_t y = y0 + a / g.tile, x = x0 + a % g.tile;
    T* row = out + a * (stride > 0 ? stride : channels);
    if (y < g.height && x < g.width) {
      std::copy_n(map + (y * g.width + x) * channels, channels, row);
    } else {
      std::fill_n(row, channels, T(0));
    }
  }
}

// Calls visit(halo_row, first_column, count, map_token) for the in-map run of every halo row of the
// tile with top-left token (y0, x0): halo rows and columns start R_max - 1 before the tile.
template <typename Visit>
void for_each_halo_run(const Grid& g, int64_t y0, int64_t x0, Visit visit) {
  const int64_t left = x0 - g.halo;
  const int64_t first = std::max<int64_t>(0, -left), last = std::min<int64_t>(g.side, g.width - left);
  for (int64_t i = 0; i < g.side; ++i) {
    const int64_t y = y0 - g.halo + i;
    if (y < 0 || y >= g.height || first >= last) continue;
    visit(i, first, last - first, y * g.width + left + first);
  }
}

// The (keys, channels) halo of a tile from a (tokens, channels) map, zeros outside the map.
template <typename T>
void gather_halo(const T* map, const Grid& g, int64_t y0, int64_t x0, int64_t channels, T* out) {
  std::fill_n(out, g.keys * channels, T(0));
  for_each_halo_run(g, y0, x0, [&](int64_t i, int64_t first, int64_t count, int64_t token) {
    std::copy_n(map + token * channels, count * channels, out + (i * g.side + first) * channels);
  });
}

// Adjoint of gather_halo: add (keys, channels) rows into the map.
template <typename T>
void add_halo(T* map, const Grid& g, int64_t y0, int64_t x0, int64_t channels, const T* halo) {
  for_each_halo_run(g, y0, x0, [&](int64_t i, int64_t first, int64_t count, int64_t token) {
    T* target = map + token * channels;
    const T* source = halo + (i * g.side + first) * channels;
#pragma omp simd
    for (int64_t e = 0; e < count * channels; ++e) target[e] += source[e];
  });
}

// Calls ring(row, centre, dy) for every halo row of query a within R_max - 1 rows of it: row is the
// query's (keys,) scores of that halo row, centre the query's column in it, dy the row distance. In
// such a row the columns within dy of the centre are group dy, those at distance d > dy group d.
template <typename T, typename Ring>
void for_each_ring_row(T* scores, const Grid& g, int64_t a, Ring ring) {
  const int64_t centre_row = a / g.tile + g.halo, centre = a % g.tile + g.halo;
  for (int64_t i = centre_row - g.halo; i <= centre_row + g.halo; ++i) {
    ring(scores + i * g.side, centre, std::abs(i - centre_row));
  }
}

// Position of every (query, key) pair of a tile in the tile's (T^2, R_max + 1) ring weights, whose
// last column is 0 (groups >= R_max): weighing the scores is then one gather per score.
std::vector<int32_t> weight_slots(const Grid& g) {
  std::vector<int32_t> slots(g.tile * g.tile * g.keys);
  for (int64_t a = 0; a < g.tile * g.tile; ++a) {
    const int64_t row = a / g.tile + g.halo, col = a % g.tile + g.halo;
    for (int64_t b = 0; b < g.keys; ++b) {
      const int64_t group = std::max(std::abs(b / g.side - row), std::abs(b % g.side - col));
      slots[a * g.keys + b] = a * (g.rings + 1) + std::min(group, g.rings);
    }
  }
  return slots;
}

// Scores of a tile (T^2, keys) times the ring weight of each pair; weights (T^2, R_max + 1).
template <typename T>
__attribute__((target_clones("avx2", "default"))) void weigh(T* scores, const T* weights, const int32_t* slots,
                                                             int64_t count) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) scores[i] *= weights[slots[i]];
}

// The ring weights' gradient of a tile: grad_beta[a, r] = sum of products[a, b] over the keys b of
// group r, where products (T^2, keys) holds the weighted scores' gradient times the scores.
template <typename T>
__attribute__((target_clones("avx2", "default"))) void ring_sums(T* products, const Grid& g, T* grad_beta) {
  for (int64_t a = 0; a < g.tile * g.tile; ++a) {
    T* sums = grad_beta + a * g.rings;
    std::fill_n(sums, g.rings, T(0));
    for_each_ring_row(products + a * g.keys, g, a, [&](T* row, int64_t centre, int64_t dy) {
      T middle = 0;
#pragma omp simd reduction(+ : middle)
      for (int64_t x = centre - dy; x <= centre + dy; ++x) middle += row[x];
      sums[dy] += middle;
      for (int64_t d = dy + 1; d <= g.halo; ++d) sums[d] += row[centre - d] + row[centre + d];
    });
  }
}

template <typename T>
__attribute__((target_clones("avx2", "default"))) void row_sums(const T* rows, int64_t count, int64_t length,
                                                                T* sums) {
  for (int64_t a = 0; a < count; ++a) {
    T total = 0;
#pragma omp simd reduction(+ : total)
    for (int64_t b = 0; b < length; ++b) total += rows[a * length + b];
    sums[a] = total;
  }
}

// grad_weighted (T^2, keys) holds grad_num . v_mn on entry and gains grad_den per query: the weighted
// scores' gradient; products gets it times the scores, what the ring weights' gradient sums.
template <typename T>
__attribute__((target_clones("avx2", "default"))) void add_den_gradient(T* grad_weighted, const T* scores,
                                                                        const T* grad_den, int64_t queries,
                                                                        int64_t keys, T* products) {
  for (int64_t a = 0; a < queries; ++a) {
    T* row = grad_weighted + a * keys;
    const T* score_row = scores + a * keys;
    T* product_row = products + a * keys;
    const T shift = grad_den[a];
#pragma omp simd
    for (int64_t b = 0; b < keys; ++b) {
      row[b] += shift;
      product_row[b] = row[b] * score_row[b];
    }
  }
}

// Write the (T^2, channels) rows of a tile's queries that lie inside the map into it.
template <typename T>
void put_tile(T* map, const Grid& g, int64_t y0, int64_t x0, int64_t channels, const T* rows) {
  for (int64_t a = 0; a < g.tile * g.tile; ++a) {
    const int64_t y = y0 + a / g.tile, x = x0 + a % g.tile;
    if (y < g.height && x < g.width) std::copy_n(rows + a * channels, channels, map + (y * g.width + x) * channels);
  }
}

// What both passes start a tile with: its queries, ring weights, halo keys and values gathered from
// one slice's maps, and the scores q k^T (T^2, keys), not yet weighted.
template <typename T>
struct TileScores {
  const Grid& g;
  int64_t dims, value_dims;
  // weights: the ring weights with a last zero column (weight_slots), which the gathers leave untouched
  std::vector<T> q_tile, weights, keys, values, scores;

  TileScores(const Grid& g, int64_t dims, int64_t value_dims)
      : g(g), dims(dims), value_dims(value_dims), q_tile(queries() * dims), weights(queries() * (g.rings + 1), 0),
        keys(g.keys * dims), values(g.keys * value_dims), scores(queries() * g.keys) {}

  int64_t queries() const { return g.tile * g.tile; }

  void load(const T* q, const T* beta, const T* k, const T* v, int64_t y0, int64_t x0) {
    gather_tile(q, g, y0, x0, dims, q_tile.data());
    gather_tile(beta, g, y0, x0, g.rings, weights.data(), g.rings + 1);
    gather_halo(k, g, y0, x0, dims, keys.data());
    gather_halo(v, g, y0, x0, value_dims, values.data());
    matmul<T>(false, true, queries(), g.keys, dims, q_tile.data(), dims, keys.data(), dims, scores.data(), g.keys);
  }
};

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& beta,
                  int64_t height, int64_t width, int64_t tile) {
  TORCH_CHECK(q.dim() == 3 && k.sizes() == q.sizes() && v.dim() == 3 && beta.dim() == 3,
              "ripple cpu: expected q, k (S, N, D), v (S, N, E), beta (S, N, R_max)");
  TORCH_CHECK(q.size(1) == height * width && v.size(1) == q.size(1) && beta.size(1) == q.size(1) &&
                  v.size(0) == q.size(0) && beta.size(0) == q.size(0),
              "ripple cpu: the tensors do not hold S maps of ", height, "x", width, " tokens");
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous() && beta.is_contiguous(),
              "ripple cpu: inputs must be contiguous");
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type() &&
                  beta.scalar_type() == q.scalar_type(),
              "ripple cpu: q, k, v and beta must share one dtype");
  TORCH_CHECK(tile > 0 && beta.size(2) > 0, "ripple cpu: expected a positive tile side and R_max");
}

std::vector<at::Tensor> forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& beta, int64_t height, int64_t width, int64_t tile) {
  check_inputs(q, k, v, beta, height, width, tile);
  const Grid g(height, width, beta.size(2), tile);
  const int64_t slices = q.size(0), dims = q.size(2), value_dims = v.size(2), queries = tile * tile;
  at::Tensor num = at::empty_like(v), den = at::empty({slices, g.tokens, 1}, q.options());
  const std::vector<int32_t> slots = weight_slots(g);
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "ripple_cpu_forward", [&] {
    const scalar_t *q_data = q.data_ptr<scalar_t>(), *k_data = k.data_ptr<scalar_t>(),
                   *v_data = v.data_ptr<scalar_t>(), *beta_data = beta.data_ptr<scalar_t>();
    scalar_t *num_data = num.data_ptr<scalar_t>(), *den_data = den.data_ptr<scalar_t>();
    at::parallel_for(0, slices * g.tiles(), 1, [&](int64_t begin, int64_t end) {
      TileScores<scalar_t> tile_scores(g, dims, value_dims);
      std::vector<scalar_t> num_tile(queries * value_dims), den_tile(queries);
      scalar_t* scores = tile_scores.scores.data();
      for (int64_t task = begin; task < end; ++task) {
        const int64_t s = task / g.tiles(), y0 = task % g.tiles() / g.tile_cols * tile,
                      x0 = task % g.tile_cols * tile;
        tile_scores.load(q_data + s * g.tokens * dims, beta_data + s * g.tokens * g.rings,
                         k_data + s * g.tokens * dims, v_data + s * g.tokens * value_dims, y0, x0);
        weigh(scores, tile_scores.weights.data(), slots.data(), queries * g.keys);
        row_sums(scores, queries, g.keys, den_tile.data());
        matmul<scalar_t>(false, false, queries, value_dims, g.keys, scores, g.keys, tile_scores.values.data(),
                         value_dims, num_tile.data(), value_dims);
        put_tile(num_data + s * g.tokens * value_dims, g, y0, x0, value_dims, num_tile.data());
        put_tile(den_data + s * g.tokens, g, y0, x0, 1, den_tile.data());
      }
    });
  });
  return {num, den};
}

// The backward of the tiles of one slice: recompute the scores, then the gradients of the ring
// weights and queries (written per query) and of the halos' keys and values (added into the maps).
template <typename T>
struct TileBackward {
  const Grid& g;
  const int32_t* slots;  // weight_slots
  int64_t dims, value_dims;
  const T *q, *k, *v, *beta, *grad_num, *grad_den;  // the slice's maps
  T *grad_q, *grad_k, *grad_v, *grad_beta;
  TileScores<T> tile;
  std::vector<T> grad_num_tile, grad_den_tile, grad_weighted, products, grad_q_tile, grad_beta_tile, grad_halo;

  TileBackward(const Grid& g, const int32_t* slots, int64_t dims, int64_t value_dims)
      : g(g), slots(slots), dims(dims), value_dims(value_dims), tile(g, dims, value_dims),
        grad_num_tile(tile.queries() * value_dims), grad_den_tile(tile.queries()),
        grad_weighted(tile.queries() * g.keys), products(tile.queries() * g.keys),
        grad_q_tile(tile.queries() * dims), grad_beta_tile(tile.queries() * g.rings),
        grad_halo(g.keys * std::max(dims, value_dims)) {}

  void run(int64_t y0, int64_t x0) {
    const int n = tile.queries();
    T *scores = tile.scores.data(), *weights = tile.weights.data();
    tile.load(q, beta, k, v, y0, x0);
    gather_tile(grad_num, g, y0, x0, value_dims, grad_num_tile.data());
    gather_tile(grad_den, g, y0, x0, 1, grad_den_tile.data());
    matmul<T>(false, true, n, g.keys, value_dims, grad_num_tile.data(), value_dims, tile.values.data(), value_dims,
              grad_weighted.data(), g.keys);
    add_den_gradient(grad_weighted.data(), scores, grad_den_tile.data(), n, g.keys, products.data());
    ring_sums(products.data(), g, grad_beta_tile.data());
    put_tile(grad_beta, g, y0, x0, g.rings, grad_beta_tile.data());
    weigh(grad_weighted.data(), weights, slots, n * g.keys);  // now the scores' gradient
    matmul<T>(false, false, n, dims, g.keys, grad_weighted.data(), g.keys, tile.keys.data(), dims,
              grad_q_tile.data(), dims);
    put_tile(grad_q, g, y0, x0, dims, grad_q_tile.data());
    matmul<T>(true, false, g.keys, dims, n, grad_weighted.data(), g.keys, tile.q_tile.data(), dims,
              grad_halo.data(), dims);
    add_halo(grad_k, g, y0, x0, dims, grad_halo.data());
    weigh(scores, weights, slots, n * g.keys);  // the weighted scores
    matmul<T>(true, false, g.keys, value_dims, n, scores, g.keys, grad_num_tile.data(), value_dims,
              grad_halo.data(), value_dims);
    add_halo(grad_v, g, y0, x0, value_dims, grad_halo.data());
  }
};

std::vector<at::Tensor> backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& beta, int64_t height, int64_t width, int64_t tile,
                                 const at::Tensor& grad_num, const at::Tensor& grad_den) {
  check_inputs(q, k, v, beta, height, width, tile);
  TORCH_CHECK(grad_num.sizes() == v.sizes() && grad_num.is_contiguous() && grad_den.is_contiguous() &&
                  grad_den.numel() == q.size(0) * q.size(1),
              "ripple cpu: expected contiguous grad_num shaped as v and grad_den (S, N, 1)");
  const Grid g(height, width, beta.size(2), tile);
  const int64_t slices = q.size(0), dims = q.size(2), value_dims = v.size(2);
  at::Tensor grad_q = at::empty_like(q), grad_k = at::zeros_like(k), grad_v = at::zeros_like(v),
             grad_beta = at::empty_like(beta);
  // Tasks are bands of tile rows of a slice. Halos of tiles up to `reach` tile rows apart overlap, so
  // two passes keep threads from adding into the same key or value rows: first every band without
  // its last `reach` rows, then those rows, which lie more than `reach` rows from any other band's
  // (bands hold at least 2 reach rows). Bands, not slices alone: the module calls with one slice at a
  // time on large maps.
  const std::vector<int32_t> slots = weight_slots(g);
  const int64_t reach = (g.tile - 1 + 2 * g.halo) / g.tile;
  const int64_t bands = std::max<int64_t>(1, g.tile_rows / std::max<int64_t>(1, 2 * reach));  // R_max 1: reach 0
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "ripple_cpu_backward", [&] {
    for (const bool tail : {false, true}) {
      at::parallel_for(0, slices * bands, 1, [&](int64_t begin, int64_t end) {
        TileBackward<scalar_t> work(g, slots.data(), dims, value_dims);
        for (int64_t task = begin; task < end; ++task) {
          const int64_t s = task / bands, band = task % bands;
          const int64_t band_start = band * g.tile_rows / bands, band_end = (band + 1) * g.tile_rows / bands;
          const int64_t split = std::max(band_start, band_end - reach);
          work.q = q.data_ptr<scalar_t>() + s * g.tokens * dims;
          work.k = k.data_ptr<scalar_t>() + s * g.tokens * dims;
          work.v = v.data_ptr<scalar_t>() + s * g.tokens * value_dims;
          work.beta = beta.data_ptr<scalar_t>() + s * g.tokens * g.rings;
          work.grad_num = grad_num.data_ptr<scalar_t>() + s * g.tokens * value_dims;
          work.grad_den = grad_den.data_ptr<scalar_t>() + s * g.tokens;
          work.grad_q = grad_q.data_ptr<scalar_t>() + s * g.tokens * dims;
          work.grad_k = grad_k.data_ptr<scalar_t>() + s * g.tokens * dims;
          work.grad_v = grad_v.data_ptr<scalar_t>() + s * g.tokens * value_dims;
          work.grad_beta = grad_beta.data_ptr<scalar_t>() + s * g.tokens * g.rings;
          for (int64_t row = tail ? split : band_start; row < (tail ? band_end : split); ++row) {
            for (int64_t col = 0; col < g.tile_cols; ++col) work.run(row * tile, col * tile);
          }
        }
      });
    }
  });
  return {grad_q, grad_k, grad_v, grad_beta};
}

}  // namespace

TORCH_LIBRARY(mmvisattn_ripple_cpu, m) {
  m.def("forward(Tensor q, Tensor k, Tensor v, Tensor beta, int height, int width, int tile) -> Tensor[]");
  m.def("backward(Tensor q, Tensor k, Tensor v, Tensor beta, int height, int width, int tile, Tensor grad_num, "
        "Tensor grad_den) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(mmvisattn_ripple_cpu, CPU, m) {
  m.impl("forward", &forward);
  m.impl("backward", &backward);
}
