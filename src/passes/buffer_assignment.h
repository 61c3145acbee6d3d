// Buffer assignment over a runtime step schedule (DESIGN §4/§6).
//
// Input: one ScheduledValue per value (a runtime slot) and the ordered steps
// with the values each reads and writes. Output: a buffer id per value, so
// that values whose live ranges do not overlap share one buffer.
//
// Liveness: a value lives from the step that writes it to its last reader
// (outputs: to the end of the schedule; a value nobody reads: during its
// writing step only). Parameters are the caller's and get no buffer
// (buffer_of = -1).
//
// Rules:
//  - reuse: a `plannable` value written at step k may take a buffer of the
//    same byte size all of whose values died before step k (their last
//    reader is < k) and whose values were all plannable;
//  - in place: if step k declares `in_place_read` (an elementwise kernel
//    whose output element i reads only element i of that value, same shape
//    and dtype), that value is plannable, read once by step k, dies at k and
//    has the output's byte size, writes[0] takes its buffer;
//  - outputs, parameters, donated parameters and values not plannable (held
//    by interpreter / extern steps as Literals) are never shared.
//
// peak_bytes = max over steps of the bytes of the buffers live during that
// step (parameters excluded; a buffer lives from the first write of any of
// its values to the last use of any of them); total_bytes = sum of all
// buffer sizes (what one run allocates). Value sizes are byte sizes (tuple:
// sum of its elements).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ember {

struct ScheduledValue {
  std::string name;  // for DebugString, e.g. "%5"
  int64_t bytes = 0;
  bool parameter = false;  // the caller's buffer (never assigned)
  bool donated = false;    // a parameter an alias may overwrite
  bool output = false;     // returned to the caller: never shared
  bool plannable = false;  // raw storage the runtime hands to a kernel
};

struct ScheduledStep {
  std::vector<int> reads;  // value indices (may repeat)
  std::vector<int> writes;
  int in_place_read = -1;  // a value writes[0] may overwrite (see above)
};

struct AssignmentStats {
  int64_t peak_bytes = 0;
  int64_t total_bytes = 0;
  int reused = 0;    // values that took a buffer another value used before
  int in_place = 0;  // values written into their input's buffer
  int num_buffers = 0;
};

struct BufferAssignment {
  std::vector<int> buffer_of;          // value -> buffer id, -1 for parameters
  std::vector<int64_t> buffer_bytes;   // buffer id -> bytes
  std::vector<bool> buffer_plannable;  // buffer id -> raw planned storage
  std::vector<bool> value_in_place;    // value -> written in place
  std::vector<bool> value_reused;      // value -> took a previously used buffer
  AssignmentStats stats;
  std::vector<ScheduledValue> values;  // copy of the input, for DebugString
  // "buffer assignment: 3 buffers, total 96 B, peak 64 B, 1 reused, 1 in place"
  // then one line per value: `  %5 (64 B) -> b1 [reused] [in-place] [output]`.
  std::string DebugString() const;
};

// Assigns buffers. Indices out of range in `steps` are ignored.
BufferAssignment AssignBuffers(const std::vector<ScheduledValue>& values,
                               const std::vector<ScheduledStep>& steps);

}  // namespace ember
