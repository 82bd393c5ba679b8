// A small RAII layer over cuDNN's graph (backend descriptor) API: descriptors that destroy
// themselves, a Graph that creates and keeps alive every tensor and operation of one operation
// graph, and a Plan (the first engine configuration from the heuristics whose execution plan
// builds). Each call is checked (CUDNN_CHECK) with cuDNN's own error text.
//
// Usage: describe tensors (UIDs unique within the graph; virtual = an intermediate that never
// reaches memory; by-value = a host scalar supplied at execution) and operations in topological
// order, finalize(), then make_plan(handle) — which throws CudnnUnsupported when cuDNN has no
// engine for the graph — and execute() with one pointer per non-virtual UID.
#pragma once

#include <cudnn_graph.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace mpitrain::cuda::dnn {

class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type);
  ~Descriptor();
  Descriptor(Descriptor&& other) noexcept : d_(other.d_) { other.d_ = nullptr; }
  Descriptor& operator=(Descriptor&&) = delete;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
           const void* values);
  void set(cudnnBackendAttributeName_t name, const Descriptor& d);  // one linked descriptor
  void set_i64(cudnnBackendAttributeName_t name, int64_t value);
  void set_i64s(cudnnBackendAttributeName_t name, const std::vector<int64_t>& values);
  void set_type(cudnnBackendAttributeName_t name, cudnnDataType_t type);
  void finalize();

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

enum class TensorKind { Memory, Virtual, ByValue };

class Graph {
 public:
  explicit Graph(std::string name) : name_(std::move(name)) {}
  const std::string& name() const { return name_; }

  // ---- tensors -----------------------------------------------------------------------------
  const Descriptor& tensor(int64_t uid, cudnnDataType_t type, const std::vector<int64_t>& dims,
                           const std::vector<int64_t>& strides,
                           TensorKind kind = TensorKind::Memory);
  // A by-value fp32 host scalar of rank `rank` (dims and strides all 1).
  const Descriptor& scalar(int64_t uid, int rank = 4);

  // ---- operations (each finalized and appended in order) ------------------------------------
  // y = mode(x[, b][, t]); math precision `prec`; axis for GEN_INDEX. BINARY_SELECT: y = t ? x : b.
  void pointwise(cudnnPointwiseMode_t mode, const Descriptor& x, const Descriptor* b,
                 const Descriptor& y, cudnnDataType_t prec = CUDNN_DATA_FLOAT,
                 const Descriptor* t = nullptr, int64_t axis = -1);
  void matmul(const Descriptor& a, const Descriptor& b, const Descriptor& c);  // c = a b, fp32
  void reduction(cudnnReduceTensorOp_t op, const Descriptor& x, const Descriptor& y);
  void reshape(const Descriptor& x, const Descriptor& y);
  // Training-phase norm forward (bias and mean null for RMSNorm).
  void norm_forward(cudnnBackendNormMode_t mode, const Descriptor& x, const Descriptor& scale,
                    const Descriptor* bias, const Descriptor& eps, const Descriptor& y,
                    const Descriptor* mean, const Descriptor& inv_variance);
  void norm_backward(cudnnBackendNormMode_t mode, const Descriptor& x, const Descriptor& dy,
                     const Descriptor& scale, const Descriptor* mean,
                     const Descriptor& inv_variance, const Descriptor& dscale,
                     const Descriptor* dbias, const Descriptor& dx);

  // The operation graph over every operation so far (handle may be null: set only if given).
  void finalize(cudnnHandle_t handle);
  const Descriptor& op_graph() const { return *op_graph_; }
  size_t operations() const { return ops_.size(); }

 private:
  Descriptor& make(cudnnBackendDescriptorType_t type);
  void add_op(Descriptor& op);

  std::string name_;
  std::deque<Descriptor> keep_;  // stable addresses: everything the graph links to
  std::vector<cudnnBackendDescriptor_t> ops_;
  std::unique_ptr<Descriptor> op_graph_;
};

// An execution plan for a finalized graph.
class Plan {
 public:
  // Heuristics `modes` in order; the first engine configuration whose plan finalizes wins.
  // Throws CudnnUnsupported (with cuDNN's reasons) when none does.
  Plan(const Graph& graph, cudnnHandle_t handle,
       const std::vector<cudnnBackendHeurMode_t>& modes = {CUDNN_HEUR_MODE_A});
  int64_t workspace_bytes() const { return workspace_; }
  // uids[i] -> pointers[i] for every non-virtual tensor (host pointers for by-value scalars).
  void execute(cudnnHandle_t handle, const std::vector<int64_t>& uids,
               const std::vector<void*>& pointers, void* workspace) const;

 private:
  std::deque<Descriptor> keep_;  // heuristics, engine configs
  std::unique_ptr<Descriptor> plan_;
  int64_t workspace_ = 0;
};

}  // namespace mpitrain::cuda::dnn
