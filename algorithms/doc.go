// Package algorithms builds gotree's collective schedules as pure data.
//
// It reproduces NCCL's double binary tree (Btree/Dtree), the intra-node
// chains and the rings joined across nodes, splits a message over channels
// and chunks, and emits for every rank and channel an ordered list of
// primitive steps (Send, Recv, RecvReduceSend, RecvReduceCopySend,
// RecvCopySend, Copy). Executors in other packages run those steps; the
// in-memory executor here is the oracle they are checked against.
//
// Files: trees.go (Btree, Dtree), graph.go (Layout, BuildGraph), partition.go
// (PartitionMessage), schedule.go (PlanRequest, BuildPlan), plantext.go
// (Plan.String, Plan.Stats), check.go (CheckPlan), oracle.go (RunOracle and
// the executor contract), reduce_ref.go (reference reductions), graphlog*.go
// (NCCL log lines). docs/algorithms.md describes the constructions, the step
// lists and the bytes each rank moves.
//
// The package is deterministic and imports only pure standard-library
// packages: no os, net, time, sync, unsafe or cgo. A test enforces this.
package algorithms
