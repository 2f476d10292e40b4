// Libraries that torch_npu NEEDs or opens by name, whose functions the
// simulator implements in libascendcl.so (libacl_op_compiler.so,
// libge_runner.so, libacl_tdt_channel.so, libruntime.so).
// Each is built from this empty unit and links libascendcl.so, so
// dlsym(handle, name) finds the names through the DT_NEEDED chain.
