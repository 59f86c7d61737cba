package cuda

// The C view of kernels/abi.cuh, for TestABILayout: the Go encoder in
// abi.go must put every field where the kernels read it.

/*
#include "kernels/abi.cuh"
*/
import "C"

import "unsafe"

// cABILayout returns sizes and field offsets of the ABI structs as the C
// compiler lays them out, and the header's constants.
func cABILayout() map[string]uintptr {
	var s C.GtStep
	var ch C.GtChannel
	var cn C.GtConn
	var a C.GtArgs
	return map[string]uintptr{
		"GtStep":           unsafe.Sizeof(s),
		"GtStep.prim":      unsafe.Offsetof(s.prim),
		"GtStep.nrecv":     unsafe.Offsetof(s.nrecv),
		"GtStep.nsend":     unsafe.Offsetof(s.nsend),
		"GtStep.srcBuf":    unsafe.Offsetof(s.srcBuf),
		"GtStep.dstBuf":    unsafe.Offsetof(s.dstBuf),
		"GtStep.recv":      unsafe.Offsetof(s.recv),
		"GtStep.send":      unsafe.Offsetof(s.send),
		"GtStep.srcOff":    unsafe.Offsetof(s.srcOff),
		"GtStep.dstOff":    unsafe.Offsetof(s.dstOff),
		"GtStep.bytes":     unsafe.Offsetof(s.bytes),
		"GtChannel":        unsafe.Sizeof(ch),
		"GtChannel.first":  unsafe.Offsetof(ch.firstStep),
		"GtChannel.nsteps": unsafe.Offsetof(ch.nsteps),
		"GtChannel.nstr":   unsafe.Offsetof(ch.nstreams),
		"GtChannel.fconn":  unsafe.Offsetof(ch.firstConn),
		"GtChannel.nconns": unsafe.Offsetof(ch.nconns),
		"GtConn":           unsafe.Sizeof(cn),
		"GtConn.simple":    unsafe.Offsetof(cn.simple),
		"GtConn.ll":        unsafe.Offsetof(cn.ll),
		"GtConn.tail":      unsafe.Offsetof(cn.tail),
		"GtConn.head":      unsafe.Offsetof(cn.head),
		"GtConn.role":      unsafe.Offsetof(cn.role),
		"GtConn.peer":      unsafe.Offsetof(cn.peer),
		"GtArgs":           unsafe.Sizeof(a),
		"GtArgs.in":        unsafe.Offsetof(a.in),
		"GtArgs.out":       unsafe.Offsetof(a.out),
		"GtArgs.steps":     unsafe.Offsetof(a.steps),
		"GtArgs.channels":  unsafe.Offsetof(a.channels),
		"GtArgs.conns":     unsafe.Offsetof(a.conns),
		"GtArgs.err":       unsafe.Offsetof(a.err),
		"GtArgs.abort":     unsafe.Offsetof(a.abortFlag),
		"GtArgs.timeout":   unsafe.Offsetof(a.timeoutNs),
		"GtArgs.slot":      unsafe.Offsetof(a.simpleSlotBytes),
		"GtArgs.lines":     unsafe.Offsetof(a.llSlotLines),
		"GtArgs.proto":     unsafe.Offsetof(a.proto),
		"GtArgs.group0":    unsafe.Offsetof(a.group0Threads),
		"GT_NSLOTS":        C.GT_NSLOTS,
		"GT_MAX_PEERS":     C.GT_MAX_PEERS,
		"GT_MAX_CONNS":     C.GT_MAX_CONNS,
		"GT_LL_LINE":       C.GT_LL_LINE,
		"GT_SEND":          C.GT_SEND,
		"GT_RECV":          C.GT_RECV,
		"GT_RRS":           C.GT_RECV_REDUCE_SEND,
		"GT_RRCS":          C.GT_RECV_REDUCE_COPY_SEND,
		"GT_RCS":           C.GT_RECV_COPY_SEND,
		"GT_COPY":          C.GT_COPY,
		"GT_IN":            C.GT_IN,
		"GT_OUT":           C.GT_OUT,
		"GT_PROTO_LL":      C.GT_PROTO_LL,
		"GT_PROTO_SIMPLE":  C.GT_PROTO_SIMPLE,
		"GT_ROLE_SEND":     C.GT_ROLE_SEND,
		"GT_ERR_TIMEOUT":   C.GT_ERR_TIMEOUT,
		"GT_ERR_ABORT":     C.GT_ERR_ABORT,
	}
}
