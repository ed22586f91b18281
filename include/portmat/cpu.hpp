// portmat's native CPU backend (device "cpu:0"): its thread-count setting.
//
// The backend runs each matmul on one process-wide pool of threads; concurrent calls queue for
// it, so the machine is never oversubscribed however many threads call matmul.
#pragma once

namespace portmat {

// Threads per matmul on the CPU backend. n <= 0 restores the default: $PORTMAT_NUM_THREADS if set
// to a positive integer, else every CPU this process may run on. Both are clamped to the CPUs this
// process may run on (more threads only slow a product down). Takes effect from the next call.
void set_num_threads(int n);
int num_threads();

}  // namespace portmat
