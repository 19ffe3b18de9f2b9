// Tensors in a chosen memory space: host tensors (HostTensor) and tensors in the default space,
// explicit copies between them (deep_copy, to_host, to_device, to_space) with their shape check,
// the host paths of safetensors, checkpoints and batches. In a host build HostTensor<T> and
// Tensor<T> are one type; so that the code for two different spaces runs here too, the same
// checks run against a second host-accessible memory space of the test's own (Kokkos'
// LogicalMemorySpace over HostSpace, which Kokkos has before 4.3), which distop treats as it
// treats a device space: managed Views, no host pool. In a device build the default space itself
// is the second space.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "distop/autodiff/var.hpp"
#include "distop/core/tensor.hpp"
#include "distop/data/batch.hpp"
#include "distop/dist/partition.hpp"
#include "distop/io/checkpoint.hpp"
#include "distop/io/safetensors.hpp"
#include "distop/nn/module.hpp"
#include "distop/optim/sgd.hpp"
#include "ramp_dataset.hpp"
#include "temp_dir.hpp"

#if KOKKOS_VERSION < 40300
#define DISTOP_TEST_LOGICAL_SPACE 1
#include "../../src/core/tensor_impl.hpp"

namespace {

struct TestSpaceName {
  static constexpr const char* get_name() { return "DistopTestSpace"; }
};
using TestSpace = Kokkos::Experimental::LogicalMemorySpace<Kokkos::HostSpace, void, TestSpaceName>;

}  // namespace

// Kokkos 3.4 finds two equally good partial specialisations of MemorySpaceAccess for
// AnonymousSpace and a LogicalMemorySpace (each is generic in the other argument); these name the
// answer (AnonymousSpace is assignable and accessible from and to any space).
namespace Kokkos::Impl {
template <>
struct MemorySpaceAccess<Kokkos::AnonymousSpace, TestSpace> {
  enum : bool { assignable = true, accessible = true, deepcopy = true };
};
template <>
struct MemorySpaceAccess<TestSpace, Kokkos::AnonymousSpace> {
  enum : bool { assignable = true, accessible = true, deepcopy = true };
};
}  // namespace Kokkos::Impl

// Every member of Tensor in the test's space, as the library instantiates them for its own.
template class distop::Tensor<float, TestSpace>;
using OtherTensor = distop::Tensor<float, TestSpace>;
// No conversion between spaces that differ: copies are explicit.
static_assert(!std::is_convertible_v<OtherTensor, distop::HostTensor<float>>);
static_assert(!std::is_convertible_v<distop::HostTensor<float>, OtherTensor>);
#else
#define DISTOP_TEST_LOGICAL_SPACE 0
#endif

using namespace distop;

namespace {

::testing::AssertionResult contains(const std::string& s, const std::string& part) {
  if (s.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << s << "\" does not contain \"" << part << "\"";
}

}  // namespace

static_assert(std::is_same_v<Tensor<float>, Tensor<float, MemSpace>>);
static_assert(std::is_same_v<HostTensor<double>::memory_space, Kokkos::HostSpace>);
static_assert(HostTensor<float>::host_accessible);
static_assert(std::is_same_v<HostTensor<float>, Tensor<float>> == !DISTOP_DEVICE_MEMORY_SPACE);
static_assert(DISTOP_DEVICE_MEMORY_SPACE == 0 ||
              (!std::is_convertible_v<Tensor<float>, HostTensor<float>> &&
               !std::is_convertible_v<HostTensor<float>, Tensor<float>>));

TEST(MemorySpace, HostTensorConstructionCloneSlice) {
  HostTensor<float> zero(Shape{2, 3});
  EXPECT_EQ(zero.shape(), (Shape{2, 3}));
  EXPECT_EQ(zero.to_vector(), std::vector<float>(6, 0.0f));

  auto h = HostTensor<float>::from_vector(Shape{2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(h.data()[4], 5.0f);  // host memory: dereferenced directly
  h.data()[4] = 50.0f;
  auto c = h.clone();
  EXPECT_NE(c.data(), h.data());
  c.data()[0] = -1.0f;
  EXPECT_EQ(h.to_vector(), (std::vector<float>{1, 2, 3, 4, 50, 6}));
  EXPECT_EQ(c.to_vector(), (std::vector<float>{-1, 2, 3, 4, 50, 6}));

  auto s = h.slice(2, Shape{2, 2});  // entries [2, 6), shared
  EXPECT_EQ(s.to_vector(), (std::vector<float>{3, 4, 50, 6}));
  s.fill(7.0f);
  EXPECT_EQ(h.to_vector(), (std::vector<float>{1, 2, 7, 7, 7, 7}));
  EXPECT_TRUE(h.shares_storage());
  EXPECT_THROW(h.slice(4, Shape{3}), Error);
  EXPECT_THROW(HostTensor<double>::from_vector(Shape{2}, {1.0}), Error);
}

TEST(MemorySpace, DeepCopiesBothWays) {
  const auto h = HostTensor<double>::from_vector(Shape{3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor<double> d(Shape{3, 2});
  const double* storage = d.data();
  deep_copy(d, h);               // host to the default space
  EXPECT_EQ(d.data(), storage);  // dst keeps its storage
  EXPECT_EQ(d.to_vector(), h.to_vector());

  HostTensor<double> back(Shape{3, 2});
  d.fill(9.0);
  deep_copy(back, d);  // the default space to host
  EXPECT_EQ(back.to_vector(), std::vector<double>(6, 9.0));
  EXPECT_EQ(h.to_vector(), (std::vector<double>{1, 2, 3, 4, 5, 6}));

  // to_host and to_device always copy, also where the spaces are one.
  const auto dh = to_device(h);
  EXPECT_EQ(dh.shape(), h.shape());
  EXPECT_NE(static_cast<const void*>(dh.data()), static_cast<const void*>(h.data()));
  EXPECT_EQ(dh.to_vector(), h.to_vector());
  const auto hd = to_host(d);
  EXPECT_NE(static_cast<const void*>(hd.data()), static_cast<const void*>(d.data()));
  EXPECT_EQ(hd.to_vector(), d.to_vector());
  deep_copy(d, d);  // a tensor onto itself: nothing to do
  EXPECT_EQ(d.to_vector(), std::vector<double>(6, 9.0));

  // Empty tensors copy too.
  HostTensor<double> e0(Shape{0, 4});
  Tensor<double> e1(Shape{0, 4});
  deep_copy(e1, e0);
  EXPECT_EQ(to_host(e1).shape(), (Shape{0, 4}));
}

TEST(MemorySpace, ShapeMismatchIsAnError) {
  const auto h = HostTensor<float>::from_vector(Shape{2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor<float> d(Shape{3, 2});  // the same count, another shape
  try {
    deep_copy(d, h);
    FAIL() << "expected distop::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "deep_copy");
    EXPECT_TRUE(contains(e.detail(), "[2, 3]")) << e.detail();
    EXPECT_TRUE(contains(e.detail(), "[3, 2]")) << e.detail();
  }
  EXPECT_EQ(d.to_vector(), std::vector<float>(6, 0.0f));  // untouched
  HostTensor<float> small(Shape{5});
  EXPECT_THROW(deep_copy(small, d), Error);
#if DISTOP_TEST_LOGICAL_SPACE
  OtherTensor other(Shape{6});
  EXPECT_THROW(deep_copy(other, h), Error);
#endif
}

#if DISTOP_TEST_LOGICAL_SPACE
// The code for two different spaces, run against the test's space.
TEST(MemorySpace, AnotherSpaceHasManagedStorageAndExplicitCopies) {
  OtherTensor z(Shape{2, 2});
  EXPECT_EQ(z.to_vector(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(z.view().use_count(), 1);  // a managed View, no pool block
  {
    const OtherTensor copy = z;  // shares storage
    EXPECT_EQ(copy.view().use_count(), 2);
    EXPECT_TRUE(z.shares_storage());
  }
  EXPECT_FALSE(z.shares_storage());

  const auto h = HostTensor<float>::from_vector(Shape{2, 3}, {1, 2, 3, 4, 5, 6});
  const OtherTensor o = to_space<TestSpace>(h);
  EXPECT_EQ(o.shape(), h.shape());
  EXPECT_EQ(o.to_vector(), h.to_vector());
  auto s = o.slice(3, Shape{3});
  EXPECT_EQ(s.to_vector(), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(o.view().use_count(), 2);  // the slice keeps the allocation alive
  s.fill(-2.0f);
  EXPECT_EQ(o.to_vector(), (std::vector<float>{1, 2, 3, -2, -2, -2}));
  EXPECT_EQ(h.to_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));  // a copy, not shared

  const auto c = o.clone();
  EXPECT_EQ(c.view().use_count(), 1);
  EXPECT_EQ(c.to_vector(), o.to_vector());
  OtherTensor r(Shape{6});
  r.copy_from(c.reshaped(Shape{6}));
  EXPECT_EQ(r.to_vector(), o.to_vector());

  // Across spaces both ways, and on to the default space.
  HostTensor<float> back(Shape{2, 3});
  deep_copy(back, o);
  EXPECT_EQ(back.to_vector(), (std::vector<float>{1, 2, 3, -2, -2, -2}));
  const Tensor<float> d = to_device(o);
  EXPECT_EQ(d.to_vector(), back.to_vector());
  OtherTensor from_d(Shape{2, 3});
  deep_copy(from_d, d);
  EXPECT_EQ(from_d.to_vector(), back.to_vector());
  const auto fv = OtherTensor::from_vector(Shape{2}, {8, 9});
  EXPECT_EQ(to_host(fv).to_vector(), (std::vector<float>{8, 9}));
}
#endif

TEST(MemorySpace, SafetensorsThroughHostTensors) {
  test::TempDir dir("distop_memory_space");
  const std::string path = dir.file("t.safetensors");
  std::map<std::string, HostTensor<float>> host{
      {"a", HostTensor<float>::from_vector(Shape{2, 2}, {1, 2, 3, 4})}};
  io::write_safetensors(path, host);
  const auto file = io::SafetensorsFile::open(path);
  const HostTensor<float> a = file.read_host_tensor_f32("a", Shape{2, 2});
  EXPECT_EQ(a.to_vector(), (std::vector<float>{1, 2, 3, 4}));
  const Tensor<float> ad = file.read_tensor_f32("a", Shape{2, 2});
  EXPECT_EQ(ad.to_vector(), a.to_vector());
  EXPECT_THROW(file.read_host_tensor_f32("a", Shape{4}), Error);
  EXPECT_THROW(file.read_host_tensor_f64("a", Shape{2, 2}), Error);  // F32 in the file

  // Tensors of the default space are written through host copies.
  std::map<std::string, Tensor<double>> dev{
      {"b", Tensor<double>::from_vector(Shape{3}, {0.5, -1.5, 2.25})}};
  io::write_safetensors(dir.file("d.safetensors"), dev);
  EXPECT_EQ(io::SafetensorsFile::open(dir.file("d.safetensors"))
                .read_host_tensor_f64("b", Shape{3})
                .to_vector(),
            (std::vector<double>{0.5, -1.5, 2.25}));
}

// A model of one parameter, "w".
class OneParameter : public nn::Module<float> {
 public:
  explicit OneParameter(Var<float> w) { register_parameter("w", std::move(w)); }
};

// A checkpoint round trip (one rank): the parameters and the optimizer's state are assembled into
// host memory, written, read into host memory and copied back into the parameters' space.
TEST(MemorySpace, CheckpointRoundTripThroughTheHostPath) {
  test::TempDir dir("distop_memory_space");
  const TensorSpace space(Shape{2, 3}, Partition::world({1, 1}, {0}));
  auto values = DistTensor<float>::from_local(
      space, Tensor<float>::from_vector(Shape{2, 3}, {1, -2, 3, -4, 5, -6}));
  Var<float> w(values, true);
  OneParameter model(w);
  optim::SGD<float> opt({w}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  w.grad().local().fill(0.5f);
  opt.step();  // w - 0.05, and a momentum buffer of 0.5
  const auto saved = w.value().local().to_vector();
  io::save_checkpoint(dir.str(), model, opt, io::CheckpointInfo{.epoch = 2, .global_step = 7});

  // The file holds the values, read as a host tensor.
  const auto file = io::SafetensorsFile::open(io::checkpoint_path(dir.str()));
  EXPECT_EQ(file.read_host_tensor_f32("w", Shape{2, 3}).to_vector(), saved);

  w.value().local().fill(0.0f);
  optim::SGD<float> fresh({w}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  const auto info = io::load_checkpoint(dir.str(), model, fresh);
  EXPECT_EQ(info.epoch, 2);
  EXPECT_EQ(info.global_step, 7);
  EXPECT_EQ(w.value().local().to_vector(), saved);
  // The momentum buffer came back too: the next step is the one the first optimizer would take.
  w.grad().local().fill(0.5f);
  fresh.step();
  const auto after = w.value().local().to_vector();
  for (std::size_t i = 0; i < saved.size(); ++i)
    EXPECT_FLOAT_EQ(after[i], saved[i] - 0.1f * (0.9f * 0.5f + 0.5f));
}

TEST(MemorySpace, BatchImagesAndLoadBatch) {
  const data::Dataset d = test::ramp_dataset(3, 2, 1, 2, 1.0f, {0, 1, 2});
  const std::vector<std::int64_t> examples{2, 0};
  const HostTensor<float> b = data::batch_images(d, examples);
  EXPECT_EQ(b.shape(), (Shape{2, 2, 1, 2}));
  EXPECT_EQ(b.to_vector(), (std::vector<float>{8, 9, 10, 11, 0, 1, 2, 3}));
  EXPECT_THROW(data::batch_images(d, {3}), Error);

  DistTensor<float> x(TensorSpace(Shape{2, 2, 1, 2}, Partition::world({1, 1, 1, 1}, {0})));
  data::load_batch(d, examples, x);
  EXPECT_EQ(x.local().to_vector(), b.to_vector());
  DistTensor<float> flat(TensorSpace(Shape{2, 4}, Partition::world({1, 1}, {0})));
  data::load_batch(d, examples, flat);
  EXPECT_EQ(flat.local().to_vector(), b.to_vector());
  DistTensor<float> wrong(TensorSpace(Shape{2, 3}, Partition::world({1, 1}, {0})));
  EXPECT_THROW(data::load_batch(d, examples, wrong), Error);
  EXPECT_THROW(data::load_batch(d, {0, 5}, flat), Error);
}
