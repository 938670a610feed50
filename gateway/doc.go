// Package gateway is Egret's data plane: one parse per frame into a reused
// Parsed, then the pipeline that turns tunnel traffic from worker nodes into
// SNATed packets towards the outside, and replies from the outside back into
// the tunnel towards the pod's node.
//
// The entry point for I/O layers (AF_XDP, AF_PACKET, in-memory) is
// Processor.Process: it takes a batch of frames from a caller buffer, writes the
// frames to send into caller-owned output buffers and says for each frame
// whether to drop it (with a reason), send it out an interface, or pass it to
// the kernel. docs/pipeline.md walks through it.
package gateway
