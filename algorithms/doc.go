// Package algorithms builds gotree's collective schedules as pure data.
//
// It reproduces NCCL's double binary tree (Btree/Dtree), the intra-node
// chains and the rings joined across nodes, splits a message over channels
// and chunks, and emits for every rank and channel an ordered list of
// primitive steps (Send, Recv, RecvReduceSend, RecvReduceCopySend,
// RecvCopySend, Copy). Executors in other packages run those steps; the
// in-memory executor here is the oracle they are checked against.
//
// The package is deterministic and imports only pure standard-library
// packages: no os, net, time, sync, unsafe or cgo. A test enforces this.
package algorithms
