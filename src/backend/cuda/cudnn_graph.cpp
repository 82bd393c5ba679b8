#include "mpitrain/backend/cuda/cudnn_graph.hpp"

#include "mpitrain/backend/cuda/check.hpp"

namespace mpitrain::cuda::dnn {

// ---- Descriptor -------------------------------------------------------------------------------

Descriptor::Descriptor(cudnnBackendDescriptorType_t type) {
  CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_));
}

Descriptor::~Descriptor() {
  if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
}

void Descriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                     int64_t count, const void* values) {
  CUDNN_CHECK(cudnnBackendSetAttribute(d_, name, type, count, values));
}

void Descriptor::set(cudnnBackendAttributeName_t name, const Descriptor& d) {
  cudnnBackendDescriptor_t v = d.get();
  set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}

void Descriptor::set_i64(cudnnBackendAttributeName_t name, int64_t value) {
  set(name, CUDNN_TYPE_INT64, 1, &value);
}

void Descriptor::set_i64s(cudnnBackendAttributeName_t name, const std::vector<int64_t>& values) {
  set(name, CUDNN_TYPE_INT64, static_cast<int64_t>(values.size()), values.data());
}

void Descriptor::set_type(cudnnBackendAttributeName_t name, cudnnDataType_t type) {
  set(name, CUDNN_TYPE_DATA_TYPE, 1, &type);
}

void Descriptor::finalize() { CUDNN_CHECK(cudnnBackendFinalize(d_)); }

// ---- Graph ------------------------------------------------------------------------------------

Descriptor& Graph::make(cudnnBackendDescriptorType_t type) { return keep_.emplace_back(type); }

void Graph::add_op(Descriptor& op) {
  op.finalize();
  ops_.push_back(op.get());
}

const Descriptor& Graph::tensor(int64_t uid, cudnnDataType_t type, const std::vector<int64_t>& dims,
                                const std::vector<int64_t>& strides, TensorKind kind) {
  if (dims.size() != strides.size())
    MPITRAIN_THROW(name_ + ": tensor dims and strides differ in rank");
  Descriptor& t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.set_type(CUDNN_ATTR_TENSOR_DATA_TYPE, type);
  t.set_i64s(CUDNN_ATTR_TENSOR_DIMENSIONS, dims);
  t.set_i64s(CUDNN_ATTR_TENSOR_STRIDES, strides);
  t.set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid);
  t.set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16);
  const bool yes = true;
  if (kind == TensorKind::Virtual) t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
  if (kind == TensorKind::ByValue)
    t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
  t.finalize();
  return t;
}

const Descriptor& Graph::scalar(int64_t uid, int rank) {
  const std::vector<int64_t> ones(rank, 1);
  return tensor(uid, CUDNN_DATA_FLOAT, ones, ones, TensorKind::ByValue);
}

void Graph::pointwise(cudnnPointwiseMode_t mode, const Descriptor& x, const Descriptor* b,
                      const Descriptor& y, cudnnDataType_t prec, const Descriptor* t,
                      int64_t axis) {
  Descriptor& pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  pw.set_type(CUDNN_ATTR_POINTWISE_MATH_PREC, prec);
  if (axis >= 0) pw.set_i64(CUDNN_ATTR_POINTWISE_AXIS, axis);
  pw.finalize();
  Descriptor& op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
  if (b != nullptr) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
  if (t != nullptr) op.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
  const float one = 1.0f;
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
  add_op(op);
}

void Graph::matmul(const Descriptor& a, const Descriptor& b, const Descriptor& c) {
  Descriptor& mm = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  mm.set_type(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT);
  mm.finalize();
  Descriptor& op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
  op.set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
  op.set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
  op.set(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
  add_op(op);
}

void Graph::reduction(cudnnReduceTensorOp_t reduce, const Descriptor& x, const Descriptor& y) {
  Descriptor& red = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  red.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce);
  red.set_type(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT);
  const bool deterministic = false;
  red.set(CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, CUDNN_TYPE_BOOLEAN, 1, &deterministic);
  red.finalize();
  Descriptor& op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
  op.set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
  op.set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, red);
  add_op(op);
}

void Graph::reshape(const Descriptor& x, const Descriptor& y) {
  Descriptor& op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
  op.set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
  add_op(op);
}

void Graph::norm_forward(cudnnBackendNormMode_t mode, const Descriptor& x, const Descriptor& scale,
                         const Descriptor* bias, const Descriptor& eps, const Descriptor& y,
                         const Descriptor* mean, const Descriptor& inv_variance) {
  Descriptor& op = make(CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_NORM_FWD_MODE, CUDNN_TYPE_NORM_MODE, 1, &mode);
  const cudnnBackendNormFwdPhase_t phase = CUDNN_NORM_FWD_TRAINING;
  op.set(CUDNN_ATTR_OPERATION_NORM_FWD_PHASE, CUDNN_TYPE_NORM_FWD_PHASE, 1, &phase);
  op.set(CUDNN_ATTR_OPERATION_NORM_FWD_XDESC, x);
  op.set(CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC, scale);
  if (bias != nullptr) op.set(CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC, *bias);
  op.set(CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC, eps);
  op.set(CUDNN_ATTR_OPERATION_NORM_FWD_YDESC, y);
  if (mean != nullptr) op.set(CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC, *mean);
  op.set(CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC, inv_variance);
  add_op(op);
}

void Graph::norm_backward(cudnnBackendNormMode_t mode, const Descriptor& x, const Descriptor& dy,
                          const Descriptor& scale, const Descriptor* mean,
                          const Descriptor& inv_variance, const Descriptor& dscale,
                          const Descriptor* dbias, const Descriptor& dx) {
  Descriptor& op = make(CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_NORM_BWD_MODE, CUDNN_TYPE_NORM_MODE, 1, &mode);
  op.set(CUDNN_ATTR_OPERATION_NORM_BWD_XDESC, x);
  op.set(CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC, dy);
  op.set(CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC, scale);
  if (mean != nullptr) op.set(CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC, *mean);
  op.set(CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC, inv_variance);
  op.set(CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC, dscale);
  if (dbias != nullptr) op.set(CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC, *dbias);
  op.set(CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC, dx);
  add_op(op);
}

void Graph::finalize(cudnnHandle_t handle) {
  op_graph_ = std::make_unique<Descriptor>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  op_graph_->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                 static_cast<int64_t>(ops_.size()), ops_.data());
  if (handle != nullptr) {
    // Deprecated in cuDNN 9 (not needed after 9.8), still what the frontend sets when it can.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    op_graph_->set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
#pragma GCC diagnostic pop
  }
  op_graph_->finalize();
}

// ---- Plan -------------------------------------------------------------------------------------

namespace {
std::string status_text(cudnnStatus_t status) {
  char last[512] = {};
  cudnnGetLastErrorString(last, sizeof last);
  std::string s = cudnnGetErrorString(status);
  if (last[0] != '\0') s += std::string(" (") + last + ")";
  return s;
}
}  // namespace

Plan::Plan(const Graph& graph, cudnnHandle_t handle,
           const std::vector<cudnnBackendHeurMode_t>& modes) {
  (void)handle;  // engines run on the handle given to execute()
  std::string reasons;
  for (cudnnBackendHeurMode_t mode : modes) {
    Descriptor& heur = keep_.emplace_back(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph.op_graph());
    heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    const cudnnStatus_t hs = cudnnBackendFinalize(heur.get());
    if (hs != CUDNN_STATUS_SUCCESS) {
      reasons += " heuristics mode " + std::to_string(mode) + ": " + status_text(hs) + ";";
      continue;
    }
    int64_t count = 0;
    CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
    if (count == 0) {
      reasons += " heuristics mode " + std::to_string(mode) + ": no engine configuration;";
      continue;
    }
    std::vector<cudnnBackendDescriptor_t> configs;
    const size_t first = keep_.size();
    for (int64_t i = 0; i < count; ++i)
      configs.push_back(keep_.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR).get());
    int64_t returned = 0;
    CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned,
                                         configs.data()));
    for (int64_t i = 0; i < returned; ++i) {
      auto plan = std::make_unique<Descriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, keep_[first + i]);
      const cudnnStatus_t ps = cudnnBackendFinalize(plan->get());
      if (ps != CUDNN_STATUS_SUCCESS) {
        reasons += " engine configuration " + std::to_string(i) + ": " + status_text(ps) + ";";
        continue;
      }
      int64_t got = 0;
      CUDNN_CHECK(cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                           CUDNN_TYPE_INT64, 1, &got, &workspace_));
      plan_ = std::move(plan);
      return;
    }
  }
  throw CudnnUnsupported("cuDNN has no engine for " + graph.name() + ":" + reasons);
}

void Plan::execute(cudnnHandle_t handle, const std::vector<int64_t>& uids,
                   const std::vector<void*>& pointers, void* workspace) const {
  if (uids.size() != pointers.size())
    MPITRAIN_THROW("cuDNN variant pack: uids and pointers differ");
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
           static_cast<int64_t>(pointers.size()), pointers.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()),
           uids.data());
  pack.finalize();
  CUDNN_CHECK(cudnnBackendExecute(handle, plan_->get(), pack.get()));
}

}  // namespace mpitrain::cuda::dnn
