// Reductions on the CPU: sum, mean, max, min and prod over any set of dims,
// and argmax/argmin along one dim.
//
// The dims of x are sorted into kept dims (out's size equals x's) and
// reduced dims (out's size is 1), neighbours of one kind merged when they
// chain, size-1 dims dropped. Then one of two plans runs:
//   inner plan: x's innermost dim is reduced (the sum of each row of a
//     matrix). Each output reduces its run of x; a dense run uses several
//     partial accumulators so the compiler vectorizes it. Threads split the
//     outputs, or, when there are too few outputs, each output's run.
//   outer plan: x's innermost dim is kept (the sum over the rows of a matrix,
//     as a bias gradient needs). A tile of columns is accumulated down the
//     reduced dims: out[j] += x[r, j], a dense vector loop. Threads split the
//     tiles.
// Accumulators: f32 for f32 and the half types, f64 for f64, i64 for
// integers and bool (wrapping on overflow). Max and min propagate NaN.
//
// Compiled once per CPU capability (kernels.h): these are KernelBackend's methods.
#include <limits>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"

namespace spmd::cpu::SPMD_CPU_CAP {
namespace {

template <class T>
using acc_t =
    std::conditional_t<std::is_same_v<T, double>, double,
                       std::conditional_t<std::is_integral_v<T>, int64_t, float>>;  // bool is
                                                                                    // integral

template <Reduction op, class A>
constexpr A identity_of() {
  if constexpr (op == Reduction::kSum || op == Reduction::kMean)
    return A(0);
  else if constexpr (op == Reduction::kProd)
    return A(1);
  else if constexpr (op == Reduction::kMax)
    return std::is_integral_v<A> ? std::numeric_limits<A>::lowest()
                                 : -std::numeric_limits<A>::infinity();
  else
    return std::is_integral_v<A> ? std::numeric_limits<A>::max()
                                 : std::numeric_limits<A>::infinity();
}

template <Reduction op, class A>
inline A combine(A acc, A v) {
  if constexpr (op == Reduction::kSum || op == Reduction::kMean) {
    if constexpr (std::is_integral_v<A>)
      return A(uint64_t(acc) + uint64_t(v));
    else
      return acc + v;
  } else if constexpr (op == Reduction::kProd) {
    if constexpr (std::is_integral_v<A>)
      return A(uint64_t(acc) * uint64_t(v));
    else
      return acc * v;
  } else if constexpr (op == Reduction::kMax) {
    return (v > acc || v != v) ? v : acc;  // once NaN, stays NaN
  } else {
    return (v < acc || v != v) ? v : acc;
  }
}

// The reduction of n dense elements, with kLanes independent accumulators
// (one or two vector registers) combined at the end.
template <Reduction op, class T, class A>
A reduce_dense(const T* x, int64_t n) {
  constexpr int kLanes = 16;
  A lanes[kLanes];
  for (A& l : lanes) l = identity_of<op, A>();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) lanes[k] = combine<op, A>(lanes[k], A(x[i + k]));
  A acc = identity_of<op, A>();
  for (int k = 0; k < kLanes; ++k) acc = combine<op, A>(acc, lanes[k]);
  for (; i < n; ++i) acc = combine<op, A>(acc, A(x[i]));
  return acc;
}

// x's dims split into kept and reduced ones (strides in elements), merged.
struct Geometry {
  int nk = 0, nr = 0;
  int64_t ksize[Shape::kMaxDims], kxs[Shape::kMaxDims], kos[Shape::kMaxDims];
  int64_t rsize[Shape::kMaxDims], rxs[Shape::kMaxDims];
  bool inner_reduced = true;  // x's innermost (non-trivial) dim is reduced
  int64_t n_out = 1, n_red = 1;
};

Geometry make_geometry(const Tensor& x, const Tensor& out) {
  Geometry g;
  for (int d = 0; d < x.ndim(); ++d) {
    const int64_t size = x.size(d);
    if (size == 1) continue;
    const bool reduced = out.size(d) == 1;
    int& n = reduced ? g.nr : g.nk;
    int64_t* sizes = reduced ? g.rsize : g.ksize;
    int64_t* xs = reduced ? g.rxs : g.kxs;
    // Merge into the previous dim of this kind when it is x's previous dim and chains.
    const bool prev_same = n > 0 && g.inner_reduced == reduced;
    if (prev_same && xs[n - 1] == x.stride(d) * size &&
        (reduced || g.kos[n - 1] == out.stride(d) * size)) {
      sizes[n - 1] *= size;
      xs[n - 1] = x.stride(d);
      if (!reduced) g.kos[n - 1] = out.stride(d);
    } else {
      sizes[n] = size;
      xs[n] = x.stride(d);
      if (!reduced) g.kos[n] = out.stride(d);
      ++n;
    }
    g.inner_reduced = reduced;
  }
  if (g.nr == 0) {  // nothing to reduce: one element per output
    g.rsize[0] = 1;
    g.rxs[0] = 0;
    g.nr = 1;
  }
  if (g.nk == 0) {  // a single output
    g.ksize[0] = 1;
    g.kxs[0] = g.kos[0] = 0;
    g.nk = 1;
    g.inner_reduced = true;
  }
  for (int d = 0; d < g.nk; ++d) g.n_out *= g.ksize[d];
  for (int d = 0; d < g.nr; ++d) g.n_red *= g.rsize[d];
  return g;
}

// Offsets (in elements) of x and out for output number o (row-major over the
// first `nk` kept dims).
inline void kept_offsets(const Geometry& g, int nk, int64_t o, int64_t& xoff, int64_t& ooff) {
  xoff = ooff = 0;
  for (int d = nk - 1; d >= 0; --d) {
    const int64_t i = o % g.ksize[d];
    o /= g.ksize[d];
    xoff += i * g.kxs[d];
    ooff += i * g.kos[d];
  }
}

// The offset of reduced element r (row-major over the first `nr` reduced dims).
inline int64_t reduced_offset(const Geometry& g, int nr, int64_t r) {
  int64_t off = 0;
  for (int d = nr - 1; d >= 0; --d) {
    off += (r % g.rsize[d]) * g.rxs[d];
    r /= g.rsize[d];
  }
  return off;
}

// The reduction of x's reduced elements [begin, end) at kept offset x.
template <Reduction op, class T, class A>
A reduce_span(const T* x, const Geometry& g, int64_t begin, int64_t end) {
  A acc = identity_of<op, A>();
  if (begin >= end) return acc;  // also the empty reduction (a size-0 dim)
  const int64_t inner = g.rsize[g.nr - 1], s = g.rxs[g.nr - 1];
  int64_t pos = begin % inner;
  for (int64_t done = begin; done < end;) {
    const T* p = x + reduced_offset(g, g.nr - 1, done / inner) + pos * s;
    const int64_t n = std::min(inner - pos, end - done);
    if (s == 1) {
      acc = combine<op, A>(acc, reduce_dense<op, T, A>(p, n));
    } else {
      for (int64_t i = 0; i < n; ++i) acc = combine<op, A>(acc, A(p[i * s]));
    }
    done += n;
    pos = 0;
  }
  return acc;
}

template <Reduction op, class A, class O>
inline O finish(A acc, int64_t n_red) {
  if constexpr (op == Reduction::kMean) {
    return convert_to<O>(acc * (A(1) / A(n_red)));
  } else {
    return convert_to<O>(acc);
  }
}

template <Reduction op, class T, class O>
void inner_plan(const T* x, O* out, const Geometry& g) {
  using A = acc_t<T>;
  const int threads = std::min(threads_for(g.n_red, kGrain), 256);
  if (g.n_out >= omp_get_max_threads() || threads <= 1) {
    parallel_for(g.n_out, std::max<int64_t>(1, kGrain / std::max<int64_t>(g.n_red, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t o = begin; o < end; ++o) {
                     int64_t xoff, ooff;
                     kept_offsets(g, g.nk, o, xoff, ooff);
                     out[ooff] =
                         finish<op, A, O>(reduce_span<op, T, A>(x + xoff, g, 0, g.n_red), g.n_red);
                   }
                 });
    return;
  }
  // Few outputs, long runs: the threads split each run, then the partials combine.
  for (int64_t o = 0; o < g.n_out; ++o) {
    int64_t xoff, ooff;
    kept_offsets(g, g.nk, o, xoff, ooff);
    A partial[256];
    const int64_t chunk = (g.n_red + threads - 1) / threads;
    note_thread_team();
#pragma omp parallel for num_threads(threads)
    for (int t = 0; t < threads; ++t)
      partial[t] = reduce_span<op, T, A>(x + xoff, g, std::min(g.n_red, t * chunk),
                                         std::min(g.n_red, (t + 1) * chunk));
    A acc = identity_of<op, A>();
    for (int t = 0; t < threads; ++t) acc = combine<op, A>(acc, partial[t]);
    out[ooff] = finish<op, A, O>(acc, g.n_red);
  }
}

template <Reduction op, class T, class O>
void outer_plan(const T* x, O* out, const Geometry& g) {
  using A = acc_t<T>;
  constexpr int64_t kTile = 512;
  const int64_t C = g.ksize[g.nk - 1], xs = g.kxs[g.nk - 1], os = g.kos[g.nk - 1];
  const int64_t tiles = (C + kTile - 1) / kTile, items = g.n_out / C * tiles;
  const int64_t grain = std::max<int64_t>(1, kGrain / (kTile * std::max<int64_t>(g.n_red, 1)));
  parallel_for(items, grain, [&](int64_t begin, int64_t end) {
    alignas(64) A acc[kTile];
    for (int64_t item = begin; item < end; ++item) {
      int64_t xoff, ooff;
      kept_offsets(g, g.nk - 1, item / tiles, xoff, ooff);
      const int64_t j0 = item % tiles * kTile, m = std::min(kTile, C - j0);
      std::fill_n(acc, m, identity_of<op, A>());
      for (int64_t r = 0; r < g.n_red; ++r) {
        const T* row = x + xoff + reduced_offset(g, g.nr, r) + j0 * xs;
        if (xs == 1) {
          for (int64_t j = 0; j < m; ++j) acc[j] = combine<op, A>(acc[j], A(row[j]));
        } else {
          for (int64_t j = 0; j < m; ++j) acc[j] = combine<op, A>(acc[j], A(row[j * xs]));
        }
      }
      O* o = out + ooff + j0 * os;
      for (int64_t j = 0; j < m; ++j) o[j * os] = finish<op, A, O>(acc[j], g.n_red);
    }
  });
}

template <Reduction op>
void reduce_op(const Tensor& x, const Tensor& out) {
  const Geometry g = make_geometry(x, out);
  if (g.n_out == 0) return;
  visit_dtype(x.dtype(), [&]<class T>() {
    visit_dtype(out.dtype(), [&]<class O>() {
      if constexpr (std::is_same_v<O, T> || std::is_same_v<O, int64_t>) {
        const T* xp = static_cast<const T*>(x.raw_data());
        O* op_ = static_cast<O*>(out.raw_data());
        if (g.inner_reduced)
          inner_plan<op, T, O>(xp, op_, g);
        else
          outer_plan<op, T, O>(xp, op_, g);
      } else {
        SPMD_THROW(InvalidArgument, "reduce: cannot reduce ", dtype_name(x.dtype()), " into ",
                   dtype_name(out.dtype()));
      }
    });
  });
}

}  // namespace

void KernelBackend::reduce(Reduction op, const Tensor& x, const Tensor& out) {
  SPMD_CHECK(out.ndim() == x.ndim(), "reduce: out has ", out.ndim(), " dims, x has ", x.ndim());
  switch (op) {
    case Reduction::kSum:
      return reduce_op<Reduction::kSum>(x, out);
    case Reduction::kMean:
      return reduce_op<Reduction::kMean>(x, out);
    case Reduction::kMax:
      return reduce_op<Reduction::kMax>(x, out);
    case Reduction::kMin:
      return reduce_op<Reduction::kMin>(x, out);
    case Reduction::kProd:
      return reduce_op<Reduction::kProd>(x, out);
  }
}

void KernelBackend::arg_reduce(bool is_max, const Tensor& x, int dim, const Tensor& out) {
  const int nd = x.ndim();
  const int64_t L = x.size(dim), step = x.stride(dim);
  // Views with `dim` moved last, so output o's run starts at byte_offset(.., o).
  Shape xshape = x.shape(), xstrides = x.strides(), oshape = out.shape(), ostrides = out.strides();
  for (Shape* s : {&xshape, &xstrides, &oshape, &ostrides}) s->erase(dim);
  xshape.push_back(L);
  xstrides.push_back(step);
  oshape.push_back(1);
  ostrides.push_back(1);
  const Tensor xv(x.storage(), xshape, xstrides, x.offset(), x.dtype());
  const Tensor ov(out.storage(), oshape, ostrides, out.offset(), out.dtype());
  const char* xbase = static_cast<const char*>(x.raw_data());
  char* obase = static_cast<char*>(out.raw_data());
  visit_dtype(x.dtype(), [&]<class T>() {
    using C = compute_t<T>;
    parallel_for(out.numel(), std::max<int64_t>(1, kGrain / std::max<int64_t>(L, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t o = begin; o < end; ++o) {
                     const T* p = reinterpret_cast<const T*>(xbase + byte_offset(xv, nd - 1, o));
                     int64_t best_i = 0;
                     C best = C(p[0]);
                     for (int64_t i = 1; i < L; ++i) {
                       const C v = C(p[i * step]);
                       const bool better = is_max ? v > best : v < best;
                       if ((better && best == best) || (v != v && best == best))
                         best = v, best_i = i;
                     }
                     *reinterpret_cast<int64_t*>(obase + byte_offset(ov, nd - 1, o)) = best_i;
                   }
                 });
  });
}

}  // namespace spmd::cpu::SPMD_CPU_CAP
