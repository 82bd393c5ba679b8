// The optimizer: AdamW, SGD with momentum or LAMB over the parts of one rank's flat parameter
// buffer it owns (parallel/shard_ranges.hpp), with fp32 master weights when the parameters are
// kept in bf16/fp16.
//
// The parts are the whole buffer without ZeRO; with ZeRO-1 this data-parallel rank's range, with
// ZeRO-2/3 its piece of every unit (the caller's choice: the gradient sync decides it). The
// parameters, gradients, master and state it sees are compact: the owned elements back to back.
// Every kind uses decoupled weight decay, on the tensors ParamLayout marks (matrices and
// embeddings; never norms and biases), and takes the learning rate of the step from the caller
// (the schedule). With g = grad_scale * grad:
//   adamw  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//          u = m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd w;  w -= lr u
//   sgd    buf = mu buf + g (PyTorch's momentum buffer, no dampening, no Nesterov);
//          w -= lr (buf + wd w)  (decoupled decay, "SGDW", so the parameter groups are AdamW's)
//   lamb   (You et al. 2019) u as adamw; per tensor r = ||w|| / ||u||, 1 when either is 0;
//          w -= lr r u. Norms and biases (no weight decay) take r = 1, i.e. the AdamW step, as
//          the BERT reference LAMB, NVIDIA apex's FusedLAMB and timm's Lamb do by default.
// LAMB's norms are those of the whole logical tensor whatever the layout: each rank sums the
// squares of its part, then the sums are added over the data-parallel group (when ranges split
// tensors) and, for tensors split over tp, over the tensor-parallel group; a tensor replicated
// over tp counts tp rank 0's copy. Under expert parallelism without ZeRO the ep-split experts
// (each ep rank's E/ep of them, model/params.hpp) are summed over the ep group, the tensors
// replicated over ep counting ep rank 0's copy; with ZeRO the dp group (ep x expert-dp) already
// holds every expert element once: the dense ones sharded over dp, the experts over expert-dp
// (parallel/shard_ranges.hpp's zero_owned). The elementwise updates give each element the same
// result wherever it lies (backend/cpu_optimizer.cpp), so a layout changes only the order of the
// norms' double sums.
//
// Master weights (precision bf16/fp16): the optimizer keeps fp32 copies of its parameters,
// taken from the compute copy at construction, updates them, and writes the compute copy =
// round_to(master, precision) — 2 bytes or fp32 containers. For fp32 the master is the
// parameters themselves (no copy).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "mpitrain/backend/backend.hpp"
#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/model/params.hpp"
#include "mpitrain/parallel/shard_ranges.hpp"

namespace mpitrain {

enum class OptimizerKind { AdamW, Sgd, Lamb };

// "adamw" | "sgd" | "lamb", else UsageError
OptimizerKind parse_optimizer(const std::string& name);
std::string to_string(OptimizerKind kind);
// The names of the kind's state buffers, in the order of Optimizer::state(): the checkpoint's
// datasets groups. adamw, lamb: adam_m, adam_v; sgd: momentum.
std::vector<std::string> state_names(OptimizerKind kind);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::AdamW;
  float beta1 = 0.9f;  // adamw, lamb
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float momentum = 0.9f;  // sgd
  float weight_decay = 0.1f;
};

// The groups LAMB reduces its per-tensor squared norms over; nullptr where this rank is alone.
// Unused by adamw and sgd.
struct NormGroups {
  Communicator* dp = nullptr;    // ZeRO only: the group whose shards split this stage's buffer
  Communicator* tp = nullptr;    // the tensor-parallel group
  Communicator* tied = nullptr;  // gpt2 with pp > 1, first and last stage: the embedding group,
                                 // so that both copies of the tied wte take the same ratio
  Communicator* ep = nullptr;    // ep > 1 without ZeRO: the expert-parallel group (with ZeRO the
                                 // dp group's ranges hold every expert: dp and ep together
                                 // would count the experts ep times)
};

class Optimizer {
 public:
  // params: the compute copy of the owned elements (owned.size(), compact), outliving the
  // optimizer, in fp32 or in 2 bytes; owned lies inside layout.total(). precision bf16/fp16: a
  // separate
  // fp32 master, taken from the compute copy's values (as Megatron does), written back to it
  // rounded after each step (2-byte storage: by convert; fp32 containers: round_to).
  // Every rank of each group in `groups` must construct its optimizer with the same layout.
  Optimizer(Backend<float>& backend, const ParamLayout& layout, const OptimizerConfig& config,
            Buf<float> params, ShardRanges owned, Precision precision,
            NormGroups groups = {});
  ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of the owned elements from grads (compact, owned.size()) scaled by grad_scale
  // (clipping x 1 / loss scale). LAMB: collective over `groups`.
  void step(const float* grads, float lr, float grad_scale);

  const OptimizerConfig& config() const { return config_; }
  const ShardRanges& owned() const { return owned_; }
  Precision precision() const { return precision_; }
  bool separate_master() const { return precision_ != Precision::Fp32; }
  // The fp32 values of the owned elements, compact (params itself when not separate).
  float* master() { return master_; }
  // The state buffers, named as state_names(kind), each owned().size() floats, compact.
  const std::vector<float*>& state() { return state_; }
  // Bytes this optimizer allocated (state and separate master): 1/dp of it per rank with ZeRO.
  size_t bytes() const;
  int steps_taken() const { return t_; }
  void set_steps_taken(int t) { t_ = t; }  // after loading the state

 private:
  void lamb_step(const float* grads, float lr, float grad_scale);

  Backend<float>& backend_;
  const ParamLayout& layout_;
  OptimizerConfig config_;
  Buf<float> params_;
  ShardRanges owned_;
  Precision precision_;
  NormGroups groups_;
  // The owned part of each tensor that has one (compact, decay as the tensor), in layout order:
  // a step is one backend call over them (LAMB: two); segment_tensor_: their tensors' indices.
  std::vector<Segment> segments_;
  std::vector<size_t> segment_tensor_;
  float* master_ = nullptr;
  std::vector<float*> state_;
  std::vector<double> sums_;    // lamb: per segment {sum w^2, sum u^2} of this rank's part
  std::vector<double> norms_;   // lamb: per tensor {sum w^2, sum u^2}, whole tensors
  std::vector<float> lamb_lr_;  // lamb: per segment, the rate times the trust ratio
  int t_ = 0;
};

}  // namespace mpitrain
