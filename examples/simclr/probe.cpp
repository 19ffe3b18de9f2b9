#include "probe.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <vector>

namespace distop::examples {

namespace {

constexpr std::int64_t kClasses = 10;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The encoder's features of examples first, first + stride, ... below end of `d`: a [rows, F]
// tensor.
Tensor<float> encode(SimCLRNet& model, const data::Dataset& d, std::int64_t first,
                     std::int64_t stride, std::int64_t end, ProbeOptions::Features features) {
  const std::int64_t flat = model.feature_count(), n = d.pixels(), batch = 500;
  const std::int64_t channels = model.feature_channels(), positions = flat / channels;
  const std::int64_t f = features == ProbeOptions::Features::flat ? flat : channels;
  const std::int64_t rows = first < end ? (end - first + stride - 1) / stride : 0;
  auto out = Tensor<float>::uninitialized(Shape{rows, f});
  std::vector<float> v;
  for (std::int64_t r = 0; r < rows; r += batch) {
    const std::int64_t count = std::min(batch, rows - r);
    const auto space = model.input_space(count);
    v.resize(static_cast<std::size_t>(count * n));
    for (std::int64_t i = 0; i < count; ++i) {
      const float* img = d.image(first + (r + i) * stride);
      std::copy(img, img + n, v.begin() + i * n);
    }
    auto x =
        DistTensor<float>::from_local(space, Tensor<float>::from_vector(space.local_shape(), v));
    Tape tape;
    const auto h = model.features(tape, Var<float>(x)).value().local();
    if (features == ProbeOptions::Features::flat) {
      std::copy(h.data(), h.data() + count * f, out.data() + r * f);
    } else {  // channel-major maps: channel c is features [c positions, (c + 1) positions)
      for (std::int64_t i = 0; i < count; ++i)
        for (std::int64_t c = 0; c < channels; ++c) {
          const float* m = h.data() + i * flat + c * positions;
          out.data()[(r + i) * f + c] =
              std::accumulate(m, m + positions, 0.0f) / static_cast<float>(positions);
        }
    }
    tape.clear();
  }
  return out;
}

// logits = x W^T + b, then the softmax probabilities in place. Returns the summed cross-entropy
// and the number of rows whose largest logit is the label.
std::pair<double, std::int64_t> softmax_rows(const Tensor<float>& x, const Tensor<float>& w,
                                             const std::vector<float>& bias,
                                             const std::int32_t* labels, Tensor<float>& p) {
  const std::int64_t rows = x.extent(0);
  if (rows == 0) return {0.0, 0};
  kernels::gemm(kernels::Op::N, kernels::Op::T, 1.0f, x, w, 0.0f, p);
  double loss = 0;
  std::int64_t correct = 0;
  for (std::int64_t i = 0; i < rows; ++i) {
    float* z = p.data() + i * kClasses;
    for (std::int64_t c = 0; c < kClasses; ++c) z[c] += bias[static_cast<std::size_t>(c)];
    const auto top = std::max_element(z, z + kClasses) - z;
    const float m = z[top];
    double sum = 0;
    for (std::int64_t c = 0; c < kClasses; ++c) sum += std::exp(static_cast<double>(z[c] - m));
    loss += std::log(sum) - static_cast<double>(z[labels[i]] - m);
    correct += top == labels[i] ? 1 : 0;
    for (std::int64_t c = 0; c < kClasses; ++c)
      z[c] = static_cast<float>(std::exp(static_cast<double>(z[c] - m)) / sum);
  }
  return {loss, correct};
}

}  // namespace

ProbeResult linear_probe(SimCLRNet& model, const data::Dataset& train, const data::Dataset& test,
                         const ProbeOptions& o, int replicas, int replica, MPI_Comm world) {
  DISTOP_CHECK(o.epochs >= 0 && o.batch_size >= 1 && o.lr > 0 && o.weight_decay >= 0,
               "linear_probe", "needs epochs >= 0, batch_size >= 1, lr > 0 and weight_decay >= 0");
  ProbeResult r;
  r.train_examples = o.train_examples > 0 ? std::min(o.train_examples, train.size) : train.size;
  r.test_examples = test.size;
  const bool was_training = model.training();
  model.eval();
  auto start = std::chrono::steady_clock::now();
  const auto mine_test = data::shard({0, test.size}, replica, replicas);
  Tensor<float> x = encode(model, train, replica, replicas, r.train_examples, o.features);
  Tensor<float> xt = encode(model, test, mine_test.begin, 1, mine_test.end, o.features);
  model.train(was_training);
  r.feature_seconds = seconds_since(start);
  start = std::chrono::steady_clock::now();
  const std::int64_t f = x.extent(1), rows = x.extent(0), test_rows = xt.extent(0);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(rows));
  for (std::int64_t i = 0; i < rows; ++i)
    labels[static_cast<std::size_t>(i)] =
        train.labels[static_cast<std::size_t>(replica + i * replicas)];

  // Standardise every feature with the training set's mean and standard deviation.
  std::vector<double> moments(static_cast<std::size_t>(2 * f), 0.0);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < f; ++j) {
      const double v = x.data()[i * f + j];
      moments[static_cast<std::size_t>(j)] += v;
      moments[static_cast<std::size_t>(f + j)] += v * v;
    }
  MPI_Allreduce(MPI_IN_PLACE, moments.data(), static_cast<int>(moments.size()), MPI_DOUBLE, MPI_SUM,
                world);
  const double n = static_cast<double>(r.train_examples);
  std::vector<float> mean(static_cast<std::size_t>(f)), inv_std(static_cast<std::size_t>(f));
  for (std::int64_t j = 0; j < f; ++j) {
    const double m = moments[static_cast<std::size_t>(j)] / n;
    const double var = std::max(moments[static_cast<std::size_t>(f + j)] / n - m * m, 0.0);
    mean[static_cast<std::size_t>(j)] = static_cast<float>(m);
    inv_std[static_cast<std::size_t>(j)] = static_cast<float>(1.0 / std::sqrt(var + 1e-6));
  }
  auto standardise = [&](Tensor<float>& t) {
    for (std::int64_t i = 0; i < t.extent(0); ++i)
      for (std::int64_t j = 0; j < f; ++j) {
        float& v = t.data()[i * f + j];
        v = (v - mean[static_cast<std::size_t>(j)]) * inv_std[static_cast<std::size_t>(j)];
      }
  };
  standardise(x);
  standardise(xt);

  Tensor<float> w(Shape{kClasses, f});  // zero
  std::vector<float> bias(kClasses, 0.0f);
  Tensor<float> gw(Shape{kClasses, f});
  const std::size_t nw = static_cast<std::size_t>(kClasses * f);
  std::vector<double> grad(nw + kClasses), m1(nw + kClasses, 0.0), m2(nw + kClasses, 0.0);
  const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  // This replica's rows of global minibatch k: its examples replica + i R in [k m, (k + 1) m).
  auto first_row = [&](std::int64_t example) {
    return std::clamp<std::int64_t>((example - replica + replicas - 1) / replicas, 0, rows);
  };
  const std::int64_t batches = (r.train_examples + o.batch_size - 1) / o.batch_size;
  std::int64_t t = 0;
  for (int epoch = 0; epoch < o.epochs; ++epoch)
    for (std::int64_t k = 0; k < batches; ++k) {
      const std::int64_t lo = k * o.batch_size;
      const std::int64_t hi = std::min(lo + o.batch_size, r.train_examples);
      const std::int64_t r0 = first_row(lo), r1 = first_row(hi);
      const double m = static_cast<double>(hi - lo);
      std::fill(grad.begin(), grad.end(), 0.0);
      if (r1 > r0) {
        const Tensor<float> xb = x.slice(r0 * f, Shape{r1 - r0, f});
        Tensor<float> p(Shape{r1 - r0, kClasses});
        softmax_rows(xb, w, bias, labels.data() + r0, p);
        // d(mean cross-entropy)/dlogits = (P - Y) / m.
        for (std::int64_t i = 0; i < r1 - r0; ++i)
          p.data()[i * kClasses + labels[static_cast<std::size_t>(r0 + i)]] -= 1.0f;
        kernels::gemm(kernels::Op::T, kernels::Op::N, static_cast<float>(1.0 / m), p, xb, 0.0f, gw);
        for (std::size_t q = 0; q < nw; ++q) grad[q] = gw.data()[q];
        for (std::int64_t i = 0; i < r1 - r0; ++i)
          for (std::int64_t c = 0; c < kClasses; ++c)
            grad[nw + static_cast<std::size_t>(c)] += p.data()[i * kClasses + c] / m;
      }
      MPI_Allreduce(MPI_IN_PLACE, grad.data(), static_cast<int>(grad.size()), MPI_DOUBLE, MPI_SUM,
                    world);
      ++t;
      const double c1 = 1 - std::pow(beta1, static_cast<double>(t));
      const double c2 = 1 - std::pow(beta2, static_cast<double>(t));
      for (std::size_t q = 0; q < grad.size(); ++q) {
        float& v = q < nw ? w.data()[q] : bias[q - nw];
        const double g = grad[q] + (q < nw ? o.weight_decay * v : 0.0);
        m1[q] = beta1 * m1[q] + (1 - beta1) * g;
        m2[q] = beta2 * m2[q] + (1 - beta2) * g * g;
        v -= static_cast<float>(o.lr * (m1[q] / c1) / (std::sqrt(m2[q] / c2) + eps));
      }
    }
  double sums[3] = {0, 0, 0};
  Tensor<float> p(Shape{rows, kClasses}), pt(Shape{test_rows, kClasses});
  const auto [loss, correct] = softmax_rows(x, w, bias, labels.data(), p);
  sums[0] = loss;
  sums[1] = static_cast<double>(correct);
  sums[2] = static_cast<double>(
      softmax_rows(xt, w, bias, test.labels.data() + mine_test.begin, pt).second);
  MPI_Allreduce(MPI_IN_PLACE, sums, 3, MPI_DOUBLE, MPI_SUM, world);
  r.train_loss = sums[0] / n;
  r.train_accuracy = sums[1] / n;
  r.test_accuracy = sums[2] / static_cast<double>(std::max<std::int64_t>(test.size, 1));
  r.fit_seconds = seconds_since(start);
  return r;
}

}  // namespace distop::examples
