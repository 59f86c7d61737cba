/* gotree device ABI: the tables the Go executor writes into device memory
 * and the kernels read. Plain C so that cgo can check the layout against
 * the Go encoder (cuda/abi.go, TestABILayout). Every field has a fixed
 * width and natural alignment; nothing depends on the compiler.
 *
 * One kernel launch runs one rank's plan: block c runs channel c; a
 * channel has one stream (ring, tree root) or two (tree-split: stream 0
 * reduces up, stream 1 broadcasts down) that run on two thread groups of
 * the block. Offsets and counts are in bytes.
 */
#ifndef GOTREE_ABI_CUH
#define GOTREE_ABI_CUH

#define GT_NSLOTS 8        /* FIFO slots per connection (NCCL_STEPS) */
#define GT_MAX_PEERS 3     /* peers of one step (a tree node's children) */
#define GT_MAX_CONNS 16    /* connections of one channel of one rank */
#define GT_LL_LINE 16      /* bytes per LL line: {data1, flag1, data2, flag2} */

/* GtStep.prim: the values of algorithms.Prim. */
#define GT_SEND 0
#define GT_RECV 1
#define GT_RECV_REDUCE_SEND 2
#define GT_RECV_REDUCE_COPY_SEND 3
#define GT_RECV_COPY_SEND 4
#define GT_COPY 5

/* buffer selectors (algorithms.Buf) */
#define GT_NOBUF 0
#define GT_IN 1
#define GT_OUT 2

/* GtArgs.proto: the values of algorithms.Protocol (LL128 is not run). */
#define GT_PROTO_LL 0
#define GT_PROTO_SIMPLE 2

/* GtConn.role */
#define GT_ROLE_RECV 0
#define GT_ROLE_SEND 1

/* error codes written to GtArgs.err */
#define GT_ERR_TIMEOUT 1
#define GT_ERR_ABORT 2
#define GT_ERR_BADSTEP 3

/* One primitive step (40 bytes). */
typedef struct GtStep {
  unsigned char prim;     /* GT_SEND .. GT_COPY */
  unsigned char nrecv;    /* 0..GT_MAX_PEERS */
  unsigned char nsend;    /* 0..GT_MAX_PEERS */
  unsigned char srcBuf;   /* GT_NOBUF, GT_IN, GT_OUT */
  unsigned char dstBuf;
  unsigned char recv[GT_MAX_PEERS]; /* indices into the channel's GtConn table */
  unsigned char send[GT_MAX_PEERS];
  unsigned char pad[5];
  long long srcOff;       /* bytes */
  long long dstOff;       /* bytes */
  long long bytes;        /* > 0, a multiple of the element size */
} GtStep;

/* One channel of one rank (32 bytes). */
typedef struct GtChannel {
  unsigned int firstStep[2]; /* index into the step array, per stream */
  unsigned int nsteps[2];
  unsigned int nstreams;     /* 0, 1 or 2 */
  unsigned int firstConn;    /* index into the GtConn array */
  unsigned int nconns;       /* <= GT_MAX_CONNS */
  unsigned int pad;
} GtChannel;

/* One end of a directed connection as seen by this rank (48 bytes). The
 * FIFO memory (simple, ll, tail) lives with the receiver, head with the
 * sender; in one process on one GPU it is all plain device memory. */
typedef struct GtConn {
  unsigned long long simple; /* GT_NSLOTS slots of GtArgs.simpleSlotBytes */
  unsigned long long ll;     /* GT_NSLOTS slots of GtArgs.llSlotLines lines */
  unsigned long long tail;   /* u64: slots the sender has posted */
  unsigned long long head;   /* u64: slots the receiver has consumed */
  unsigned int role;         /* GT_ROLE_RECV or GT_ROLE_SEND */
  unsigned int peer;         /* the other rank (diagnostics) */
  unsigned long long pad;
} GtConn;

/* The kernel's only parameter (80 bytes), passed by value. */
typedef struct GtArgs {
  unsigned long long in;        /* the rank's input buffer */
  unsigned long long out;       /* the rank's output buffer (may equal in) */
  unsigned long long steps;     /* GtStep[] */
  unsigned long long channels;  /* GtChannel[gridDim.x] */
  unsigned long long conns;     /* GtConn[] */
  unsigned long long err;       /* u32: 0, or the first GT_ERR_* of the launch */
  unsigned long long abortFlag; /* u32 in host-mapped memory, or 0 */
  unsigned long long timeoutNs; /* a wait longer than this fails; 0: never */
  unsigned int simpleSlotBytes; /* multiple of 16 */
  unsigned int llSlotLines;     /* lines per LL slot; 8 data bytes each */
  unsigned int proto;           /* GT_PROTO_LL or GT_PROTO_SIMPLE */
  unsigned int group0Threads;   /* threads of stream 0 when a channel has 2; multiple of 32 */
} GtArgs;

#endif
