// Joining tensors: torch.cat (aclnnCat) and torch.stack (aclnnStack), both
// (tensors, dim, out). Inputs may have any supported dtypes that can be cast
// to out's, and any strides. As PyTorch, cat skips 1-D empty inputs
// (legacy shape [0]); stack needs every input of the same shape.
#include <string>
#include <vector>

#include "dtype.h"
#include "opapi.h"

namespace aclsim::opapi {

namespace {

// `dim` in [0, rank), wrapped from negative as PyTorch does.
int64_t wrap_dim(int64_t dim, int64_t rank) {
  const int64_t wrapped = dim < 0 ? dim + rank : dim;
  if (rank == 0 || wrapped < 0 || wrapped >= rank) {
    throw_invalid("dim " + std::to_string(dim) + " is out of range for a result of rank " + std::to_string(rank));
  }
  return wrapped;
}

// The inputs of a tensor list, checked against `out`.
std::vector<TensorDesc> list_arg(const aclTensorList* tensors, const TensorDesc& out) {
  if (tensors == nullptr) throw_nullptr("tensors");
  if (tensors->tensors.empty()) throw_invalid("tensors must not be empty");
  std::vector<TensorDesc> inputs;
  for (size_t i = 0; i < tensors->tensors.size(); ++i) {
    const std::string name = "tensors[" + std::to_string(i) + "]";
    const TensorDesc& t = tensor_arg(name.c_str(), tensors->tensors[i].get());
    check_tensor(name.c_str(), t);
    if (!can_cast(t.dtype, out.dtype)) {
      throw_invalid(name + " has dtype " + dtype_name(t.dtype) + ", which can't be cast to out's " +
                    dtype_name(out.dtype));
    }
    if (overlaps(t, out)) throw_invalid(name + " overlaps out");
    inputs.push_back(t);
  }
  return inputs;
}

// Writes each input into its part of out: along `dim` at increasing
// offsets (cat), or at index i of a dimension `dim` the inputs lack (stack).
std::function<void()> join_work(std::vector<TensorDesc> inputs, TensorDesc out, int64_t dim, bool stack) {
  return [inputs = std::move(inputs), out, dim, stack]() {
    int64_t position = 0;
    for (const TensorDesc& in : inputs) {
      if (in.numel() == 0) {
        position += stack ? 1 : (in.shape.size() == out.shape.size() ? in.shape[dim] : 0);
        continue;
      }
      TensorDesc part = out;
      part.offset += position * out.strides[dim];
      if (stack) {
        part.shape.erase(part.shape.begin() + dim);
        part.strides.erase(part.strides.begin() + dim);
        position += 1;
      } else {
        part.shape[dim] = in.shape[dim];
        position += in.shape[dim];
      }
      cast_kernel(make_operand(part, in.shape), make_operand(in, in.shape), in.shape);
    }
  };
}

}  // namespace

}  // namespace aclsim::opapi

using namespace aclsim::opapi;

OPAPI_EXPORT aclnnStatus aclnnCatGetWorkspaceSize(const aclTensorList* tensors, int64_t dim, aclTensor* out,
                                                  uint64_t* workspaceSize, aclOpExecutor** executor) {
  return prepare("aclnnCat", workspaceSize, executor, [&]() -> std::function<void()> {
    const TensorDesc& dst = tensor_arg("out", out);
    check_tensor("out", dst);
    std::vector<TensorDesc> inputs = list_arg(tensors, dst);
    const int64_t rank = static_cast<int64_t>(dst.shape.size());
    const int64_t d = wrap_dim(dim, rank);
    int64_t total = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const TensorDesc& t = inputs[i];
      if (t.shape.size() == 1 && t.shape[0] == 0) continue;  // legacy empty input: skipped
      std::vector<int64_t> expect = dst.shape;
      if (static_cast<int64_t>(t.shape.size()) == rank) expect[d] = t.shape[d];
      if (t.shape != expect) {
        throw_invalid("tensors[" + std::to_string(i) + "] has shape " + shape_text(t.shape) +
                      ", which does not fit out " + shape_text(dst.shape) + " outside dim " + std::to_string(d));
      }
      total += t.shape[d];
    }
    if (total != dst.shape[d]) {
      throw_invalid("the inputs add up to " + std::to_string(total) + " along dim " + std::to_string(d) +
                    ", out has " + std::to_string(dst.shape[d]));
    }
    return join_work(std::move(inputs), dst, d, false);
  });
}
OPAPI_DEFINE_LAUNCH(aclnnCat)

OPAPI_EXPORT aclnnStatus aclnnStackGetWorkspaceSize(const aclTensorList* tensors, int64_t dim, aclTensor* out,
                                                    uint64_t* workspaceSize, aclOpExecutor** executor) {
  return prepare("aclnnStack", workspaceSize, executor, [&]() -> std::function<void()> {
    const TensorDesc& dst = tensor_arg("out", out);
    check_tensor("out", dst);
    std::vector<TensorDesc> inputs = list_arg(tensors, dst);
    const int64_t d = wrap_dim(dim, static_cast<int64_t>(dst.shape.size()));
    std::vector<int64_t> expect = dst.shape;
    expect.erase(expect.begin() + d);
    if (dst.shape[d] != static_cast<int64_t>(inputs.size())) {
      throw_invalid("out has " + std::to_string(dst.shape[d]) + " entries along dim " + std::to_string(d) +
                    " for " + std::to_string(inputs.size()) + " tensors");
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].shape != expect) {
        throw_invalid("tensors[" + std::to_string(i) + "] has shape " + shape_text(inputs[i].shape) +
                      ", out " + shape_text(dst.shape) + " stacks tensors of shape " + shape_text(expect));
      }
    }
    return join_work(std::move(inputs), dst, d, true);
  });
}
OPAPI_DEFINE_LAUNCH(aclnnStack)
