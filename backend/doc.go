// Package backend runs gotree's plans: an executor interprets the
// primitive steps of an algorithms.Plan over Conns, the point-to-point
// transports (TCP across hosts, in-memory for tests), reducing with the CPU
// kernels of backend/reduce.
//
// A Conn is one direction-agnostic link with one peer on one channel. The
// receiving side of every Conn has a slot FIFO that a progress goroutine
// fills from the wire, like NCCL's Simple protocol: a sender can run ahead
// of its receiver by the FIFO's depth, which is what makes the ring and
// tree schedules deadlock-free as long as one plan step fits in the FIFO.
package backend
