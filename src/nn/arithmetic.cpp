#include "distop/nn/arithmetic.hpp"

#include <utility>

#include "distop/autodiff/function.hpp"
#include "distop/kernels/axpy.hpp"
#include "distop/kernels/box.hpp"
#include "distop/kernels/elementwise.hpp"
#include "spaces.hpp"

namespace distop::nn {

namespace {

enum class Kind { Add, Sub, Mul, Div };

// How this rank's box of the second operand b meets its box of the first, a.
struct Meeting {
  // b is held whole on every rank that holds a box of a, and `part` (a box of b's local tensor) is
  // what meets a's box: a's block along b's axes of a's extent, the whole of b's broadcast axes.
  // Otherwise b's box meets a's as it is (b in a's space, or aligned with it).
  bool whole = false;
  Box part;
  bool part_is_all = true;  // part is all of b's box
};

// The broadcasting rules of nn/arithmetic.hpp, checked from the spaces' metadata alone (every rank
// reaches the same verdict).
Meeting meet(const TensorSpace& as, const TensorSpace& bs, const char* op) {
  if (as == bs) return {};
  const Shape& ga = as.global_shape();
  const Shape& gb = bs.global_shape();
  const int ra = ga.rank();
  const int rb = gb.rank();
  bool fits = rb <= ra;
  for (int j = 0; fits && j < rb; ++j) fits = gb[j] == ga[j + ra - rb] || gb[j] == 1;
  DISTOP_CHECK(fits, op,
               "the second operand's shape must broadcast against the first's (torch's rules, "
               "the result taking the first's shape: the second's axes aligned with the first's "
               "trailing ones, each of the same extent or 1, none more); found ",
               as.str(), " and ", bs.str());
  // Aligned: on a's partition, each axis of a's extent split as a's (the broadcast ones, of
  // extent 1, cannot be split), so that each rank's box of b broadcasts against its box of a.
  const bool same_partition = bs.partition().same_as(as.partition());
  bool aligned = same_partition;
  for (int j = 0; aligned && j < rb; ++j) {
    const int i = j + ra - rb;
    if (gb[j] == ga[i]) aligned = detail::same_blocks(as, i, bs, j);
  }
  if (aligned) return {};
  // Held whole: unsplit, on a's partition (replicated) or by each process alone (a local copy,
  // as on Partition::self).
  bool unsplit = true;
  for (int j = 0; j < rb; ++j) unsplit = unsplit && !detail::split(bs, j);
  const bool everywhere = same_partition || bs.partition().parent_size() == 1;
  DISTOP_CHECK(unsplit && everywhere, op,
               "the second operand must either live on the first's partition with each of its axes "
               "of the first's extent split as the first's (the same blocks over the same grid "
               "axis), or be held whole (unsplit) on every rank that holds a box of the first "
               "(replicated on its partition, or a copy on each process, Partition::self); found ",
               as.str(), " and ", bs.str());
  Meeting m;
  m.whole = true;
  const Shape& a_box = as.local_shape();
  const auto& a_offset = as.local_offset();
  for (int j = 0; j < rb; ++j) {
    const int i = j + ra - rb;
    const bool matched = gb[j] == ga[i];
    m.part.offset.push_back(matched ? a_offset[static_cast<std::size_t>(i)] : 0);
    m.part.extent.push_back(matched ? a_box[i] : 1);
  }
  // A rank outside b's partition (then outside a's too) holds nothing of either.
  m.part_is_all = bs.local_shape().numel() == 0 || m.part == whole(bs.local_shape());
  return m;
}

// b's entries that meet a's box, as a tensor broadcasting against a's box.
template <class T>
Tensor<T> meeting_part(const Tensor<T>& b, const Meeting& m) {
  if (!m.whole || m.part_is_all) return b;
  auto part = Tensor<T>::uninitialized(Shape(m.part.extent));
  kernels::copy_box(b, m.part, part, whole(part.shape()));
  return part;
}

// g = beta g + the contribution that `write(beta, g_part)` writes for b's entries that meet a's
// box (zero elsewhere).
template <class T, class Write>
void accumulate_part(const Meeting& m, T beta, Tensor<T>& g, Write&& write) {
  if (!m.whole || m.part_is_all) {
    write(beta, g);
    return;
  }
  auto part = Tensor<T>::uninitialized(Shape(m.part.extent));
  write(T(0), part);
  if (beta == T(0))
    g.fill(T(0));
  else if (beta != T(1))
    kernels::scale(beta, g);
  kernels::copy_box(part, whole(part.shape()), g, m.part, true);
}

template <class T>
Var<T> binary(Tape& tape, const Var<T>& a, const Var<T>& b, Kind kind, const char* op) {
  DISTOP_CHECK(a.defined() && b.defined(), op,
               "an operand is an undefined (default-constructed) Var");
  const Meeting m = meet(a.space(), b.space(), op);
  return make_function<T>(tape, op, {a, b}, [&](bool recording) {
    const Tensor<T>& av = a.value().local();
    auto y = DistTensor<T>::uninitialized(a.space());
    Tensor<T> bv;
    if (av.numel() > 0) {
      bv = meeting_part(b.value().local(), m);
      if (kind == Kind::Mul)
        kernels::mul(T(1), av, bv, T(0), y.local());
      else if (kind == Kind::Div)
        kernels::div(T(1), av, bv, T(0), y.local());
      else
        kernels::add(av, kind == Kind::Sub ? T(-1) : T(1), bv, y.local());
    }
    // What the backward reads beyond the inputs: the part of b copied out of a whole b (mul and
    // div), and the output of div (shared, not copied).
    const bool copied = m.whole && !m.part_is_all;
    Tensor<T> b_part =
        recording && copied && (kind == Kind::Mul || kind == Kind::Div) ? bv : Tensor<T>();
    Tensor<T> output = recording && kind == Kind::Div ? y.local() : Tensor<T>();
    return Computed{std::move(y),
                    [kind, m, copied, b_part = std::move(b_part), output = std::move(output)](
                        const DistTensor<T>& dy, Gradients<T>& grads) {
                      const Tensor<T>& d = dy.local();
                      const Tensor<T>& a_value = grads.input(0).value().local();
                      const Tensor<T>& b_value = copied ? b_part : grads.input(1).value().local();
                      // b's gradient first: a's may take dy's storage. Each rank sums dy over the
                      // broadcast axes of its own box (its copy's component, the sum convention).
                      grads.accumulate(1, [&](T beta, Tensor<T>& g) {
                        accumulate_part(m, beta, g, [&](T beta_part, Tensor<T>& g_part) {
                          if (kind == Kind::Add || kind == Kind::Sub) {
                            kernels::sum_to(d, kind == Kind::Sub ? T(-1) : T(1), beta_part, g_part);
                          } else if (kind == Kind::Mul) {
                            kernels::sum_to(d, T(1), beta_part, g_part, &a_value);
                          } else if (d.numel() == 0) {  // div, nothing meets this box of b
                            if (beta_part == T(0)) g_part.fill(T(0));
                          } else {  // div: db = -sum(dy a / b^2) = -sum(dy y) / b
                            auto s = Tensor<T>::uninitialized(g_part.shape());
                            kernels::sum_to(d, T(1), T(0), s, &output);
                            kernels::div(T(-1), s, b_value, beta_part, g_part);
                          }
                        });
                      });
                      if (kind == Kind::Mul || kind == Kind::Div) {
                        grads.accumulate(0, [&](T beta, Tensor<T>& g) {
                          if (d.numel() == 0) return;
                          if (kind == Kind::Mul)
                            kernels::mul(T(1), d, b_value, beta, g);
                          else
                            kernels::div(T(1), d, b_value, beta, g);
                        });
                      } else {
                        grads.add_output_grad(0);
                      }
                    }};
  });
}

}  // namespace

template <class T>
Var<T> add(Tape& tape, const Var<T>& a, const Var<T>& b) {
  return binary(tape, a, b, Kind::Add, "add");
}
template <class T>
Var<T> sub(Tape& tape, const Var<T>& a, const Var<T>& b) {
  return binary(tape, a, b, Kind::Sub, "sub");
}
template <class T>
Var<T> mul(Tape& tape, const Var<T>& a, const Var<T>& b) {
  return binary(tape, a, b, Kind::Mul, "mul");
}
template <class T>
Var<T> div(Tape& tape, const Var<T>& a, const Var<T>& b) {
  return binary(tape, a, b, Kind::Div, "div");
}

template <class T>
Var<T> add(Tape& tape, const Var<T>& x, double s) {
  const T shift = static_cast<T>(s);
  return make_function<T>(tape, "add", {x}, [&] {
    auto y = DistTensor<T>::uninitialized(x.space());
    kernels::add_scalar(x.value().local(), shift, y.local());
    return Computed{std::move(y),
                    [](const DistTensor<T>&, Gradients<T>& grads) { grads.add_output_grad(0); }};
  });
}

template <class T>
Var<T> scale(Tape& tape, const Var<T>& x, double factor) {
  const T f = static_cast<T>(factor);
  return make_function<T>(tape, "scale", {x}, [&] {
    auto y = DistTensor<T>::uninitialized(x.space());
    kernels::scaled_add(f, x.value().local(), T(0), y.local());
    return Computed{std::move(y), [f](const DistTensor<T>& dy, Gradients<T>& grads) {
                      grads.accumulate(0, [&](T beta, Tensor<T>& g) {
                        kernels::scaled_add(f, dy.local(), beta, g);
                      });
                    }};
  });
}

template <class T>
Var<T> scale(Tape& tape, const Var<T>& x, const Var<T>& s) {
  DISTOP_CHECK(s.defined() && s.space().global_shape() == Shape{1}, "scale",
               "expected a scalar factor of global shape [1], found ",
               s.defined() ? s.space().str() : std::string("an undefined Var"));
  return binary(tape, x, s, Kind::Mul, "scale");
}

#define DISTOP_INSTANTIATE(T)                               \
  template Var<T> add(Tape&, const Var<T>&, const Var<T>&); \
  template Var<T> sub(Tape&, const Var<T>&, const Var<T>&); \
  template Var<T> mul(Tape&, const Var<T>&, const Var<T>&); \
  template Var<T> div(Tape&, const Var<T>&, const Var<T>&); \
  template Var<T> add(Tape&, const Var<T>&, double);        \
  template Var<T> scale(Tape&, const Var<T>&, double);      \
  template Var<T> scale(Tape&, const Var<T>&, const Var<T>&);
DISTOP_INSTANTIATE(float)
DISTOP_INSTANTIATE(double)
#undef DISTOP_INSTANTIATE

}  // namespace distop::nn
