// check_agreement: each rank's description travels as kWords integers.
#include "dist/agreement.h"

#include <array>
#include <vector>

#include "core/error.h"

namespace tide::dist {
namespace {

constexpr int kWords = 5 + kMaxDims;  // input failed, kind, arg, dtype, ndim, extents

std::array<int64_t, kWords> encode(const CollectiveDesc& d, bool input_failed) {
  std::array<int64_t, kWords> w{};
  w[0] = input_failed;
  w[1] = int64_t(d.kind);
  w[2] = d.arg;
  w[3] = int64_t(d.dtype);
  w[4] = d.shape.ndim();
  for (int i = 0; i < d.shape.ndim(); ++i) w[5 + i] = d.shape[i];
  return w;
}

// Only the peers' words, which this rank wrote itself: trusted to be in range.
CollectiveDesc decode(const int64_t* w) {
  CollectiveDesc d;
  d.kind = Collective(w[1]);
  d.arg = w[2];
  d.dtype = DType(w[3]);
  d.shape = Shape(std::span<const int64_t>(w + 5, size_t(w[4])));
  return d;
}

}  // namespace

std::string CollectiveDesc::str() const {
  switch (kind) {
    case Collective::all_reduce:
      return std::string("all_reduce(") + name(ReduceOp(arg)) + ") " + shape.str() + " " +
             std::string(name(dtype));
    case Collective::broadcast:
      return "broadcast(root " + std::to_string(arg) + ") " + shape.str() + " " +
             std::string(name(dtype));
    case Collective::barrier: return "barrier";
  }
  return "?";
}

void check_agreement(Communicator& comm, const CollectiveDesc& desc, bool input_failed,
                     const char* op) {
  comm.check_health(op);
  const auto mine = encode(desc, input_failed);
  std::vector<int64_t> all(size_t(kWords) * size_t(comm.size()));
  comm.all_gather(mine, all, op);
  std::vector<CollectiveDesc> descs;
  bool agree = true;
  int first_failed = -1;
  for (int r = 0; r < comm.size(); ++r) {
    const int64_t* w = all.data() + size_t(r) * kWords;
    descs.push_back(decode(w));
    agree = agree && descs.back() == descs.front();
    if (w[0] && first_failed < 0) first_failed = r;
  }
  if (agree && first_failed >= 0)
    throw Error(op, "the input of rank " + std::to_string(first_failed) +
                        " holds the failure of an earlier op (that rank's tensor names it), so " +
                        desc.str() + " ran on no rank");
  if (agree) return;
  // Every rank builds the same message from the same words, so all report alike.
  std::string msg = "ranks disagree on the collective: ";
  constexpr int kShown = 8;  // a large group's message stays readable
  for (int r = 0; r < comm.size(); ++r) {
    if (r == kShown) {
      msg += "; and " + std::to_string(comm.size() - kShown) + " more ranks";
      break;
    }
    if (r > 0) msg += "; ";
    msg += "rank " + std::to_string(r) + ": " + descs[size_t(r)].str();
  }
  throw Error(op, msg);
}

}  // namespace tide::dist
