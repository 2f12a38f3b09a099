// Eager CPU writes of funrl.buffers' add: a batch of items copied into the rows of a packed storage
// (funrl/buffers/_storage.py) in one pass, where eager torch takes a view, a reshape, a cat or a
// copy per dtype group (a few microseconds each, most of an add of 256 transitions). The same
// bytes land in the same places as with those torch ops (tests/buffers compare them).
#include <cstdint>
#include <cstring>

extern "C" {

// Leaf l of num_leaves is a contiguous batch [outer, steps, *item] at pointers[l]; its item is
// plan[3l + 2] bytes and goes to bytes plan[3l + 1] .. of a row of group g = plan[3l], a contiguous
// storage [outer, ring, row_bytes[g]] at pointers[num_leaves + g]. Step t of outer index o goes to
// row (head + t) % ring of o; head < ring and steps <= ring.
void funrl_write_ring_rows(int64_t num_leaves, const int64_t* plan, const int64_t* row_bytes,
                           void* const* pointers, int64_t outer, int64_t steps, int64_t head,
                           int64_t ring) {
  for (int64_t o = 0; o < outer; ++o) {
    int64_t row = head;
    for (int64_t t = 0; t < steps; ++t) {
      const int64_t item = o * steps + t;
      for (int64_t l = 0; l < num_leaves; ++l) {
        const int64_t group = plan[3 * l], offset = plan[3 * l + 1], width = plan[3 * l + 2];
        if (width == 0) continue;
        char* to = static_cast<char*>(pointers[num_leaves + group]) +
                   ((o * ring + row) * row_bytes[group] + offset);
        std::memcpy(to, static_cast<const char*>(pointers[l]) + item * width, width);
      }
      if (++row == ring) row = 0;
    }
  }
}

}  // extern "C"
