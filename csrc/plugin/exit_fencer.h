// The receiver's answer to exiting producers' fence requests
// (RefTable::request_fence). It keeps a registry of the received tensors
// this process holds; while it holds any, a thread of its own looks for
// requests in their producers' tables every 20 ms. On one, it waits for the
// work queued so far on those tensors' devices, then marks their slots
// (RefTable::mark_fenced). The producer's exit waits for those marks instead
// of its whole held-tensor grace; work queued after that on a tensor of an
// exiting producer reads memory that goes with it. A producer that ended
// without finishing its exit wait (RefTable::exit_waited: killed, os._exit,
// a terminated Pool worker) is reported once on stderr, with the count of
// its tensors this process still holds.
//
// A thread of its own, not the releaser's: a long fence never holds back the
// releases of other producers' tensors.
#pragma once

#include "received.h"

namespace torch_npu_ipc {

// Registers a tensor just received from another process (a tensor this
// process received from itself needs no fence: its exit does not wait).
void hold_for_exit_fence(Received* r);

// Takes it out again, before the Received is destroyed, after its slot was
// marked Releasing (a fence answered in between then leaves it alone).
void unhold_for_exit_fence(Received* r);

// This process is exiting (its own exit wait began): a producer that ends now
// is most likely one this exit stops (multiprocessing terminates daemonic
// children after atexit: a DataLoader's persistent workers, a Pool never
// closed), and the tensors held die with this process anyway, so the
// "ended without its exit wait" warning is no longer printed.
void quiet_vanished_producers();

}  // namespace torch_npu_ipc
