// The cuDNN operation graphs of the backend are well formed: every tensor, operation and the
// operation graph finalize (cuDNN checks attributes, types and shape consistency between
// producers and consumers there). Needs the cuDNN library, not a GPU: runs everywhere the CUDA
// backend is built. Whether an engine supports the graph is for the GPU tests (test_ops.cpp).
#include <gtest/gtest.h>

#include "mpitrain/backend/cuda/cudnn_ops.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain::cuda {
namespace {

TEST(CudnnGraphs, CausalAttentionForwardAndBackward) {
  // MHA (GPT-2 small's head shape) and GQA (Llama-style), bf16 and fp16
  for (const SdpaShape& s : {SdpaShape{8, 1024, 12, 12, 64, Precision::Bf16},
                             SdpaShape{2, 72, 8, 2, 128, Precision::Fp16}}) {
    ASSERT_TRUE(sdpa_shape_supported(s));
    auto fwd = sdpa_forward_graph(s);
    ASSERT_NO_THROW(fwd->finalize(nullptr)) << fwd->name();
    EXPECT_EQ(fwd->operations(), 14u);  // the composite forward of cuDNN's frontend
    auto bwd = sdpa_backward_graph(s);
    ASSERT_NO_THROW(bwd->finalize(nullptr)) << bwd->name();
    EXPECT_EQ(bwd->operations(), s.NH == s.NKV ? 22u : 24u);  // + one head sum each for dK, dV
  }
}

TEST(CudnnGraphs, UnsupportedShapesAreRecognised) {
  EXPECT_FALSE(sdpa_shape_supported({2, 64, 4, 4, 60, Precision::Bf16}));   // hs % 8
  EXPECT_FALSE(sdpa_shape_supported({2, 64, 4, 4, 512, Precision::Bf16}));  // hs > 256
  EXPECT_FALSE(sdpa_shape_supported({2, 64, 6, 4, 64, Precision::Bf16}));   // NH % NKV
  EXPECT_FALSE(sdpa_shape_supported({2, 64, 4, 4, 64, Precision::Fp32}));   // no fp32 engine
  EXPECT_FALSE(sdpa_shape_supported({2, 1, 4, 4, 64, Precision::Bf16}));    // T = 1
}

TEST(CudnnGraphs, Norms) {
  for (Precision io : {Precision::Fp32, Precision::Bf16, Precision::Fp16}) {
    for (bool layer : {true, false}) {
      auto fwd = norm_forward_graph(layer, 8192, 768, io);
      ASSERT_NO_THROW(fwd->finalize(nullptr)) << fwd->name();
      auto bwd = norm_backward_graph(layer, 8192, 768, io);
      ASSERT_NO_THROW(bwd->finalize(nullptr)) << bwd->name();
    }
  }
}

TEST(CudnnGraphs, BadGraphIsReportedWithCudnnsReason) {
  // a matmul whose inner dimensions disagree: finalize fails with cuDNN's status text
  dnn::Graph g("bad matmul");
  const auto& a = g.tensor(1, CUDNN_DATA_FLOAT, {1, 4, 8}, {32, 8, 1});
  const auto& b = g.tensor(2, CUDNN_DATA_FLOAT, {1, 5, 3}, {15, 3, 1});
  const auto& c = g.tensor(3, CUDNN_DATA_FLOAT, {1, 4, 3}, {12, 3, 1});
  try {
    g.matmul(a, b, c);
    g.finalize(nullptr);
    FAIL() << "an inconsistent matmul was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDNN_STATUS"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mpitrain::cuda
