// Package topology models the machine the way NCCL sees it and chooses
// per-channel GPU orders for rings and trees.
//
// The model (model.go) is a directed graph of nodes — GPUs, the NVSwitch
// fabric (all switches merged into one node), PCI switches, CPUs (one per
// NUMA domain), NICs and their network ports (NET) — joined by typed links
// that carry a bandwidth in GB/s. ComputePaths (paths.go) finds the route
// between every pair of nodes and classifies it with NCCL's path types
// (LOC, NVL, NVB, PIX, PXB, PXN, PHB, SYS, NET); Search (search.go) runs
// NCCL's channel search on that graph.
//
// The model, paths and search are pure: they do no I/O and read no clock,
// so any machine can be replayed from a file. Files (gotree's JSON, NCCL's
// NCCL_TOPO_FILE XML, NCCL_GRAPH_DUMP_FILE-style XML) are read and written
// through io.Reader/io.Writer; LoadSystem and the file helpers in files.go
// are the only places that open files. Discovery of the local machine lives
// in the sub-package topology/discover, behind the Discoverer interface.
//
// # GPU indices and local ranks
//
// GPUs are numbered 0..n-1 in the order of System.GPUs(): ascending PCI bus
// id, the order CUDA uses with CUDA_DEVICE_ORDER=PCI_BUS_ID. SearchResult
// orders hold these GPU indices. Each GPU carries the local rank that drives
// it (Node.GPU.Rank); with one rank per GPU assigned in bus-id order, the
// index and the rank are equal. SearchResult.RankOrders maps orders to local
// ranks. To feed algorithms.Layout: Layout.Channels = SearchResult.Channels,
// Layout.Pattern = algorithms.Pattern(SearchResult.Pattern) (both use NCCL's
// numbers: 2 split tree, 3 tree, 4 ring), and Layout.Intra[c][node] is the
// node's global ranks listed in the order RankOrders(sys)[c] gives their
// local ranks. The communicator later doubles the channels (tree0/tree1);
// SearchResult.Channels counts them before that, as NCCL's search does.
//
// Every node of one job must use the same Channels; NCCL makes nodes agree
// by taking the minimum over nodes, which is the caller's job.
package topology
