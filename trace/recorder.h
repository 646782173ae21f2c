// The Recorder: the CaptureSink a trace installs on its thread. Ops called while it is
// installed are recorded as graph nodes instead of being queued; tensors they create get
// slot storages (with memory of their own while recording, so host fills still work);
// host reads throw. finish() classifies every value (trace/graph.h) and hands back the
// graph, not yet fused or planned.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/engine/capture.h"
#include "core/tensor.h"
#include "trace/fusion.h"
#include "trace/graph.h"

namespace tide::trace {

class Recorder final : public tide::detail::CaptureSink {
 public:
  // `what` names the traced function in errors ("trace::function 'step'").
  explicit Recorder(std::string what);
  ~Recorder() override;
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // A fresh input value shaped like `arg` (contiguous, no grad), for f to receive.
  Tensor placeholder(const Tensor& arg);

  // Takes the tensors f returned (and drops them: what else still holds a storage created
  // while recording is kept by f's side effects, i.e. is state). Call after uninstalling.
  std::shared_ptr<Graph> finish(std::vector<Tensor> outputs);

  // Storages of values this recording created, for nested recordings (loop bodies).
  bool created_here(Storage* s) const;
  // A nested recording's graph (a loop body's) keeps a reference to s: not one that makes a
  // value created here escape (finish). Takes over the nested recording's own notes for
  // storages it did not create, so that they reach the recording that did.
  void note_nested_references(const Graph& body, const Recorder& nested);
  // The fusion level nested recordings (loop bodies) use.
  void set_fusion(Fusion f) { fusion_ = f; }
  Fusion fusion() const { return fusion_; }
  // Options::loop_unroll, for the loops recorded here and in nested recordings.
  void set_loop_unroll(int u) { loop_unroll_ = u; }
  int loop_unroll() const { return loop_unroll_; }
  // Gives the node recorded last the piece of CUDA graph it adds instead of being captured
  // (trace/graph.h, Node::piece).
  void set_last_piece(std::shared_ptr<GraphPiece> piece);

  // CaptureSink
  void record(const char* op, std::span<Storage* const> reads, std::span<Storage* const> writes,
              tide::detail::Kernel kernel, tide::SourceLocation site) override;
  StorageRef allocate(size_t bytes, Device device, const char* op) override;
  [[noreturn]] void host_read(const char* op) override;
  const uint64_t* random_counter(Generator& gen, uint64_t numel, Device device) override;
  void describe_next(const void* desc, size_t bytes) override;
  void add_replay_hook(std::shared_ptr<tide::detail::ReplayHook> hook) override;
  // One for a storage this recording has a value for (Value::storage), else none.
  int references_held(const Storage* s) const override;
  bool host_data(const Storage* s) const override;
  void grad_reset(const TensorImpl& leaf) override;
  void grad_bound(const std::shared_ptr<TensorImpl>& leaf, const std::shared_ptr<TensorImpl>& grad,
                  bool taken) override;

 private:
  int value_of(Storage* s);  // known id, or a new capture
  const uint64_t* new_random_counter(Generator& gen, uint64_t numel, Device device);

  std::string what_;
  std::shared_ptr<Graph> g_;
  std::unordered_map<Storage*, int> ids_;
  std::vector<bool> created_;                            // per value: made by this recording
  std::unordered_map<const Storage*, int> nested_refs_;  // note_nested_references
  std::vector<const TensorImpl*> grads_reset_;           // grad_reset, in order
  std::optional<tide::detail::ElementwiseDesc> next_desc_;
  Fusion fusion_ = Fusion::none;
  int loop_unroll_ = 0;
  std::optional<Device> device_;        // of the first op recorded
  std::optional<Device> input_device_;  // of the first placeholder
};

// Installs a recorder on the calling thread for a scope; restores the previous sink.
class Recording {
 public:
  explicit Recording(Recorder& r) : saved_(tide::detail::tl_capture) {
    tide::detail::tl_capture = &r;
  }
  ~Recording() { tide::detail::tl_capture = saved_; }
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;

 private:
  tide::detail::CaptureSink* saved_;
};

}  // namespace tide::trace
