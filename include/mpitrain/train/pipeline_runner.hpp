// One step's micro-batches through this rank's pipeline stage.
//
// Runs the schedule's F and B passes (parallel/pipeline_schedule.hpp) on the model, receiving
// each micro-batch's input activations from the previous stage and its output gradient from the
// next, and sending the other way, point-to-point over the pp group with non-blocking MPI:
//   forward  of micro i:  recv input (tag 2i) <- stage-1;  ...;  send output (tag 2i) -> stage+1
//   backward of micro i:  recv d output (tag 2i+1) <- stage+1;  ...;  send d input -> stage-1
// A send's buffer belongs to the micro-batch's activation slot and is waited for only before
// the slot is used again, so sends overlap the next passes. A send followed by a pass that
// receives from the same neighbour is issued together with that receive (one NCCL group),
// any other at once. With pp = 1 nothing is sent.
// Under the all-layers aux loss (MoeAuxLoss::AllLayers; Model::routed_counts) a training pass's
// rows per expert go with its boundary, as 2E floats in backend memory (each count hi 2^22 + lo,
// both exact in fp32): forward sends the sum over this and the earlier stages (tag 2(m+i)),
// backward the whole model's, which the last stage holds after its forward (tag 2(m+i)+1), m the
// micro-batches. A pass starts both its receives before it waits for either (one NCCL group).
// Token and target ids are copied to backend memory after loading when the backend's memory is
// not the host's (Backend::host_memory); the input gradients being sent live in backend memory.
// Each pass, wait and batch load is a region of the trace (monitor/trace.hpp) when one is
// recording, and times() says where the last train() call's time went.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/model/model.hpp"
#include "mpitrain/monitor/trace.hpp"
#include "mpitrain/parallel/pipeline_schedule.hpp"

namespace mpitrain {

class PipelineRunner {
 public:
  // Loads micro-batch `micro` of the current step: tokens, targets and, with document masking,
  // each token's document start (else doc_starts is null), (B, T) each.
  using Loader =
      std::function<void(int micro, int32_t* tokens, int32_t* targets, int32_t* doc_starts)>;

  // Seconds of the last train() call.
  struct Times {
    double data = 0.0;      // loading the micro-batches
    double forward = 0.0;   // in Model::forward, less the communication waited for inside it
    double backward = 0.0;  // in Model::backward, likewise
  };

  // pp: the pipeline group (rank = stage), null with one stage. trace: where the regions go
  // (null or off = nowhere). blocked_seconds: this rank's time blocked in communication so far,
  // over all its communicators (tensor-parallel all-reduces and gradient buckets wait inside the
  // passes; that time is exposed communication, not compute); empty = not taken out.
  // documents: document masking, the model given each micro-batch's document starts.
  PipelineRunner(Model<float>& model, Communicator* pp, PipelineSchedule schedule,
                 int micro_batches, int batch, int seq_len, bool documents = false,
                 TraceRecorder* trace = nullptr, std::function<double()> blocked_seconds = {});
  ~PipelineRunner();
  PipelineRunner(const PipelineRunner&) = delete;
  PipelineRunner& operator=(const PipelineRunner&) = delete;

  int slots() const { return slots_; }  // activation slots the model must have
  const Times& times() const { return times_; }
  // Loads the step's micro-batches; scored() then counts their scored targets.
  void load(const Loader& load);
  // Forward and backward of every loaded micro-batch; the parameter gradients accumulate in the
  // model. weights: the loss gradients (Model::forward). grads_ready is passed to the step's last
  // backward (data-parallel bucket hook). Returns the summed token loss on the last stage, 0
  // elsewhere.
  double train(LossWeights<float> weights, const std::function<void(size_t)>& grads_ready);
  // Forward only of `rows` <= batch sequences (evaluation; doc_starts with document masking, else
  // null). Returns the summed loss on the last stage, 0 elsewhere.
  double evaluate(const int32_t* tokens, const int32_t* targets, const int32_t* doc_starts,
                  int rows);
  // The targets of the last load() or evaluate() that are scored (not kUnscored): the loss's
  // token count (every stage's, though the last alone sums the loss).
  size_t scored() const { return scored_; }

  // The routing counts in a float message: count = hi 2^22 + lo, both exact in fp32 for any
  // count below 2^46; out / in hold 2 counts.size() floats. decode adds to counts, or writes
  // them over.
  static void encode_counts(std::span<const int64_t> counts, float* out);
  static void decode_counts(const float* in, std::span<int64_t> counts, bool add);

 private:
  // send_with_next: the pass's send is left for the communicator to issue with the next pass's
  // receive (see train()); otherwise it is issued at once (progress()).
  CommHandle send_start(CBuf<float> x, size_t n, int peer, int tag);  // in x's storage type
  CommHandle recv_start(Buf<float> x, size_t n, int peer, int tag);
  // training: the pass sends and receives the routing counts (where routed_).
  void forward(int micro, int rows, LossWeights<float> weights, const char* name,
               bool send_with_next, bool training);
  void backward(int micro, const std::function<void(size_t)>& grads_ready, bool send_with_next);
  void upload_ids(size_t n);  // the first n tokens and targets, to the device buffers (if any)
  const int32_t* token_ids() const { return device_tokens_ ? device_tokens_ : tokens_.data(); }
  const int32_t* target_ids() const { return device_targets_ ? device_targets_ : targets_.data(); }
  // micro-batch micro's document starts (host memory), or null without document masking
  const int32_t* doc_starts(int micro) const {
    return doc_starts_.empty()
               ? nullptr
               : doc_starts_.data() + static_cast<size_t>(micro) * batch_ * seq_len_;
  }
  void wait_send(CommHandle& h, int micro);
  void wait_recv(CommHandle h, const char* name, int micro);
  // The routing counts in routed_buffers_ + at: encoded, uploaded and sent; received; decoded.
  CommHandle send_counts(size_t at, std::span<const int64_t> counts, int peer, int tag);
  CommHandle recv_counts(size_t at, int peer, int tag);
  void take_counts(size_t at, std::span<int64_t> counts, bool add);
  // Runs pass() as a compute region; adds its time less the communication inside to *seconds.
  template <typename Pass>
  void compute(const char* name, int micro, double* seconds, Pass&& pass);

  Model<float>& model_;
  Communicator* pp_;
  int micro_batches_, batch_, seq_len_, stage_, stages_, slots_;
  std::vector<PipeOp> ops_;  // this stage's passes of a step, in the schedule's order
  std::vector<int32_t> tokens_, targets_;     // (m, B, T) each: kept until the micro's backward
  std::vector<int32_t> doc_starts_;           // likewise, with document masking (else empty)
  int32_t* device_tokens_ = nullptr;          // their copies in backend memory (non-host backend)
  int32_t* device_targets_ = nullptr;
  Buf<float> dinput_;                         // (slots, B, T, C): input gradients being sent
  std::vector<CommHandle> out_sends_, grad_sends_;  // per slot
  // The routing counts (AllLayers with pp > 1; else routed_ is false): 2E floats each, at
  // [0] the forward's received, [1] the backward's received, [2 + s] slot s's forward's sent,
  // [2 + slots + s] its backward's sent; their sends per slot; host staging (2E).
  bool routed_ = false;
  size_t count_floats_ = 0;
  Buf<float> routed_buffers_;
  std::vector<CommHandle> count_sends_, count_grad_sends_;
  std::vector<float> count_host_;
  double loss_ = 0.0;
  size_t scored_ = 0;
  TraceRecorder* trace_;
  std::function<double()> blocked_seconds_;
  Times times_;
  const std::function<void(size_t)> no_hook_;  // for the backwards before the step's last
};

}  // namespace mpitrain
