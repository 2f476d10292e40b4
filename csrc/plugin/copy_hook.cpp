#include "copy_hook.h"

#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <torch/library.h>
#include <torch/version.h>

#include <atomic>
#include <memory>
#include <mutex>

#include "copy_barrier.h"
#include "external_stream.h"
#include "queue_error.h"

namespace torch_npu_ipc {
namespace {

constexpr c10::DeviceType kNpu = c10::DeviceType::PrivateUse1;

// ------------------------------------------------------------ the hook

// Where the hook sits in the dispatcher, and how it hands a call on to
// torch_npu's own kernel (see copy_hook.h).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)
// torch >= 2.9 can capture the kernel a registration shadows
// (OperatorHandle::getComputedKernelForDispatchKey): the hook replaces
// torch_npu's PrivateUse1 kernels and calls the captured ones.
constexpr c10::DispatchKey kHookKey = c10::DispatchKey::PrivateUse1;

class Native {
 public:
  explicit Native(const c10::OperatorHandle& op) : kernel_(op.getComputedKernelForDispatchKey(kHookKey)) {}
  void call(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) const {
    kernel_.callBoxed(op, ks, stack);
  }

 private:
  c10::SafeKernelFunction kernel_;
};
#else
// Older torch cannot: the hook sits at BackendSelect, which every call of
// these operators passes on its way from autograd to the backend, and hands
// a call on by redispatching below it, to whatever kernel the tensors'
// backend has (torch_npu's for NPU tensors). Copies of other devices pass
// through the hook too, at the cost of one boxed call.
//
// aten::_to_copy has a BackendSelect kernel of torch's own, which the hook
// shadows: its choice (the backend of the target dtype/layout/device joins
// the tensor's keys) is made again here before redispatching.
constexpr c10::DispatchKey kHookKey = c10::DispatchKey::BackendSelect;

class Native {
 public:
  explicit Native(const c10::OperatorHandle& op) : selects_backend_(op.operator_name().name == "aten::_to_copy") {}
  void call(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) const {
    const c10::DispatchKeySet below(c10::DispatchKeySet::FULL_AFTER, kHookKey);
    if (!selects_backend_) return op.redispatchBoxed(ks & below, stack);
    // _to_copy(Tensor self, *, ScalarType? dtype, Layout? layout, Device? device, ...): 7 arguments.
    auto args = torch::jit::last(*stack, 7);
    const c10::DispatchKeySet target(c10::computeDispatchKey(
        args[1].toOptional<at::ScalarType>(), args[2].toOptional<at::Layout>(), args[3].toOptional<at::Device>()));
    op.redispatchBoxed(c10::impl::computeDispatchKeySet(target | args[0].toTensor().key_set(), below), stack);
  }

 private:
  bool selects_backend_;
};
#endif

struct Natives {
  Native copy;
  Native to_copy;
  Native local_scalar;
};

struct Hook {
  std::mutex mu;
  std::unique_ptr<torch::Library> lib;
  std::shared_ptr<const Natives> natives;  // read with std::atomic_load
  std::atomic<int> mode{static_cast<int>(CopyMode::kEvents)};
};

Hook& hook() {
  // Leaked on purpose: the Library must not deregister during static
  // destruction while torch's dispatcher may already be gone.
  static Hook* h = std::make_unique<Hook>().release();
  return *h;
}

// Calls handed to torch_npu's own kernel.
std::atomic<uint64_t> delegated{0};

// ------------------------------------------------------------- kernels

std::shared_ptr<const Natives> natives() { return std::atomic_load(&hook().natives); }

CopyMode current_mode() { return static_cast<CopyMode>(hook().mode.load(std::memory_order_relaxed)); }

c10::DeviceIndex current_npu() { return c10::impl::getDeviceGuardImpl(kNpu)->getDevice().index(); }

void delegate(const Native& native, const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  delegated.fetch_add(1, std::memory_order_relaxed);
  native.call(op, ks, stack);
}

// aten::copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)
void copy_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  auto n = natives();
  const at::Tensor self = (*stack)[stack->size() - 3].toTensor();
  const at::Tensor src = (*stack)[stack->size() - 2].toTensor();
  // A failed queue's report a plugin thread took: every copy touching an
  // NPU raises it (reading results goes through a copy).
  if (self.device().type() == kNpu || src.device().type() == kNpu) raise_kept_queue_report();
  const bool cross = self.device().type() == kNpu && src.device().type() == kNpu &&
                     self.device().index() != src.device().index();
  // Raised here rather than by torch_npu's kernel, whose error would
  // surface from its task queue and stop it.
  TORCH_CHECK(!cross || at::is_expandable_to(src.sizes(), self.sizes()), "copy_: the source's shape ", src.sizes(),
              " cannot be broadcast to the destination's shape ", self.sizes());
  // A destination whose elements share memory (an expanded view): torch's
  // TensorIterator refuses it for CPU and CUDA copies with this message.
  if (cross) at::assert_no_internal_overlap(self);
  // A non_blocking copy between pinned host memory and an NPU whose current
  // stream is an external one (ExternalStream, native path): torch_npu's
  // host allocator records an event on the copy's stream when the pinned
  // block is freed, refuses an external stream there, and the process
  // aborts. It runs on a pool stream ordered with the external one instead.
  const bool npu_self = self.device().type() == kNpu;
  if (!cross && npu_self != (src.device().type() == kNpu) && (*stack)[stack->size() - 1].toBool()) {
    const at::Tensor& host = npu_self ? src : self;
    // Cheapest checks first: without native external streams there is nothing to look up.
    if (host.device().is_cpu() && has_stream_from_external()) {
      const c10_npu::NPUStream current = c10_npu::getCurrentNPUStream((npu_self ? self : src).device().index());
      if (is_external(current) && host.is_pinned()) {
        return run_beside_external(current, [&] { delegate(n->copy, op, ks, stack); });
      }
    }
  }
  bool ours = cross && plain_npu(self) && plain_npu(src) &&
              ensure_peer_access(src.device().index(), self.device().index());
  if (!ours) return delegate(n->copy, op, ks, stack);
  cross_device_copy(self, src, current_mode());
  torch::jit::drop(*stack, 3);
  torch::jit::push(*stack, self);
}

// aten::_to_copy(Tensor self, *, ScalarType? dtype, Layout? layout, Device? device,
//                bool? pin_memory, bool non_blocking, MemoryFormat? memory_format) -> Tensor
void to_copy_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  auto n = natives();
  auto args = torch::jit::last(*stack, 7);
  const at::Tensor self = args[0].toTensor();
  auto device = args[3].toOptional<at::Device>();
  if (self.device().type() == kNpu || (device.has_value() && device->type() == kNpu)) raise_kept_queue_report();
  bool ours = device.has_value() && device->type() == kNpu && self.device().type() == kNpu;
  c10::DeviceIndex target = -1;
  if (ours) {
    target = device->has_index() ? device->index() : current_npu();
    const c10::DeviceIndex count = c10::impl::getDeviceGuardImpl(kNpu)->deviceCount();
    TORCH_CHECK(target < count, "to(): npu:", int(target), " does not exist (", int(count),
                " NPU device(s) visible)");
    auto layout = args[2].toOptional<at::Layout>();
    auto pin = args[4].toOptional<bool>();
    ours = target != self.device().index() && (!layout.has_value() || *layout == at::kStrided) &&
           !(pin.has_value() && *pin) && plain_npu(self) && ensure_peer_access(self.device().index(), target);
  }
  if (!ours) return delegate(n->to_copy, op, ks, stack);

  auto dtype = args[1].toOptional<at::ScalarType>().value_or(self.scalar_type());
  auto memory_format = args[6].toOptional<at::MemoryFormat>().value_or(at::MemoryFormat::Preserve);
  auto options = self.options().dtype(dtype).device(at::Device(kNpu, target));
  at::Tensor result;
  if (memory_format == at::MemoryFormat::Preserve) {
    // As at::native::_to_copy: a dense source keeps its strides; any other
    // gets dense strides in the order of its own (a transposed slice stays
    // transposed).
    const auto strides = self.is_non_overlapping_and_dense() ? self.strides().vec()
                                                             : at::infer_dense_strides(self.sizes(), self.strides());
    result = at::empty_strided(self.sizes(), strides, options);
  } else {
    result = at::empty(self.sizes(), options.memory_format(memory_format));
  }
  cross_device_copy(result, self, current_mode(), /*dst_is_fresh=*/true);
  torch::jit::drop(*stack, 7);
  torch::jit::push(*stack, std::move(result));
}

// aten::_local_scalar_dense(Tensor self) -> Scalar: Tensor.item() and the
// reads built on it (bool(), int(), format()). Not a copy: hooked only so
// that a failed queue's report a plugin thread took reaches these reads too.
void local_scalar_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  auto n = natives();
  if (stack->back().toTensor().device().type() == kNpu) raise_kept_queue_report();
  n->local_scalar.call(op, ks, stack);
}

}  // namespace

// ------------------------------------------------------------ public API

void copies_enable(CopyMode mode) {
  Hook& h = hook();
  std::lock_guard<std::mutex> lock(h.mu);
  h.mode.store(static_cast<int>(mode), std::memory_order_relaxed);
  if (h.lib != nullptr) return;
  auto& dispatcher = c10::Dispatcher::singleton();
  auto copy_op = dispatcher.findSchemaOrThrow("aten::copy_", "");
  auto to_copy_op = dispatcher.findSchemaOrThrow("aten::_to_copy", "");
  auto local_scalar_op = dispatcher.findSchemaOrThrow("aten::_local_scalar_dense", "");
  TORCH_CHECK(copy_op.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) &&
                  to_copy_op.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) &&
                  local_scalar_op.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1),
              "torch_npu registered no PrivateUse1 kernel for aten::copy_ / aten::_to_copy / "
              "aten::_local_scalar_dense; cross-device copies cannot be hooked");
  // At BackendSelect the hook redispatches below that key and does what
  // torch's own BackendSelect kernel of _to_copy does (see Native); any
  // other kernel there would be skipped, so refuse instead.
  TORCH_CHECK(kHookKey != c10::DispatchKey::BackendSelect ||
                  (!copy_op.hasKernelForDispatchKey(kHookKey) && !local_scalar_op.hasKernelForDispatchKey(kHookKey)),
              "another library registered a BackendSelect kernel for aten::copy_ or aten::_local_scalar_dense; on "
              "this torch (before 2.9) the copy hook would bypass it, so it is not installed: set "
              "TORCH_NPU_IPC_COPIES=0");
  // How to reach torch_npu's kernels once ours shadow them (captured now, where torch can).
  auto captured = std::make_shared<Natives>(Natives{Native(copy_op), Native(to_copy_op), Native(local_scalar_op)});
  std::atomic_store(&h.natives, std::shared_ptr<const Natives>(std::move(captured)));
  // The dispatcher warns when a kernel shadows another one; here that is
  // the point, so keep the warning out of the user's log.
  struct Quiet : c10::WarningHandler {
    void process(const c10::Warning&) override {}
  } quiet;
  c10::WarningUtils::WarningHandlerGuard guard(&quiet);
  auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", kHookKey, __FILE__, __LINE__);
  lib->impl("copy_", torch::CppFunction::makeFromBoxedFunction<&copy_kernel>());
  lib->impl("_to_copy", torch::CppFunction::makeFromBoxedFunction<&to_copy_kernel>());
  lib->impl("_local_scalar_dense", torch::CppFunction::makeFromBoxedFunction<&local_scalar_kernel>());
  h.lib = std::move(lib);
}

void copies_disable() {
  Hook& h = hook();
  std::lock_guard<std::mutex> lock(h.mu);
  h.lib.reset();  // deregisters: torch_npu's kernels are the computed ones again
}

bool copies_enabled() {
  Hook& h = hook();
  std::lock_guard<std::mutex> lock(h.mu);
  return h.lib != nullptr;
}

CopyMode copies_mode() { return current_mode(); }

std::string copies_dispatch_key() { return c10::toString(kHookKey); }

uint64_t copies_delegated() { return delegated.load(); }

}  // namespace torch_npu_ipc
