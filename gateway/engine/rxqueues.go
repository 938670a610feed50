package engine

import "fmt"

// checkRxQueues refuses an AF_XDP interface with more receive queues than
// the engine has workers. The XDP program redirects a frame to the socket of
// the queue it arrived on; a queue without a socket passes its frames to the
// kernel, which has no flow for them. With RSS spreading replies over every
// queue, 2 workers on a 16-queue NIC would hand 7 replies in 8 to the kernel.
//
// Egret does not change the channel count itself (ETHTOOL_SCHANNELS): the
// count is the node's, shared with its own traffic, and changing it resets
// the NIC's RSS table and on some drivers the link.
func checkRxQueues(name string, rx, queues int) error {
	if rx <= queues {
		return nil
	}
	return fmt.Errorf("engine: interface %s has %d receive queues but the gateway runs %d workers, so frames on queues %d–%d would go to the kernel instead of the gateway: set queues (--queues) to %d, or lower the interface's channels to %d (ethtool -L %s combined %d, or rx %d on NICs with separate RX channels)",
		name, rx, queues, queues, rx-1, rx, queues, name, queues, queues)
}
