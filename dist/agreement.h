// The check that every rank is about to make the same collective call. Ranks that disagree
// (another shape, dtype, root or collective) would corrupt memory or hang inside the
// backend; exchanging a small description first turns that into the same tide::Error on
// every rank, naming each side. The same exchange says whether a rank's input holds a
// failure from an earlier op: then no rank runs the call (a rank that skipped it would leave
// the others waiting for ever) and all fail alike. Costs one all_gather of 13 integers.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/shape.h"
#include "dist/communicator.h"

namespace tide::dist {

enum class Collective : uint8_t { all_reduce, broadcast, barrier };

struct CollectiveDesc {
  Collective kind = Collective::barrier;
  int64_t arg = 0;  // all_reduce: the ReduceOp; broadcast: the root
  DType dtype = DType::float32;
  Shape shape;
  // "all_reduce(sum) (7,) float32", "broadcast(root 0) (2, 3) float64", "barrier"
  std::string str() const;
  friend bool operator==(const CollectiveDesc&, const CollectiveDesc&) = default;
};

// Exchanges `desc` and `input_failed` with every rank of comm (blocking). Throws, on every
// rank alike, tide::Error("[op] ranks disagree on the collective: rank 0: ...; rank 1: ...")
// unless all descriptions are equal, "[op] the input of rank 1 holds a failure ..." when a
// rank's input_failed is set, and what comm throws when the exchange itself fails or its
// backend reported an asynchronous error (Communicator::check_health, first).
void check_agreement(Communicator& comm, const CollectiveDesc& desc, bool input_failed,
                     const char* op);

}  // namespace tide::dist
