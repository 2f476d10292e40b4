// libgraph.so: the few GE graph-construction symbols that some torch_npu
// releases (2.6.0) link directly, so that they load. torch_npu's static
// initializers register its graph-mode operator creators (kept nowhere: the
// simulator runs eager code only); building a GE operator, which only graph
// mode does, raises an error naming the limit. Declarations come from the GE
// headers every torch_npu wheel ships (graph/*.h next to acl/*.h). Like the
// other forwarding libraries, this one links libascendcl.so.
#pragma GCC visibility push(default)
#include <graph/ascend_string.h>
#include <graph/operator.h>
#include <graph/operator_factory.h>
#pragma GCC visibility pop

#include <memory>
#include <stdexcept>
#include <string>

namespace {

[[noreturn]] void graph_mode_unsupported(const char* type) {
  throw std::runtime_error(std::string("aclsim: GE graph mode is not simulated (operator ") +
                           (type ? type : "built from AscendString names") + "); run eager code on aclsim");
}

}  // namespace

#pragma GCC visibility push(default)
namespace ge {

AscendString::AscendString(const char* name) : name_(std::make_shared<std::string>(name ? name : "")) {}

OperatorCreatorRegister::OperatorCreatorRegister(const char*, OpCreatorV2 const&) {}

Operator::Operator(const char*, const char* type) { graph_mode_unsupported(type); }
Operator::Operator(const AscendString&, const AscendString&) { graph_mode_unsupported(nullptr); }

// Only reachable on a constructed Operator, which the constructors above refuse.
void Operator::AttrRegister(const char*, bool) {}
void Operator::AttrRegister(const char*, int64_t) {}
void Operator::InputRegister(const char*) {}
void Operator::OutputRegister(const char*) {}
void Operator::DynamicInputRegister(const char*, const uint32_t, bool) {}
void Operator::DynamicInputRegisterByIndex(const char*, const uint32_t, size_t) {}
void Operator::RequiredAttrRegister(const char*) {}

}  // namespace ge
#pragma GCC visibility pop
