//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// egret_xdp steers the two kinds of traffic the Egret gateway handles in
// userspace to the AF_XDP socket of the receive queue:
//
//   - tunnel traffic: UDP to port 4789 (VXLAN) or 6081 (Geneve) whose
//     destination is a local VTEP address (maps vtep4 / vtep6), of a
//     configured (tunnel type, VNI) pair (map tunnels);
//   - traffic to a hosted egress IP (maps egress4 / egress6), any protocol.
//
// Everything else (ARP, SSH, kubelet, fragments of tunnel packets...) gets
// XDP_PASS and reaches the kernel untouched. That includes tunnel packets of
// another type or VNI (counted, STAT_TUNNEL_OTHER): a CNI that tunnels on the
// same port to the node's address (Calico VXLAN, Antrea, OVN Geneve, flannel
// set to 4789) owns them, and without a kernel device for their VNI the
// kernel drops them as it would without Egret. Until a pair is configured no
// tunnel packet is taken. Up to two VLAN tags (802.1Q,
// 802.1ad) are looked through.
//
// When no socket is registered for the queue (no gateway process runs: a
// crash, or the gap of a graceful restart) the frame is passed to the
// kernel, unless the stopping gateway set a hold (map ctl): then, until the
// hold's deadline, it is dropped and counted (STAT_HELD), so the kernel
// neither answers an egress IP it still carries (RST, ICMP) nor sees the
// tunnel traffic while the next process starts. Host traffic is never held.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define MAX_QUEUES 256
#define MAX_ADDRS 4096

#define PORT_VXLAN 4789
#define PORT_GENEVE 6081

struct vlan_hdr {
	__be16 tci;
	__be16 proto;
};

struct in6_key {
	__u8 a[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_ADDRS);
	__type(key, __be32);
	__type(value, __u8);
} vtep4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_ADDRS);
	__type(key, struct in6_key);
	__type(value, __u8);
} vtep6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_ADDRS);
	__type(key, __be32);
	__type(value, __u8);
} egress4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_ADDRS);
	__type(key, struct in6_key);
	__type(value, __u8);
} egress6 SEC(".maps");

#define MAX_TUNNELS 64

// tunnel_key is one tunnel the gateway accepts: the UDP port of its type
// and its VNI.
struct tunnel_key {
	__be16 port;
	__u16 pad;
	__u32 vni;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TUNNELS);
	__type(key, struct tunnel_key);
	__type(value, __u8);
} tunnels SEC(".maps");

// Counter indexes in the per-CPU stats array; keep in step with loader.go.
enum {
	STAT_PASS = 0,
	STAT_TUNNEL = 1,
	STAT_EGRESS = 2,
	STAT_TUNNEL_OTHER = 3,
	STAT_HELD = 4,
	STAT_NO_SOCKET = 5,
	STAT_MAX = 6,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &idx);
	if (v)
		*v += 1;
}

// ctl[0] is the hold: CLOCK_MONOTONIC nanoseconds until which a frame for a
// socket that is not there is dropped instead of passed; 0 (as loaded) is
// no hold. Set by the stopping gateway (Program.Hold); keep in step with
// loader.go.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} ctl SEC(".maps");

static __always_inline int to_socket(struct xdp_md *ctx, __u32 stat)
{
	count(stat);
	// The flags' low bits are the action when the slot holds no socket.
	// 0 (XDP_ABORTED) is chosen as a marker that never leaves this
	// function: the slow path below decides, so the common case costs no
	// lookup of ctl.
	long act = bpf_redirect_map(&xsks, ctx->rx_queue_index, 0);
	if (act == XDP_REDIRECT)
		return XDP_REDIRECT;
	__u32 zero = 0;
	__u64 *until = bpf_map_lookup_elem(&ctl, &zero);
	if (until && *until && bpf_ktime_get_ns() < *until) {
		count(STAT_HELD);
		return XDP_DROP;
	}
	count(STAT_NO_SOCKET);
	return XDP_PASS;
}

// to_tunnel handles UDP to a local VTEP: tunnel packets of a configured type
// and VNI go to the socket, anything else is the kernel's.
static __always_inline int to_tunnel(struct xdp_md *ctx, struct udphdr *udp, void *end)
{
	if (udp->dest != bpf_htons(PORT_VXLAN) && udp->dest != bpf_htons(PORT_GENEVE)) {
		count(STAT_PASS);
		return XDP_PASS;
	}
	// VXLAN and Geneve both carry the VNI in bytes 4-6 of their 8-byte
	// header. A truncated one is nobody's tunnel packet: the kernel's.
	__u8 *h = (void *)(udp + 1);
	if ((void *)(h + 8) > end)
		goto other;
	struct tunnel_key k = {
		.port = udp->dest,
		.vni = (__u32)h[4] << 16 | (__u32)h[5] << 8 | h[6],
	};
	if (bpf_map_lookup_elem(&tunnels, &k))
		return to_socket(ctx, STAT_TUNNEL);
other:
	count(STAT_TUNNEL_OTHER);
	return XDP_PASS;
}

SEC("xdp")
int egret_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	void *l3;
	__be16 proto;

	if ((void *)(eth + 1) > end)
		goto pass;
	proto = eth->h_proto;
	l3 = eth + 1;

#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		struct vlan_hdr *vh = l3;
		if ((void *)(vh + 1) > end)
			goto pass;
		proto = vh->proto;
		l3 = vh + 1;
	}

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = l3;
		if ((void *)(ip + 1) > end || ip->version != 4 || ip->ihl < 5)
			goto pass;
		__be32 dst = ip->daddr;
		if (bpf_map_lookup_elem(&egress4, &dst))
			return to_socket(ctx, STAT_EGRESS);
		if (ip->protocol != IPPROTO_UDP)
			goto pass;
		// Fragments (any but a whole datagram) are the kernel's to reassemble.
		if (ip->frag_off & bpf_htons(0x3fff))
			goto pass;
		if (!bpf_map_lookup_elem(&vtep4, &dst))
			goto pass;
		struct udphdr *udp = l3 + ip->ihl * 4;
		if ((void *)(udp + 1) > end)
			goto pass;
		return to_tunnel(ctx, udp, end);
	}

	if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = l3;
		if ((void *)(ip6 + 1) > end || ip6->version != 6)
			goto pass;
		struct in6_key dst;
		__builtin_memcpy(dst.a, &ip6->daddr, sizeof(dst.a));
		if (bpf_map_lookup_elem(&egress6, &dst)) {
			// Neighbour discovery for an egress IP (router/neighbour
			// solicitations and advertisements, redirects: ICMPv6 types
			// 133-137) is the kernel's to answer, as ARP is for IPv4:
			// the address is on the interface, and a unicast NS that
			// went unanswered would cost a packet at every reachability
			// check of the router.
			if (ip6->nexthdr == IPPROTO_ICMPV6) {
				__u8 *icmp_type = (void *)(ip6 + 1);
				if ((void *)(icmp_type + 1) > end)
					goto pass;
				if (*icmp_type >= 133 && *icmp_type <= 137)
					goto pass;
			}
			return to_socket(ctx, STAT_EGRESS);
		}
		// Extension headers before UDP are left to the kernel: tunnel
		// peers do not send them.
		if (ip6->nexthdr != IPPROTO_UDP)
			goto pass;
		if (!bpf_map_lookup_elem(&vtep6, &dst))
			goto pass;
		struct udphdr *udp = (void *)(ip6 + 1);
		if ((void *)(udp + 1) > end)
			goto pass;
		return to_tunnel(ctx, udp, end);
	}

pass:
	count(STAT_PASS);
	return XDP_PASS;
}

char __license[] SEC("license") = "Dual BSD/GPL";
