// Creation, destruction and queries of the aclnn argument objects:
// aclCreateTensor/aclCreateScalar/aclCreate*Array/aclCreate*List, their
// aclDestroy* counterparts, and aclGetViewShape.
//
// Creators return nullptr for invalid arguments (torch_npu then passes the
// null on, and the operator reports it). Destroyers accept nullptr.
#include "tensor.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "dtype.h"
#include "status.h"

namespace aclsim::opapi {

int64_t TensorDesc::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

char* TensorDesc::origin() const {
  return static_cast<char*>(data) + offset * static_cast<int64_t>(element_size(dtype));
}

}  // namespace aclsim::opapi

using aclsim::opapi::element_size;

namespace {

// Builds a T, lets `fill` initialise it, and hands ownership to the caller
// as a raw pointer (the ABI's only way). Returns nullptr when `fill` refuses
// or memory runs out; no exception leaves the library.
template <class T, class Fill>
T* create(Fill&& fill) {
  try {
    auto object = std::make_unique<T>();
    if (!fill(*object)) return nullptr;
    return object.release();
  } catch (...) {
    return nullptr;
  }
}

}  // namespace

OPAPI_EXPORT aclTensor* aclCreateTensor(const int64_t* viewDims, uint64_t viewDimsNum,
                                        aclDataType dataType, const int64_t* stride,
                                        int64_t offset, aclFormat format,
                                        const int64_t* storageDims, uint64_t storageDimsNum,
                                        void* tensorData) {
  if ((viewDimsNum > 0 && viewDims == nullptr) || (storageDimsNum > 0 && storageDims == nullptr) ||
      viewDimsNum > 64 || storageDimsNum > 64 || offset < 0) {
    return nullptr;
  }
  return create<aclTensor>([&](aclTensor& tensor) {
    auto& desc = tensor.desc;
    desc.dtype = dataType;
    desc.format = format;
    desc.offset = offset;
    desc.data = tensorData;
    desc.shape.assign(viewDims, viewDims + viewDimsNum);
    for (int64_t d : desc.shape) {
      if (d < 0) return false;
    }
    if (stride != nullptr) {
      desc.strides.assign(stride, stride + viewDimsNum);
    } else {
      // No strides given: the view is contiguous.
      desc.strides.assign(viewDimsNum, 1);
      for (uint64_t i = viewDimsNum; i > 1; --i) {
        desc.strides[i - 2] = desc.strides[i - 1] * desc.shape[i - 1];
      }
    }
    desc.storage_shape.assign(storageDims, storageDims + storageDimsNum);
    return true;
  });
}

OPAPI_EXPORT aclScalar* aclCreateScalar(void* value, aclDataType dataType) {
  const size_t size = element_size(dataType);
  if (value == nullptr || size == 0) return nullptr;
  return create<aclScalar>([&](aclScalar& scalar) {
    scalar.value.dtype = dataType;
    std::memcpy(scalar.value.bytes.data(), value, size);
    return true;
  });
}

OPAPI_EXPORT aclIntArray* aclCreateIntArray(const int64_t* value, uint64_t size) {
  if (size > 0 && value == nullptr) return nullptr;
  return create<aclIntArray>([&](aclIntArray& array) {
    array.values.assign(value, value + size);
    return true;
  });
}

OPAPI_EXPORT aclFloatArray* aclCreateFloatArray(const float* value, uint64_t size) {
  if (size > 0 && value == nullptr) return nullptr;
  return create<aclFloatArray>([&](aclFloatArray& array) {
    array.values.assign(value, value + size);
    return true;
  });
}

OPAPI_EXPORT aclBoolArray* aclCreateBoolArray(const bool* value, uint64_t size) {
  if (size > 0 && value == nullptr) return nullptr;
  return create<aclBoolArray>([&](aclBoolArray& array) {
    array.values.assign(value, value + size);
    return true;
  });
}

OPAPI_EXPORT aclTensorList* aclCreateTensorList(const aclTensor* const* value, uint64_t size) {
  if (size > 0 && value == nullptr) return nullptr;
  return create<aclTensorList>([&](aclTensorList& list) {
    list.tensors.reserve(size);  // may throw: before any ownership is taken
    for (uint64_t i = 0; i < size; ++i) {
      // The list takes ownership of the tensors it is given.
      list.tensors.emplace_back(const_cast<aclTensor*>(value[i]));
    }
    return true;
  });
}

OPAPI_EXPORT aclScalarList* aclCreateScalarList(const aclScalar* const* value, uint64_t size) {
  if (size > 0 && value == nullptr) return nullptr;
  return create<aclScalarList>([&](aclScalarList& list) {
    list.scalars.reserve(size);
    for (uint64_t i = 0; i < size; ++i) {
      list.scalars.emplace_back(const_cast<aclScalar*>(value[i]));
    }
    return true;
  });
}

// The destroyers take ownership back from the raw pointer handed out above.
OPAPI_EXPORT int aclDestroyTensor(const aclTensor* tensor) {
  std::unique_ptr<const aclTensor> owned(tensor);
  return 0;
}

OPAPI_EXPORT int aclDestroyScalar(const aclScalar* scalar) {
  std::unique_ptr<const aclScalar> owned(scalar);
  return 0;
}

OPAPI_EXPORT int aclDestroyIntArray(const aclIntArray* array) {
  std::unique_ptr<const aclIntArray> owned(array);
  return 0;
}

OPAPI_EXPORT int aclDestroyFloatArray(const aclFloatArray* array) {
  std::unique_ptr<const aclFloatArray> owned(array);
  return 0;
}

OPAPI_EXPORT int aclDestroyBoolArray(const aclBoolArray* array) {
  std::unique_ptr<const aclBoolArray> owned(array);
  return 0;
}

OPAPI_EXPORT int aclDestroyTensorList(const aclTensorList* list) {
  std::unique_ptr<const aclTensorList> owned(list);
  return 0;
}

OPAPI_EXPORT int aclDestroyScalarList(const aclScalarList* list) {
  std::unique_ptr<const aclScalarList> owned(list);
  return 0;
}

// Returns the view dims in a new[] array the caller frees with delete[].
OPAPI_EXPORT int aclGetViewShape(const aclTensor* tensor, int64_t** viewDims,
                                 uint64_t* viewDimsNum) {
  if (tensor == nullptr || viewDims == nullptr || viewDimsNum == nullptr) {
    return aclsim::opapi::kErrParamNullptr;
  }
  try {
    std::vector<int64_t> shape = tensor->desc.shape;
    if (tensor->result_shape != nullptr) {
      const std::lock_guard<std::mutex> lock(tensor->result_shape->mutex);
      if (tensor->result_shape->known) shape = tensor->result_shape->shape;
    }
    auto dims = std::make_unique<int64_t[]>(shape.empty() ? 1 : shape.size());
    std::copy(shape.begin(), shape.end(), dims.get());
    *viewDims = dims.release();  // the caller owns it now
    *viewDimsNum = shape.size();
    return aclsim::opapi::kSuccess;
  } catch (...) {
    return aclsim::opapi::kErrInner;
  }
}
