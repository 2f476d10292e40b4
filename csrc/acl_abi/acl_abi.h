// CANN's ACL runtime ABI, as the rest of csrc/ sees it: the ACL headers that
// the installed torch_npu wheel ships, plus what newer CANN releases added
// and older wheels' headers lack (torch_npu 2.7.1 ships acl_rt.h without
// interprocess events, 2.6.0 also without IPC memory, for example).
//
// Everything below restates CANN 8.x's ABI (the values and layouts in the
// headers torch_npu 2.13 ships) and is declared only where the installed
// headers lack it: macros are tested with #ifndef; types and enumerators are
// found missing by the build (tools/build_aclsim.py, acl_abi_defines), which
// then passes -DACL_ABI_LACKS_<name>. The runtime functions themselves need
// no declaration here: the plugin resolves them at run time (acl_table.h)
// and aclsim defines them.
#pragma once

#include <acl/acl.h>

#include <cstddef>
#include <cstdint>

// Event creation flags (aclrtCreateEventExWithFlag).
#ifndef ACL_EVENT_DEVICE_USE_ONLY
#define ACL_EVENT_DEVICE_USE_ONLY 0x00000010U
#endif
#ifndef ACL_EVENT_IPC
#define ACL_EVENT_IPC 0x00000040U
#endif

// Runtime error codes.
#ifndef ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
#define ACL_ERROR_RT_STREAM_SYNC_TIMEOUT 507046
#endif
#ifndef ACL_ERROR_RT_EVENT_SYNC_TIMEOUT
#define ACL_ERROR_RT_EVENT_SYNC_TIMEOUT 507047
#endif
#ifndef ACL_ERROR_RT_FEATURE_NOT_SUPPORT
#define ACL_ERROR_RT_FEATURE_NOT_SUPPORT 207000
#endif
#ifndef ACL_ERROR_RT_NO_EVENT_RESOURCE
#define ACL_ERROR_RT_NO_EVENT_RESOURCE 207007
#endif

// Interprocess events.
#ifndef ACL_IPC_EVENT_HANDLE_SIZE
#define ACL_IPC_EVENT_HANDLE_SIZE 64U
#endif
#ifdef ACL_ABI_LACKS_aclrtIpcEventHandle
typedef struct aclrtIpcEventHandle {
  char reserved[ACL_IPC_EVENT_HANDLE_SIZE];
} aclrtIpcEventHandle;
#endif

// IPC memory flags (aclrtIpcMemGetExportKey / aclrtIpcMemImportByKey).
#ifndef ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT
#define ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT 0x0UL
#endif
#ifndef ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION
#define ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION 0x1UL
#endif
#ifndef ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT
#define ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT 0x0UL
#endif
#ifndef ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS
#define ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS 0x1UL
#endif

// Copy kinds after ACL_MEMCPY_DEVICE_TO_DEVICE (enumerators 4..7 of aclrtMemcpyKind).
#ifdef ACL_ABI_LACKS_ACL_MEMCPY_INTER_DEVICE_TO_DEVICE
constexpr aclrtMemcpyKind ACL_MEMCPY_DEFAULT = static_cast<aclrtMemcpyKind>(4);
constexpr aclrtMemcpyKind ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE = static_cast<aclrtMemcpyKind>(5);
constexpr aclrtMemcpyKind ACL_MEMCPY_INNER_DEVICE_TO_DEVICE = static_cast<aclrtMemcpyKind>(6);
constexpr aclrtMemcpyKind ACL_MEMCPY_INTER_DEVICE_TO_DEVICE = static_cast<aclrtMemcpyKind>(7);
#endif

// Pointer attributes (aclrtPointerGetAttributes).
#ifdef ACL_ABI_LACKS_ACL_MEM_LOCATION_TYPE_UNREGISTERED
constexpr aclrtMemLocationType ACL_MEM_LOCATION_TYPE_UNREGISTERED = static_cast<aclrtMemLocationType>(2);
#endif
#ifdef ACL_ABI_LACKS_aclrtPtrAttributes
typedef struct aclrtPtrAttributes {
  aclrtMemLocation location;
  uint32_t pageSize;
  uint32_t rsv[4];
} aclrtPtrAttributes;
#endif

// Host callbacks and kernel binaries (aclsim refuses the latter).
#ifdef ACL_ABI_LACKS_aclrtHostFunc
typedef void (*aclrtHostFunc)(void* args);
#endif
#ifdef ACL_ABI_LACKS_aclrtBinHandle
typedef void* aclrtBinHandle;
#endif
#ifdef ACL_ABI_LACKS_aclrtFuncHandle
typedef void* aclrtFuncHandle;
#endif
#ifdef ACL_ABI_LACKS_aclrtBinaryLoadOptions
typedef struct aclrtBinaryLoadOptions aclrtBinaryLoadOptions;  // only passed by pointer
#endif
