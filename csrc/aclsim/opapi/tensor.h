// The opaque argument objects of the aclnn ABI (aclTensor, aclScalar, the
// arrays and lists) and the value descriptors operators keep.
//
// torch_npu destroys these objects right after the second phase of an
// operator call, while the work itself runs later on a stream worker. So the
// ABI objects only wrap plain values (TensorDesc, ScalarValue) that
// operators copy into their executors.
#pragma once

#include <acl/acl.h>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace aclsim::opapi {

// Everything aclCreateTensor describes. `data` is the start of the storage;
// the first element of the view is at data + offset * element_size.
struct TensorDesc {
  aclDataType dtype = ACL_DT_UNDEFINED;
  aclFormat format = ACL_FORMAT_ND;
  std::vector<int64_t> shape;    // view dims
  std::vector<int64_t> strides;  // in elements
  int64_t offset = 0;            // in elements
  std::vector<int64_t> storage_shape;
  void* data = nullptr;

  int64_t numel() const;
  // Address of the view's element 0 (data + offset * element size).
  char* origin() const;
};

// A host value of one dtype, copied out of the caller's memory.
struct ScalarValue {
  aclDataType dtype = ACL_DT_UNDEFINED;
  std::array<unsigned char, 16> bytes{};
};

// The real shape of an output whose size depends on the data
// (aclnnMaskedSelect): the operator writes it when it runs on the stream,
// aclGetViewShape reads it after the caller synchronized the stream.
// Shared with the executor, so it outlives an early aclDestroyTensor.
struct ResultShape {
  std::mutex mutex;
  bool known = false;
  std::vector<int64_t> shape;
};

}  // namespace aclsim::opapi

// The ABI types are incomplete to torch_npu; these are their definitions.
struct aclTensor {
  aclsim::opapi::TensorDesc desc;
  // Set up by an operator with a data-dependent output shape; null otherwise.
  std::shared_ptr<aclsim::opapi::ResultShape> result_shape;
};

struct aclScalar {
  aclsim::opapi::ScalarValue value;
};

struct aclIntArray {
  std::vector<int64_t> values;
};

struct aclFloatArray {
  std::vector<float> values;
};

struct aclBoolArray {
  std::vector<bool> values;
};

// Lists own their elements: destroying a list destroys its tensors/scalars.
struct aclTensorList {
  std::vector<std::unique_ptr<aclTensor>> tensors;
};

struct aclScalarList {
  std::vector<std::unique_ptr<aclScalar>> scalars;
};
