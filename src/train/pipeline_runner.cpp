#include "mpitrain/train/pipeline_runner.hpp"

#include <algorithm>
#include <utility>

#include "mpitrain/data/loss_mask.hpp"

namespace mpitrain {

PipelineRunner::PipelineRunner(Model<float>& model, Communicator* pp, PipelineSchedule schedule,
                               int micro_batches, int batch, int seq_len, bool documents,
                               TraceRecorder* trace, std::function<double()> blocked_seconds)
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
  if (documents) doc_starts_.resize(micro_batches * rows);
  if (pp_)
    dinput_ = model.backend().alloc(slots_ * model.boundary_elements(batch, seq_len),
                                    model.options().storage);
  out_sends_.resize(slots_);
  grad_sends_.resize(slots_);
  routed_ =
      pp_ && model.config().n_experts > 0 && model.options().moe_aux_loss == MoeAuxLoss::AllLayers;
  if (routed_) {
    count_floats_ = 2 * static_cast<size_t>(model.config().n_experts);
    routed_buffers_ = model.backend().alloc((2 + 2 * static_cast<size_t>(slots_)) * count_floats_,
                                            Precision::Fp32);
    count_sends_.resize(slots_);
    count_grad_sends_.resize(slots_);
    count_host_.resize(count_floats_);
  }
  if (!model.backend().host_memory()) {
    device_tokens_ = model.backend().alloc_ids(tokens_.size());
    device_targets_ = model.backend().alloc_ids(targets_.size());
  }
}

PipelineRunner::~PipelineRunner() {
  if (dinput_) model_.backend().free(dinput_.data());
  if (routed_buffers_) model_.backend().free(routed_buffers_.data());
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

// hi and lo below 2^24 (exact in fp32) for counts below 2^46
constexpr int64_t kCountSplit = int64_t{1} << 22;

void PipelineRunner::encode_counts(std::span<const int64_t> counts, float* out) {
  for (size_t e = 0; e < counts.size(); ++e) {
    out[2 * e] = static_cast<float>(counts[e] / kCountSplit);
    out[2 * e + 1] = static_cast<float>(counts[e] % kCountSplit);
  }
}

void PipelineRunner::decode_counts(const float* in, std::span<int64_t> counts, bool add) {
  for (size_t e = 0; e < counts.size(); ++e) {
    const int64_t c =
        static_cast<int64_t>(in[2 * e]) * kCountSplit + static_cast<int64_t>(in[2 * e + 1]);
    counts[e] = add ? counts[e] + c : c;
  }
}

CommHandle PipelineRunner::send_counts(size_t at, std::span<const int64_t> counts, int peer,
                                       int tag) {
  encode_counts(counts, count_host_.data());
  const Buf<float> buf = routed_buffers_ + at * count_floats_;
  model_.backend().upload(buf, count_host_.data(), count_floats_);
  return pp_->send_start(buf.full(), count_floats_, peer, tag);
}

CommHandle PipelineRunner::recv_counts(size_t at, int peer, int tag) {
  return pp_->recv_start((routed_buffers_ + at * count_floats_).full(), count_floats_, peer, tag);
}

void PipelineRunner::take_counts(size_t at, std::span<int64_t> counts, bool add) {
  model_.backend().download(count_host_.data(), routed_buffers_ + at * count_floats_,
                            count_floats_);
  decode_counts(count_host_.data(), counts, add);
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

void PipelineRunner::forward(int micro, int rows, LossWeights<float> weights, const char* name,
                             bool send_with_next, bool training) {
  const int slot = micro % slots_;
  const size_t n = model_.boundary_elements(rows, seq_len_);
  const int32_t* tokens = token_ids() + static_cast<size_t>(micro) * batch_ * seq_len_;
  const int32_t* targets = target_ids() + static_cast<size_t>(micro) * batch_ * seq_len_;
  const bool counts = routed_ && training;
  const int count_tag = 2 * (micro_batches_ + micro);
  if (pp_) {
    wait_send(out_sends_[slot], micro);  // the slot's previous output has left
    if (counts) wait_send(count_sends_[slot], micro);
    if (stage_ > 0) {
      const CommHandle input = recv_start(model_.input(slot), n, stage_ - 1, 2 * micro);
      const CommHandle counts_in = counts ? recv_counts(0, stage_ - 1, count_tag) : CommHandle{};
      wait_recv(input, "pp recv activations", micro);
      if (counts) wait_recv(counts_in, "pp recv routing counts", micro);
    }
  }
  compute(name, micro, &times_.forward, [&] {
    loss_ += model_.forward(slot, tokens, targets, rows, seq_len_, weights, doc_starts(micro));
  });
  if (counts && stage_ > 0) take_counts(0, model_.routed_counts(slot), true);  // + earlier stages'
  if (pp_ && stage_ < stages_ - 1) {
    out_sends_[slot] = send_start(model_.output(slot), n, stage_ + 1, 2 * micro);
    if (counts)
      count_sends_[slot] = send_counts(2 + slot, model_.routed_counts(slot), stage_ + 1, count_tag);
    if (!send_with_next) pp_->progress();
  }
}

void PipelineRunner::backward(int micro, const std::function<void(size_t)>& grads_ready,
                              bool send_with_next) {
  const int slot = micro % slots_;
  const size_t n = model_.boundary_elements(batch_, seq_len_);
  const int32_t* tokens = token_ids() + static_cast<size_t>(micro) * batch_ * seq_len_;
  const int count_tag = 2 * (micro_batches_ + micro) + 1;
  if (pp_ && stage_ < stages_ - 1) {
    const CommHandle output = recv_start(model_.output_grad(), n, stage_ + 1, 2 * micro + 1);
    const CommHandle counts_in = routed_ ? recv_counts(1, stage_ + 1, count_tag) : CommHandle{};
    wait_recv(output, "pp recv gradients", micro);
    if (routed_) {
      wait_recv(counts_in, "pp recv routing counts", micro);
      take_counts(1, model_.routed_counts(slot), false);  // the whole model's
    }
  }
  compute("backward", micro, &times_.backward,
          [&] { model_.backward(slot, tokens, batch_, seq_len_, grads_ready, doc_starts(micro)); });
  if (pp_ && stage_ > 0) {
    wait_send(grad_sends_[slot], micro);
    if (routed_) wait_send(count_grad_sends_[slot], micro);
    const Buf<float> buf = dinput_ + slot * n;
    model_.backend().copy(buf, model_.input_grad(), n);
    grad_sends_[slot] = send_start(buf, n, stage_ - 1, 2 * micro + 1);
    if (routed_)
      count_grad_sends_[slot] = send_counts(2 + static_cast<size_t>(slots_ + slot),
                                            model_.routed_counts(slot), stage_ - 1, count_tag);
    if (!send_with_next) pp_->progress();
  }
}

void PipelineRunner::load(const Loader& load) {
  times_ = Times{};
  const size_t rows = static_cast<size_t>(batch_) * seq_len_;
  for (int i = 0; i < micro_batches_; ++i) {
    TraceScope scope(trace_, TraceLane::Data, "load batch", &times_.data, i);
    load(i, tokens_.data() + i * rows, targets_.data() + i * rows,
         doc_starts_.empty() ? nullptr : doc_starts_.data() + i * rows);
  }
  scored_ = scored_targets(targets_.data(), micro_batches_ * rows);
  upload_ids(tokens_.size());
}

double PipelineRunner::train(LossWeights<float> weights,
                             const std::function<void(size_t)>& grads_ready) {
  loss_ = 0.0;
  for (size_t i = 0; i < ops_.size(); ++i) {
    const PipeOp& op = ops_[i];
    // A send goes with the next pass's receive from the same neighbour: F then B (d output
    // from stage+1), B then F (input from stage-1) — Megatron's send_forward_recv_backward and
    // send_backward_recv_forward. Issued alone, two stages could each wait in a send for a
    // receive queued behind the other's send (NCCL runs one stream's operations in order).
    const bool next_forward = i + 1 < ops_.size() && ops_[i + 1].forward;
    const bool next_backward = i + 1 < ops_.size() && !ops_[i + 1].forward;
    if (op.forward)
      forward(op.micro, batch_, weights, "forward", next_backward, true);
    else
      backward(op.micro, op.micro == micro_batches_ - 1 ? grads_ready : no_hook_, next_forward);
  }
  if (pp_)
    for (int s = 0; s < slots_; ++s) wait_send(out_sends_[s], -1), wait_send(grad_sends_[s], -1);
  for (int s = 0; s < static_cast<int>(count_sends_.size()); ++s)
    wait_send(count_sends_[s], -1), wait_send(count_grad_sends_[s], -1);
  return loss_;
}

double PipelineRunner::evaluate(const int32_t* tokens, const int32_t* targets,
                                const int32_t* doc_starts, int rows) {
  loss_ = 0.0;
  const size_t n = static_cast<size_t>(rows) * seq_len_;
  std::copy(tokens, tokens + n, tokens_.begin());
  std::copy(targets, targets + n, targets_.begin());
  if (doc_starts_.empty() != !doc_starts)
    MPITRAIN_THROW("evaluate: document starts given to a runner without document masking, or none");
  if (doc_starts) std::copy(doc_starts, doc_starts + n, doc_starts_.begin());
  scored_ = scored_targets(targets, n);
  upload_ids(n);
  forward(0, rows, {}, "eval forward", false, false);
  if (pp_) wait_send(out_sends_[0], 0);
  return loss_;
}

}  // namespace mpitrain
