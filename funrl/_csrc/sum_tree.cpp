// Eager CPU sum-tree descent and update for funrl.buffers.sum_tree: one pass per call instead of a
// few torch ops per tree level (~20 levels at 1e6 items). Same float64 operations, in the same
// order, as the torch ops there (tests/buffers compare them).
#include <cstdint>
#include <vector>

extern "C" {

// out[i]: the item whose cumulative interval holds targets[i] (sum_tree.find's descent). Level by
// level over all targets rather than target by target: each target's next read depends on its
// last, so one descent at a time waits on every cache miss in turn; a level of all targets issues
// their reads together. out holds each target's node while descending.
void funrl_sum_tree_find(const double* tree, int64_t depth, int64_t num_leaves,
                         const double* targets, int64_t* out, int64_t n) {
  std::vector<double> remaining(targets, targets + n);
  for (int64_t i = 0; i < n; ++i) out[i] = 1;
  for (int64_t level = 0; level < depth; ++level) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t node = out[i];
      const double left = tree[2 * node];
      const double right = tree[2 * node + 1];
      const bool go_right = (remaining[i] >= left && right > 0) || left <= 0;
      if (go_right) remaining[i] = remaining[i] - left;
      out[i] = 2 * node + (go_right ? 1 : 0);
    }
  }
  for (int64_t i = 0; i < n; ++i) out[i] -= num_leaves;
}

// Leaves idx[i] := values[i], then every ancestor, level by level, := the sum of its children
// (sum_tree.update). Returns -1, or the position of the first index outside [0, num_leaves), in
// which case nothing is written.
int64_t funrl_sum_tree_update(double* tree, int64_t num_leaves, int64_t depth, const int64_t* idx,
                              const double* values, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (idx[i] < 0 || idx[i] >= num_leaves) return i;
  }
  for (int64_t i = 0; i < n; ++i) tree[num_leaves + idx[i]] = values[i];
  for (int64_t level = 1; level <= depth; ++level) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t node = (num_leaves + idx[i]) >> level;
      tree[node] = tree[2 * node] + tree[2 * node + 1];
    }
  }
  return -1;
}

}  // extern "C"
