#include "mpitrain/train/pipeline_runner.hpp"

#include <algorithm>
#include <utility>

namespace mpitrain {

PipelineRunner::PipelineRunner(Model<float>& model, Communicator* pp, PipelineSchedule schedule,
                               int micro_batches, int batch, int seq_len, TraceRecorder* trace,
                               std::function<double()> blocked_seconds)
    : model_(model),
      pp_(pp && pp->size() > 1 ? pp : nullptr),
      micro_batches_(micro_batches),
      batch_(batch),
      seq_len_(seq_len),
      stage_(pp_ ? pp_->rank() : 0),
      stages_(pp_ ? pp_->size() : 1),
      slots_(pipeline_slots(schedule, micro_batches, stages_, stage_)),
      ops_(pipeline_ops(schedule, micro_batches, stages_, stage_)),
      trace_(trace),
      blocked_seconds_(std::move(blocked_seconds)) {
  const size_t rows = static_cast<size_t>(batch) * seq_len;
  tokens_.resize(micro_batches * rows);
  targets_.resize(micro_batches * rows);
  if (pp_)
    dinput_ = model.backend().alloc(slots_ * model.boundary_elements(batch, seq_len),
                                    model.options().storage);
  out_sends_.resize(slots_);
  grad_sends_.resize(slots_);
  if (!model.backend().host_memory()) {
    device_tokens_ = model.backend().alloc_ids(tokens_.size());
    device_targets_ = model.backend().alloc_ids(targets_.size());
  }
}

PipelineRunner::~PipelineRunner() {
  if (dinput_) model_.backend().free(dinput_.data());
  if (!device_tokens_) return;
  model_.backend().free_ids(device_targets_);
  model_.backend().free_ids(device_tokens_);
}

void PipelineRunner::upload_ids(size_t n) {
  if (!device_tokens_) return;
  model_.backend().upload_ids(device_tokens_, tokens_.data(), n);
  model_.backend().upload_ids(device_targets_, targets_.data(), n);
}

void PipelineRunner::wait_send(CommHandle& h, int micro) {
  if (h.id >= 0) {
    TraceScope scope(trace_, TraceLane::Comm, "pp send wait", nullptr, micro);
    pp_->wait(h);
  }
  h = CommHandle{};
}

void PipelineRunner::wait_recv(CommHandle h, const char* name, int micro) {
  TraceScope scope(trace_, TraceLane::Comm, name, nullptr, micro);
  pp_->wait(h);
}

// Stage boundaries travel in the storage type: 2-byte messages under 2-byte storage.
CommHandle PipelineRunner::send_start(CBuf<float> x, size_t n, int peer, int tag) {
  if (const float* full = x.full()) return pp_->send_start(full, n, peer, tag);
  return pp_->send_start(x.half(), n, peer, tag);
}

CommHandle PipelineRunner::recv_start(Buf<float> x, size_t n, int peer, int tag) {
  if (float* full = x.full()) return pp_->recv_start(full, n, peer, tag);
  return pp_->recv_start(x.half(), n, peer, tag);
}

template <typename Pass>
void PipelineRunner::compute(const char* name, int micro, double* seconds, Pass&& pass) {
  const double blocked_before = blocked_seconds_ ? blocked_seconds_() : 0.0;
  double wall = 0.0;
  {
    TraceScope scope(trace_, TraceLane::Compute, name, &wall, micro);
    pass();
  }
  *seconds += wall - (blocked_seconds_ ? blocked_seconds_() - blocked_before : 0.0);
}

void PipelineRunner::forward(int micro, int rows, float dloss, const char* name,
                             bool send_with_next) {
  const int slot = micro % slots_;
  const size_t n = model_.boundary_elements(rows, seq_len_);
  const int32_t* tokens = token_ids() + static_cast<size_t>(micro) * batch_ * seq_len_;
  const int32_t* targets = target_ids() + static_cast<size_t>(micro) * batch_ * seq_len_;
  if (pp_) {
    wait_send(out_sends_[slot], micro);  // the slot's previous output has left
    if (stage_ > 0)
      wait_recv(recv_start(model_.input(slot), n, stage_ - 1, 2 * micro),
                "pp recv activations", micro);
  }
  compute(name, micro, &times_.forward,
          [&] { loss_ += model_.forward(slot, tokens, targets, rows, seq_len_, dloss); });
  if (pp_ && stage_ < stages_ - 1) {
    out_sends_[slot] = send_start(model_.output(slot), n, stage_ + 1, 2 * micro);
    if (!send_with_next) pp_->progress();
  }
}

void PipelineRunner::backward(int micro, const std::function<void(size_t)>& grads_ready,
                              bool send_with_next) {
  const int slot = micro % slots_;
  const size_t n = model_.boundary_elements(batch_, seq_len_);
  const int32_t* tokens = token_ids() + static_cast<size_t>(micro) * batch_ * seq_len_;
  if (pp_ && stage_ < stages_ - 1)
    wait_recv(recv_start(model_.output_grad(), n, stage_ + 1, 2 * micro + 1),
              "pp recv gradients", micro);
  compute("backward", micro, &times_.backward,
          [&] { model_.backward(slot, tokens, batch_, seq_len_, grads_ready); });
  if (pp_ && stage_ > 0) {
    wait_send(grad_sends_[slot], micro);
    const Buf<float> buf = dinput_ + slot * n;
    model_.backend().copy(buf, model_.input_grad(), n);
    grad_sends_[slot] = send_start(buf, n, stage_ - 1, 2 * micro + 1);
    if (!send_with_next) pp_->progress();
  }
}

double PipelineRunner::train(const Loader& load, float dloss,
                             const std::function<void(size_t)>& grads_ready) {
  loss_ = 0.0;
  times_ = Times{};
  const size_t rows = static_cast<size_t>(batch_) * seq_len_;
  for (int i = 0; i < micro_batches_; ++i) {
    TraceScope scope(trace_, TraceLane::Data, "load batch", &times_.data, i);
    load(i, tokens_.data() + i * rows, targets_.data() + i * rows);
  }
  upload_ids(tokens_.size());
  for (size_t i = 0; i < ops_.size(); ++i) {
    const PipeOp& op = ops_[i];
    // A send goes with the next pass's receive from the same neighbour: F then B (d output
    // from stage+1), B then F (input from stage-1) — Megatron's send_forward_recv_backward and
    // send_backward_recv_forward. Issued alone, two stages could each wait in a send for a
    // receive queued behind the other's send (NCCL runs one stream's operations in order).
    const bool next_forward = i + 1 < ops_.size() && ops_[i + 1].forward;
    const bool next_backward = i + 1 < ops_.size() && !ops_[i + 1].forward;
    if (op.forward)
      forward(op.micro, batch_, dloss, "forward", next_backward);
    else
      backward(op.micro, op.micro == micro_batches_ - 1 ? grads_ready : no_hook_, next_forward);
  }
  if (pp_)
    for (int s = 0; s < slots_; ++s) wait_send(out_sends_[s], -1), wait_send(grad_sends_[s], -1);
  return loss_;
}

double PipelineRunner::evaluate(const int32_t* tokens, const int32_t* targets, int rows) {
  loss_ = 0.0;
  const size_t n = static_cast<size_t>(rows) * seq_len_;
  std::copy(tokens, tokens + n, tokens_.begin());
  std::copy(targets, targets + n, targets_.begin());
  upload_ids(n);
  forward(0, rows, 0.0f, "eval forward", false);
  if (pp_) wait_send(out_sends_[0], 0);
  return loss_;
}

}  // namespace mpitrain
