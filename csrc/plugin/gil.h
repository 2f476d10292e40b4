// Releasing the GIL around calls into the runtime, safely at interpreter exit.
#pragma once

#include <Python.h>

#ifdef __GLIBCXX__
#include <cxxabi.h>
#endif

#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

namespace torch_npu_ipc {

// Called once by an atexit handler, with the GIL, in the exiting thread.
void mark_interpreter_exiting();

// Never returns when the interpreter is finalizing (after every atexit
// handler ran) and `self` is another thread than the exiting one; else
// returns at once.
void park_if_exiting(PyThreadState* self);

// Releases the GIL for a call into the runtime. Unlike pybind11's
// gil_scoped_release, it lets a program exit while a daemon thread is
// inside such a call: CPython ends a thread that takes the GIL back while
// the interpreter is finalizing (pthread_exit, a forced unwind), and
// through gil_scoped_release's noexcept destructor, or one run while the
// call's error unwinds, that was std::terminate (the process aborted).
// Once the interpreter finalizes, threads other than the exiting one park
// here instead of taking the GIL back; one caught already waiting for it
// unwinds through this noexcept(false) destructor to pybind11, which passes
// the unwind on. Nothing parks while atexit handlers run: multiprocessing's
// joins the queue feeder threads that pickle tensors through this module.
class GilRelease {
 public:
  GilRelease() : state_(PyEval_SaveThread()) {}
  ~GilRelease() noexcept(false) {
    park_if_exiting(state_);
    PyEval_RestoreThread(state_);
  }
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

 private:
  PyThreadState* state_;
};

// fn() without the GIL; an error it raises is rethrown once the GIL is back.
template <class F>
std::invoke_result_t<F&> without_gil(F&& fn) {
  using R = std::invoke_result_t<F&>;
  std::exception_ptr error;
  std::optional<std::conditional_t<std::is_void_v<R>, bool, R>> result;
  {
    GilRelease released;
    try {
      if constexpr (std::is_void_v<R>) {
        fn();
      } else {
        result.emplace(fn());
      }
#ifdef __GLIBCXX__
    } catch (abi::__forced_unwind&) {
      throw;  // thread cancellation must go on
#endif
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  if constexpr (!std::is_void_v<R>) return std::move(*result);
}

// A function to bind whose calls run without_gil: a plain function (or a
// lambda made one with unary +) or a const member function.
template <class R, class... A>
auto released(R (*fn)(A...)) {
  return [fn](A... args) -> R { return without_gil([&]() -> R { return fn(std::forward<A>(args)...); }); };
}
template <class R, class C, class... A>
auto released(R (C::*fn)(A...) const) {
  return [fn](const C& self, A... args) -> R {
    return without_gil([&]() -> R { return (self.*fn)(std::forward<A>(args)...); });
  };
}

}  // namespace torch_npu_ipc
